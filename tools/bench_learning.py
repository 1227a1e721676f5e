"""Learning curves through real `unilab apply` runs, per algorithm and seed.

Trains a spec (default `specs/g1.toml`) for the same env-step budget per run; prints the mean
training episode return at fixed env-step marks and a deterministic `unilab eval` of each final
policy, and saves the curves as a PNG.

    python tools/bench_learning.py [--spec specs/g1.toml] [--env-steps N] [--seeds 0,1]
                                   [--algo spec|NAME|TABLE ...] [--out docs/learning.png]
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


def algo_table(algo: str) -> str:
    """`sac` -> `{name="sac"}`; an inline TOML table passes through (a CPU-sized FlashSAC, say)."""
    return algo if algo.startswith("{") else f'{{name="{algo}"}}'


def run(spec: Path, algo: str, seed: int, env_steps: int, extra: list[str]) -> tuple[list[tuple[int, float]], Path]:
    """The (env steps, mean episode return) curve of one run, and its run directory."""
    out = Path(tempfile.mkdtemp(prefix="bench_learning_"))
    sets = [
        f"run.seed={seed}",
        f"run.total_env_steps={env_steps}",
        f'run.output_dir="{out}"',
        "run.log_every_seconds=5.0",
    ]
    if algo != "spec":
        sets.append(f"algo={algo_table(algo)}")
    cmd = [sys.executable, "-m", "unilab", "apply", str(spec), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    for s in extra:
        cmd += ["--set", s]
    _run(cmd)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    curve = [
        (e["env_steps"], e["episode_return"])
        for e in events
        if e["event"] == "iteration" and e.get("episode_return") is not None
    ]
    return curve, run_dir


def evaluate(run_dir: Path, episodes: int = 32) -> dict:
    """`unilab eval RUN_DIR --json` of the run's final policy (deterministic actions)."""
    cmd = [sys.executable, "-m", "unilab", "eval", str(run_dir), "--episodes", str(episodes), "--json"]
    return json.loads(_run(cmd))


def _run(cmd: list[str]) -> str:
    """A unilab command's stdout; its own error message, not a CalledProcessError, on failure."""
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd[2:4])} failed (exit {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def at(curve: list[tuple[int, float]], step: int) -> float | None:
    """The return reported closest to (not after) `step`."""
    before = [r for s, r in curve if s <= step]
    return before[-1] if before else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "specs" / "g1.toml")
    ap.add_argument("--env-steps", type=int, help="env steps per run (default: the spec's run.total_env_steps)")
    ap.add_argument("--seeds", default="0", help="comma-separated run.seed values, one run each (default 0)")
    ap.add_argument(
        "--algo",
        action="append",
        dest="algos",
        metavar="spec|NAME|TABLE",
        help="`spec` (the spec's own [algo]), an algorithm name or an inline TOML [algo] table "
        "(repeatable); default: spec",
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra overrides for every run")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "learning.png")
    args = ap.parse_args()
    algos = args.algos or ["spec"]
    seeds = [int(x) for x in args.seeds.split(",")]
    spec = tomllib.loads(args.spec.read_text())
    env_steps = args.env_steps or int(spec["run"]["total_env_steps"])
    if any(s.startswith("run.total_env_steps=") for s in args.set):
        sys.exit("pass the budget as --env-steps N, not --set run.total_env_steps (the marks follow --env-steps)")
    curves: dict[str, list[tuple[int, float]]] = {}
    evals: dict[str, dict] = {}
    for algo in algos:
        for seed in seeds:
            shown = f"{spec['algo']['name']} (the spec's)" if algo == "spec" else algo.replace("name=", "")
            label = f"{shown} seed {seed}"
            curves[label], run_dir = run(args.spec, algo, seed, env_steps, args.set)
            evals[label] = evaluate(run_dir)
    marks = [env_steps * k // 4 for k in range(1, 5)]
    print("mean training episode return at env steps: " + "  ".join(f"{m:>9,}" for m in marks))
    for label, curve in curves.items():
        vals = ["       --" if at(curve, m) is None else f"{at(curve, m):9.2f}" for m in marks]
        print(f"{label:<42}" + "  ".join(vals))
    print("eval of the final policy (unilab eval --episodes 32, deterministic):")
    for label, rep in evals.items():
        r, n = rep["episode_return"], rep["episode_length"]
        print(
            f"{label:<42} return {r['mean']:.2f} +- {r['std']:.2f}, length {n['mean']:.0f} steps, "
            f"{rep['ended_by_time_out']}/{rep['episodes']} to the time limit"
        )
        if (t := rep.get("command_tracking")) is not None:  # g1_walk: does it walk, or only stand?
            print(
                f"{'':<42} |v_xy - cmd| {t['lin_vel_xy_error']:.3f} m/s (standing still "
                f"{t['standing_lin_vel_xy_error']:.3f}), |w_z - cmd| {t['yaw_rate_error']:.3f} rad/s "
                f"(standing still {t['standing_yaw_rate_error']:.3f})"
            )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, curve in curves.items():
        ax.plot([s for s, _ in curve], [r for _, r in curve], label=label)
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode return")
    ax.set_title(f"{args.spec.name}: training episode return, {env_steps:,} env steps per run")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"curves saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
