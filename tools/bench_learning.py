"""Learning curves: train `g1_walk` with SAC and with FlashSAC for the same env-step budget through
real `unilab apply` runs, print the mean episode return at fixed env-step marks, and save the
curves as a PNG.

    python tools/bench_learning.py [--spec specs/g1.toml] [--env-steps 200000] [--out docs/learning.png]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def algo_table(algo: str) -> str:
    """`sac` -> `{name="sac"}`; an inline TOML table passes through (a CPU-sized FlashSAC, say)."""
    return algo if algo.startswith("{") else f'{{name="{algo}"}}'


def run(spec: Path, algo: str, env_steps: int, extra: list[str]) -> list[tuple[int, float]]:
    out = Path(tempfile.mkdtemp(prefix="bench_learning_"))
    sets = [
        f"algo={algo_table(algo)}",
        f"run.total_env_steps={env_steps}",
        f'run.output_dir="{out}"',
        "run.log_every_seconds=5.0",
    ]
    cmd = [sys.executable, "-m", "unilab", "apply", str(spec), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    for s in extra:
        cmd += ["--set", s]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    return [
        (e["env_steps"], e["episode_return"])
        for e in events
        if e["event"] == "iteration" and e.get("episode_return") is not None
    ]


def at(curve: list[tuple[int, float]], step: int) -> float | None:
    """The return reported closest to (not after) `step`."""
    before = [r for s, r in curve if s <= step]
    return before[-1] if before else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "specs" / "g1.toml")
    ap.add_argument("--env-steps", type=int, default=200_000)
    ap.add_argument(
        "--algo",
        action="append",
        dest="algos",
        metavar="NAME|TABLE",
        help="an algorithm name or an inline TOML [algo] table (repeatable); default: the spec's "
        "SAC and a CPU-sized FlashSAC",
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra overrides for both runs")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "learning.png")
    args = ap.parse_args()
    algos = args.algos or [
        '{name="sac", alpha_init=0.001}',
        '{name="flashsac", batch_size=512, hidden_dims=[128], expansion=2}',
    ]
    curves = {a: run(args.spec, a, args.env_steps, args.set) for a in algos}
    marks = [args.env_steps * k // 4 for k in range(1, 5)]
    print("mean episode return at env steps: " + "  ".join(f"{m:>9,}" for m in marks))
    for algo, curve in curves.items():
        vals = ["       --" if at(curve, m) is None else f"{at(curve, m):9.2f}" for m in marks]
        print(f"{algo}\n{'':<33}" + "  ".join(vals))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for algo, curve in curves.items():
        ax.plot([s for s, _ in curve], [r for _, r in curve], label=algo.replace("name=", ""))
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode return")
    ax.set_title(f"g1_walk ({args.spec.name}), same budget per algorithm")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"curves saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
