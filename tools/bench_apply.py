"""End-to-end throughput of `unilab apply` against the collector alone, side by side in one run.

    python tools/bench_apply.py --spec specs/g1.toml [--seconds 60] [--set KEY=VALUE ...]

(1) collector only: the plan's collector (same envs, workers, collector CPUs) stepping random
actions;
(2) a real `unilab apply` of the spec, its steady-state env steps/s and updates/s taken from the
last 50% of its `iteration` events (after warm-up, with updates running).
Where the plan reserves CPUs for the learner, (1) runs on the collector's CPUs only, so the bench
also prints the collector alone on the rank's whole block (the learner's CPUs too, one worker per
CPU): what the physics could do with no learner at all, for comparison.
Last line: apply_vs_collector=<(2) env steps/s / (1) env steps/s> (target >= 0.7).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collector_only(spec_path: Path, overrides: list[str], seconds: float, whole_block: bool = False) -> float:
    import torch

    from unilab.collect.build import build_collector
    from unilab.host.probe import probe_host
    from unilab.plan.compile import compile_plan
    from unilab.spec.load import load_spec

    loaded = load_spec(spec_path, overrides)
    plan = compile_plan(loaded.spec, probe_host(), loaded.spec_dir)
    rp = plan.ranks[0]
    cpus = sorted(rp.learner_cpu_ids + rp.collector_cpu_ids) if whole_block else rp.collector_cpu_ids
    workers = min(len(cpus), plan.task.num_envs) if whole_block else plan.sim.workers_per_rank
    torch.set_num_threads(1)
    col = build_collector(plan.task, plan.sim, spec_dir=loaded.spec_dir, workers=workers, cpu_ids=cpus, seed=rp.seed)
    try:
        col.reset_all()
        actions = torch.empty(col.num_envs, col.action_dim)
        gen = torch.Generator().manual_seed(0)
        for _ in range(20):  # warm-up
            col.step(torch.rand(actions.shape, generator=gen, out=actions).mul_(2).sub_(1))
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            col.step(torch.rand(actions.shape, generator=gen, out=actions).mul_(2).sub_(1))
            steps += col.num_envs
        return steps / (time.perf_counter() - t0)
    finally:
        col.close()


def apply_run(spec_path: Path, overrides: list[str], seconds: float, rate_guess: float) -> tuple[float, float, Path]:
    out = Path(tempfile.mkdtemp(prefix="bench_apply_"))
    total = int(rate_guess * seconds)
    sets = [
        *overrides,
        f"run.total_env_steps={total}",
        f'run.output_dir="{out}"',
        "run.log_every_seconds=2.0",
        f"algo.warmup_env_steps={max(1, total // 10)}",
    ]
    cmd = [sys.executable, "-m", "unilab", "apply", str(spec_path), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    its = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    its = [e for e in its if e["event"] == "iteration" and e["updates"] > 0]
    if len(its) < 4:
        raise SystemExit(f"too few samples ({len(its)}); raise --seconds")
    tail = its[len(its) // 2 :]
    # Rates over the steady-state window, from the counters at its two ends.
    dt = tail[-1]["elapsed_s"] - tail[0]["elapsed_s"]
    sps = (tail[-1]["env_steps_run"] - tail[0]["env_steps_run"]) / dt
    ups = (tail[-1]["updates"] - tail[0]["updates"]) / dt
    return sps, ups, run_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "specs" / "g1.toml")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the apply run (approximate)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    col = collector_only(args.spec, args.set, min(20.0, args.seconds / 3))
    print(f"collector only (the plan's collector CPUs): {col:,.0f} env steps/s")
    whole = collector_only(args.spec, args.set, min(20.0, args.seconds / 3), whole_block=True)
    print(f"collector only (the rank's whole CPU block): {whole:,.0f} env steps/s")
    sps, ups, run_dir = apply_run(args.spec, args.set, args.seconds, col * 0.5)
    print(f"apply (steady state, last 50% of samples): {sps:,.0f} env steps/s, {ups:,.1f} updates/s  [{run_dir}]")
    print(f"apply_vs_collector_whole_block={sps / whole:.3f}")
    print(f"apply_vs_collector={sps / col:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
