"""End-to-end throughput of `unilab apply` against its learner alone and its collector alone.

    python tools/bench_apply.py                                  # g1.toml at the matched SAC config, ~4 min
    python tools/bench_apply.py --config spec                    # the spec as it is
    python tools/bench_apply.py --set training.torch_threads=1   # another layout, against its own plan

The matched config is the CPU learner comparison's (tools/bench_learner.py): G1 walk, 64 envs,
batch 256, 8 updates per vector env step, twin C51 critic [768, 384, 192] with LayerNorm, actor
[512, 256, 128], SiLU, actor every 4. Three measurements, from one plan of the spec on this host:
(1) learner alone: the plan's learner (its precision and torch_threads, pinned to its CPUs, the
rank's allocator settings) updating from a replay buffer of random transitions, in a process of
its own;
(2) collector alone: the plan's collector (same envs, workers, collector CPUs) stepping random
actions;
(3) a real `unilab apply` of the spec: its steady-state env steps/s and updates/s, taken from the
last 50% of its `iteration` events (after warm-up, with updates running).
Last lines: apply_vs_collector=<(3) env steps/s / (2) env steps/s>, apply_vs_learner=<(3) updates/s /
(1) updates/s>, and apply_vs_slower=<(3) env steps/s / the slower side's alone>, the learner's counted
in env steps through the updates it owes per env step (target >= 0.9: the run goes as fast as its
slower side allows).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAC_MATCHED = (
    'algo={name="sac", batch_size=256, updates_per_step=8.0, warmup_env_steps=5000, alpha_init=0.001, '
    'actor_hidden_dims=[512, 256, 128], critic_hidden_dims=[768, 384, 192], activation="silu", critic="c51", '
    "layer_norm=true, actor_update_every=4}"
)


def plan_of(spec_path: Path, overrides: list[str]) -> tuple[Any, Any]:
    from unilab.host.probe import probe_host
    from unilab.plan.compile import compile_plan
    from unilab.spec.load import load_spec

    loaded = load_spec(spec_path, overrides)
    return compile_plan(loaded.spec, probe_host(), loaded.spec_dir), loaded


def learner_only(spec_path: Path, overrides: list[str], seconds: float) -> float:
    """Child process body: the plan's learner alone, as its rank sets it up."""
    import torch
    from bench_learner import ACT_DIM, OBS_DIM, replay  # beside this file

    from unilab.algos.common import make_learner, planned_precision, replay_n_step
    from unilab.run.cpu_tuning import keep_freed_memory

    plan, _ = plan_of(spec_path, overrides)
    rp = plan.ranks[0]
    torch.set_num_threads(rp.torch_threads)
    keep_freed_memory()
    if rp.learner_cpu_ids:
        os.sched_setaffinity(0, rp.learner_cpu_ids)
    sample = replay(plan.algo.batch_size, replay_n_step(plan.algo))
    learner = make_learner(plan.algo, OBS_DIM, ACT_DIM, torch.device("cpu"), 0, planned_precision(plan))
    for _ in range(2 * plan.algo.actor_update_every):
        learner.update(sample())
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        m = learner.update(sample())
        n += 1
    float(m["critic_loss"])
    return n / (time.perf_counter() - t0)


def collector_only(spec_path: Path, overrides: list[str], seconds: float) -> float:
    import torch

    from unilab.collect.build import build_collector

    plan, loaded = plan_of(spec_path, overrides)
    rp = plan.ranks[0]
    torch.set_num_threads(1)
    col = build_collector(
        plan.task,
        plan.sim,
        spec_dir=loaded.spec_dir,
        workers=plan.sim.workers_per_rank,
        cpu_ids=rp.collector_cpu_ids,
        seed=rp.seed,
    )
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


def child(flag: str, spec: Path, overrides: list[str], seconds: float) -> float:
    """Run one measurement in a fresh process (its own threads, affinity and allocator)."""
    cmd = [sys.executable, __file__, flag, "--spec", str(spec), "--seconds", str(seconds), "--config", "spec"]
    for s in overrides:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise SystemExit(f"{flag} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return float(line[0].split()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "specs" / "g1.toml")
    ap.add_argument("--config", choices=("matched", "spec"), default="matched", help="matched: the SAC config above")
    ap.add_argument("--seconds", type=float, default=120.0, help="length of the apply run (approximate)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--learner-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--collector-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    overrides = ([SAC_MATCHED] if args.config == "matched" else []) + args.set
    if args.learner_only:
        print(f"RESULT {learner_only(args.spec, overrides, args.seconds)}")
        return 0
    if args.collector_only:
        print(f"RESULT {collector_only(args.spec, overrides, args.seconds)}")
        return 0

    from bench_learner import cpu_line  # beside this file

    print(cpu_line(), flush=True)
    plan, _ = plan_of(args.spec, overrides)
    rp, lp = plan.ranks[0], plan.learner
    print(
        f"# plan: precision {lp.precision.effective}, torch_threads {rp.torch_threads}, learner CPUs "
        f"{rp.learner_cpu_ids or 'not pinned'}, collector CPUs {rp.collector_cpu_ids}",
        flush=True,
    )
    short = min(30.0, args.seconds / 4)
    learner = child("--learner-only", args.spec, overrides, short)
    print(f"learner alone: {learner:,.1f} updates/s", flush=True)
    col = child("--collector-only", args.spec, overrides, short)
    print(f"collector alone: {col:,.0f} env steps/s", flush=True)
    per_step = plan.algo.updates_per_step if plan.algo.name != "ppo" else 0.0  # per vector env step
    guess = min(col, learner / per_step * plan.task.num_envs) if per_step else col
    sps, ups, run_dir = apply_run(args.spec, overrides, args.seconds, guess)
    print(f"apply (steady state, last 50% of samples): {sps:,.0f} env steps/s, {ups:,.1f} updates/s  [{run_dir}]")
    # Which side alone is slower, in env steps/s: the learner's rate in env steps is its updates/s
    # over the updates it owes per env step. The run can go no faster than that side.
    learner_sps = learner / per_step * plan.task.num_envs if per_step else float("inf")
    slower = "learner" if learner_sps < col else "collector"
    print(f"slower side alone: the {slower} ({min(learner_sps, col):,.0f} env steps/s)")
    print(f"apply_vs_collector={sps / col:.3f}")
    print(f"apply_vs_learner={ups / learner:.3f}")
    print(f"apply_vs_slower={sps / min(learner_sps, col):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
