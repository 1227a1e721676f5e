"""Learning curves through real `unilab apply` runs, per algorithm and seed.

Trains a spec (default `specs/g1.toml`) for the same env-step budget per run; prints the mean
training episode return at fixed env-step marks (sampled by log events on the wall clock, so it
varies between runs of the same weights), a deterministic `unilab eval` of the checkpoints saved at
every eighth of the budget (the figures to compare two builds by: they depend only on the weights)
and of each final policy, and saves the curves as a PNG.

For `g1_walk` it also plots how
closely each followed its velocity commands: the mean |v_xy - cmd| and |w_z - cmd| over a robot
standing still under the same commands (1: no better than standing; the walking target is 0.5
and 0.6), prints each evaluated checkpoint's gait (swing share, touchdowns per second, stance
width) and action saturation, and a go/no-go line per run at 1M env steps: go when the policy
evaluated there swings a foot on at least a fifth of its steps and its |v_xy - cmd| is at most
0.8 of a standing robot's (a policy that stands to collect its return fails the first). Its last
lines, one per run:

    <label>: walk_lin_vs_standing=<ratio> walk_yaw_vs_standing=<ratio>

of the final policy under `unilab eval RUN_DIR --episodes 64`.

    python tools/bench_learning.py [--spec specs/g1.toml] [--env-steps N] [--seeds 0,1]
                                   [--algo spec|NAME|TABLE ...] [--out docs/learning.png]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from bench_learner import cpu_line  # noqa: E402  (beside this file)


def algo_table(algo: str) -> str:
    """`sac` -> `{name="sac"}`; an inline TOML table passes through (a CPU-sized FlashSAC, say)."""
    return algo if algo.startswith("{") else f'{{name="{algo}"}}'


CHECKPOINTS = 8  # evaluated per run, evenly over the budget
FINAL_EPISODES = 64  # the walking target's `unilab eval --episodes 64`
CHECKPOINT_EPISODES = 32
# The go/no-go of a g1_walk run: at GO_ENV_STEPS the evaluated policy swings a foot on at least
# GO_SWING_SHARE of its steps and tracks its linear velocity command within GO_LIN_VS_STANDING of
# a standing robot's error.
GO_ENV_STEPS = 1_000_000
GO_SWING_SHARE = 0.2
GO_LIN_VS_STANDING = 0.8


def run(
    spec: Path, algo: str, seed: int, env_steps: int, extra: list[str]
) -> tuple[list[tuple[int, float, float]], Path]:
    """The (env steps, wall seconds, mean episode return) curve of one run, and its run directory."""
    out = Path(tempfile.mkdtemp(prefix="bench_learning_"))
    sets = [
        f"run.seed={seed}",
        f"run.total_env_steps={env_steps}",
        f'run.output_dir="{out}"',
        "run.log_every_seconds=5.0",
        f"run.checkpoint_every_env_steps={max(1, env_steps // CHECKPOINTS)}",
        f"run.checkpoint_keep={CHECKPOINTS + 1}",
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
        (e["env_steps"], e.get("elapsed_s", 0.0), e["episode_return"])
        for e in events
        if e["event"] == "iteration" and e.get("episode_return") is not None
    ]
    return curve, run_dir


def evaluate(run_dir: Path, episodes: int = FINAL_EPISODES, checkpoint: Path | None = None) -> dict:
    """`unilab eval RUN_DIR --json` of the run's final policy, or of `checkpoint` (deterministic actions)."""
    cmd = [sys.executable, "-m", "unilab", "eval", str(run_dir), "--episodes", str(episodes), "--json"]
    if checkpoint is not None:
        cmd += ["--checkpoint", checkpoint.name]
    return json.loads(_run(cmd))


def tracking_ratios(report: dict) -> tuple[float, float] | None:
    """(|v_xy - cmd|, |w_z - cmd|) over a standing robot's under the same commands; None off g1_walk."""
    t = report.get("command_tracking")
    if t is None:
        return None
    return (
        t["lin_vel_xy_error"] / max(t["standing_lin_vel_xy_error"], 1e-9),
        t["yaw_rate_error"] / max(t["standing_yaw_rate_error"], 1e-9),
    )


def checkpoint_evals(run_dir: Path) -> list[tuple[int, dict]]:
    """(env steps, `unilab eval` report) of every checkpoint the run kept but its last. Unlike the
    training returns, which log events placed by the wall clock sample, these depend only on the
    weights: two runs that learned the same weights print the same figures."""
    return [
        (int(ckpt.stem.split("-")[1]), evaluate(run_dir, CHECKPOINT_EPISODES, ckpt))
        for ckpt in sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[:-1]
    ]


def checkpoint_tracking(reports: list[tuple[int, dict]]) -> list[tuple[int, float, float]]:
    """(env steps, lin ratio, yaw ratio) of each report; empty off g1_walk."""
    points = [(s, *ratios) for s, rep in reports if (ratios := tracking_ratios(rep)) is not None]
    return points if len(points) == len(reports) else []


def gait_text(report: dict) -> str:
    """The gait (g1_walk) and action saturation of one `unilab eval` report, in a few words."""
    parts = []
    if (g := report.get("gait")) is not None:
        width = f", stance {g['stance_width']:.3f} m" if g.get("stance_width") is not None else ""
        parts.append(f"swing {g['swing_share']:.3f}, {g['touchdowns_per_s']:.2f} steps/s{width}")
    if (sat := report.get("action_saturation")) is not None:
        parts.append(f"saturation {sat:.3f}")
    return "; ".join(parts) or "--"


def go_no_go(reports: list[tuple[int, dict]], env_steps: int) -> str:
    """Go or no-go at GO_ENV_STEPS from the first evaluated policy at or past it (`reports`: env
    steps and `unilab eval` report, ascending), naming each metric that failed."""
    at_mark = [(s, rep) for s, rep in reports if s >= GO_ENV_STEPS]
    if not at_mark:
        return f"n/a (the run trained {env_steps:,} env steps, short of {GO_ENV_STEPS:,})"
    steps, rep = at_mark[0]
    gait, ratios = rep.get("gait"), tracking_ratios(rep)
    if gait is None or ratios is None:
        return "n/a (no gait or command tracking: not g1_walk)"
    failed = []
    if gait["swing_share"] < GO_SWING_SHARE:
        failed.append(f"swing share {gait['swing_share']:.3f} < {GO_SWING_SHARE}")
    if ratios[0] > GO_LIN_VS_STANDING:
        failed.append(f"lin-velocity error vs standing {ratios[0]:.3f} > {GO_LIN_VS_STANDING}")
    verdict = "NO-GO: " + "; ".join(failed) if failed else "GO"
    return (
        f"{verdict} (policy of {steps:,} env steps: swing share {gait['swing_share']:.3f}, "
        f"lin-velocity error vs standing {ratios[0]:.3f})"
    )


def elapsed_at(curve: list[tuple[int, float, float]], step: int) -> float | None:
    """The run's wall seconds when it reported `step` env steps (the first report at or after it)."""
    after = [t for s, t, _ in curve if s >= step]
    return after[0] if after else (curve[-1][1] if curve else None)


def _run(cmd: list[str]) -> str:
    """A unilab command's stdout; its own error message, not a CalledProcessError, on failure."""
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd[2:4])} failed (exit {r.returncode}):\n{r.stderr.strip()}")
    return r.stdout


def at(curve: list[tuple[int, float, float]], step: int) -> float | None:
    """The return reported closest to (not after) `step`."""
    before = [r for s, _, r in curve if s <= step]
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
    # Checked before the runs, not after an hour of them.
    if args.out.suffix.lower() != ".png" or not args.out.parent.is_dir():
        sys.exit(f"--out {args.out}: name a .png file in an existing directory (the curves are drawn there)")
    if importlib.util.find_spec("matplotlib") is None:
        sys.exit("the curves need matplotlib, the `profile` extra: bash tools/setup.sh profile")
    print(cpu_line())
    curves: dict[str, list[tuple[int, float, float]]] = {}
    evals: dict[str, dict] = {}
    tracking: dict[str, list[tuple[int, float, float]]] = {}
    checkpoints: dict[str, list[tuple[int, dict]]] = {}
    for algo in algos:
        for seed in seeds:
            shown = f"{spec['algo']['name']} (the spec's)" if algo == "spec" else algo.replace("name=", "")
            label = f"{shown} seed {seed}"
            curves[label], run_dir = run(args.spec, algo, seed, env_steps, args.set)
            evals[label] = evaluate(run_dir)
            checkpoints[label] = checkpoint_evals(run_dir)
            tracking[label] = checkpoint_tracking(checkpoints[label])
            if (final := tracking_ratios(evals[label])) is not None:
                tracking[label].append((env_steps, *final))
            wall = curves[label][-1][1] if curves[label] else 0.0
            print(f"{label}: trained in {wall / 60:.1f} min ({run_dir})", flush=True)
    marks = [env_steps * k // 4 for k in range(1, 5)]
    # Sampled by log events every 5 s of wall clock: two runs of the same weights print different figures.
    print("mean training episode return at env steps: " + "  ".join(f"{m:>9,}" for m in marks))
    for label, curve in curves.items():
        vals = ["       --" if at(curve, m) is None else f"{at(curve, m):9.2f}" for m in marks]
        print(f"{label:<42}" + "  ".join(vals))
    steps = sorted({s for reports in checkpoints.values() for s, _ in reports})
    if steps:
        print(
            f"eval return of the checkpoints (unilab eval --episodes {CHECKPOINT_EPISODES}, deterministic) at env "
            "steps: " + "  ".join(f"{s:>9,}" for s in steps)
        )
        for label, reports in checkpoints.items():
            by_step = {s: rep["episode_return"]["mean"] for s, rep in reports}
            print(f"{label:<42}" + "  ".join("       --" if s not in by_step else f"{by_step[s]:9.4f}" for s in steps))
        print("gait and action saturation of the checkpoints (swing share, touchdowns per second, stance width):")
        for label, reports in checkpoints.items():
            print(label)
            for s, rep in reports:
                print(f"  {s:>11,}  {gait_text(rep)}")
    print(f"eval of the final policy (unilab eval --episodes {FINAL_EPISODES}, deterministic):")
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
            if (a := t.get("averaged")) is not None:  # a stride's sway averaged out
                print(
                    f"{'':<42} over {a['window_s']:g} s windows: |v_xy - cmd| {a['lin_vel_xy_error']:.3f} m/s "
                    f"({a['lin_vel_xy_error'] / max(a['standing_lin_vel_xy_error'], 1e-9):.2f}x standing), "
                    f"|w_z - cmd| {a['yaw_rate_error']:.3f} rad/s "
                    f"({a['yaw_rate_error'] / max(a['standing_yaw_rate_error'], 1e-9):.2f}x standing)"
                )
        print(f"{'':<42} {gait_text(rep)}")
    print(
        f"go/no-go at {GO_ENV_STEPS:,} env steps (swing share >= {GO_SWING_SHARE}, |v_xy - cmd| <= "
        f"{GO_LIN_VS_STANDING} of standing still's):"
    )
    for label in evals:
        print(f"{label:<42} {go_no_go([*checkpoints[label], (env_steps, evals[label])], env_steps)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    walk = any(tracking.values())
    fig, axes = plt.subplots(2 if walk else 1, 2, figsize=(11, 7 if walk else 3.8), squeeze=False)
    for label, curve in curves.items():
        axes[0][0].plot([s for s, _, _ in curve], [r for _, _, r in curve], label=label)
        axes[0][1].plot([t / 60 for _, t, _ in curve], [r for _, _, r in curve], label=label)
    for ax, xlabel in zip(axes[0], ("env steps", "wall time, minutes"), strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean training episode return")
    if walk:
        for label, points in tracking.items():
            steps = [p[0] for p in points]
            line = axes[1][0].plot(steps, [p[1] for p in points], marker="o", label=f"{label}: |v_xy - cmd|")[0]
            axes[1][0].plot(
                steps,
                [p[2] for p in points],
                marker="s",
                ls="--",
                color=line.get_color(),
                label=f"{label}: |w_z - cmd|",
            )
            minutes = [(elapsed_at(curves[label], s) or 0.0) / 60 for s in steps]
            axes[1][1].plot(minutes, [p[1] for p in points], marker="o", color=line.get_color())
            axes[1][1].plot(minutes, [p[2] for p in points], marker="s", ls="--", color=line.get_color())
        for ax, xlabel in zip(axes[1], ("env steps", "wall time, minutes"), strict=True):
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.axhline(0.5, color="green", lw=0.8, ls=":")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("tracking error / standing still's")
        axes[1][0].legend(fontsize=7)
    axes[0][0].legend(fontsize=7)
    for ax in (a for row in axes for a in row):
        ax.grid(alpha=0.3)
    fig.suptitle(f"{args.spec.name}: {env_steps:,} env steps per run")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"curves saved to {args.out}")
    for label, rep in evals.items():
        if (ratios := tracking_ratios(rep)) is not None:
            print(f"{label}: walk_lin_vs_standing={ratios[0]:.3f} walk_yaw_vs_standing={ratios[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
