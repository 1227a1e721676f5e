"""Data-parallel scaling: real applies of one spec at several world sizes, side by side in one run.

    python tools/bench_dp_scaling.py --spec specs/g1_dp2_cpu.toml --ranks 1,2 [--seconds 60]

Each world size runs `unilab apply` with `training.devices` set to that many copies of the spec's
first device (CPU ranks, or GPU indices 0..N-1 when the spec uses GPUs); steady-state env steps/s
(summed over ranks) come from the last 50% of the iteration events. Last lines: the table,
`dp_scaling=<throughput at the largest / at the smallest world size>` and a verdict against 1.7x
(UniLab's two-GPU figure). On a 2-core machine two CPU ranks share the cores: report the figure as is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.7


def run(spec: Path, ranks: int, seconds: float, extra: list[str]) -> float:
    first = tomllib.loads(spec.read_text()).get("training", {}).get("devices", "cpu")
    first = first[0] if isinstance(first, list) else first
    devices = [first] * ranks if first == "cpu" else list(range(ranks))
    out = Path(tempfile.mkdtemp(prefix=f"bench_dp{ranks}_"))
    sets = [
        f"training.devices={json.dumps(devices)}",
        f'run.output_dir="{out}"',
        "run.log_every_seconds=2.0",
        f"run.total_env_steps={int(600 * seconds * ranks)}",
        *extra,
    ]
    cmd = [sys.executable, "-m", "unilab", "apply", str(spec), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(timeout=seconds * 1.5 + 120)
    except subprocess.TimeoutExpired:
        proc.send_signal(2)  # enough samples: stop gracefully
        proc.wait(timeout=120)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    its = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    its = [e for e in its if e["event"] == "iteration" and e["updates"] > 0]
    if len(its) < 4:
        raise SystemExit(f"{ranks} rank(s): too few samples ({len(its)}); raise --seconds")
    tail = its[len(its) // 2 :]
    return (tail[-1]["env_steps"] - tail[0]["env_steps"]) / (tail[-1]["elapsed_s"] - tail[0]["elapsed_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "specs" / "g1_dp2_cpu.toml")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--seconds", type=float, default=60.0, help="approximate length of each apply")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    rates = {n: run(args.spec, n, args.seconds, args.set) for n in sizes}
    for n, r in rates.items():
        print(f"{n} rank(s): {r:,.0f} env steps/s (summed over ranks, steady state)")
    ratio = rates[max(sizes)] / rates[min(sizes)]
    verdict = "meets" if ratio >= TARGET else "below"
    print(f"verdict: {verdict} the {TARGET}x threshold at {max(sizes)} vs {min(sizes)} rank(s)")
    print(f"dp_scaling={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
