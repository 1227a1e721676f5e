"""Collector overhead over raw physics, on the same backend, cores and model.

    python tools/bench_collector.py --spec specs/g1.toml
    python tools/bench_collector.py --spec specs/g1.toml --num-envs 256 --workers 2 --sizes 64,256,1024

(a) raw physics: ``backend.step`` with constant controls (the standing pose), no task code;
(b) the full collector (the spec's task, ``g1_walk`` for specs/g1.toml; ``--task`` overrides it) with
    uniform random actions from a pre-drawn pool (drawing actions is the learner's cost, not the
    collector's);
(c) raw physics replaying exactly the backend calls (controls, resets) the collector made in (b):
    the same physics work as (b) without the task, so (c)/(b)-1 is the cost of the task and
    collector code alone, while (a)/(b)-1 also counts the costlier contacts random actions cause.
All run on one backend instance, in alternating rounds so that load from other processes hits
them alike. Prints env steps/s of each, a per-phase breakdown of the collector step, the same
figures at each of ``--sizes``, and as its last line ``collector_overhead=<(a/b)-1>`` for the
primary size (``--num-envs``, default the spec's ``task.num_envs``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from unilab.collect.build import build_collector  # noqa: E402
from unilab.collect.collector import Collector  # noqa: E402
from unilab.spec.load import load_spec  # noqa: E402
from unilab.spec.models import task_spec  # noqa: E402


class _CallLog:
    """Records every backend.step / backend.reset the collector makes, for an exact replay."""

    def __init__(self, backend: object) -> None:
        self.backend = backend
        self.calls: list[tuple[str, tuple[torch.Tensor, ...]]] = []
        self._step, self._reset = backend.step, backend.reset  # type: ignore[attr-defined]

    def __enter__(self) -> _CallLog:
        def step(ctrl: torch.Tensor):  # type: ignore[no-untyped-def]
            self.calls.append(("step", (ctrl.clone(),)))
            return self._step(ctrl)

        def reset(mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor):  # type: ignore[no-untyped-def]
            self.calls.append(("reset", (mask.clone(), qpos.clone(), qvel.clone())))
            return self._reset(mask, qpos, qvel)

        self.backend.step, self.backend.reset = step, reset  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.backend.step, self.backend.reset  # back to the class's methods

    def replay(self) -> None:
        for kind, args in self.calls:
            (self._step if kind == "step" else self._reset)(*args)


def _rounds(c: Collector, steps: int, rounds: int, action_scale: float) -> tuple[float, float, float]:
    """Per round, each block from the same kind of fresh reset: (a) raw physics with constant
    controls, (b) the collector, (c) raw physics replaying exactly the backend calls (controls,
    resets, pushes) the collector made in (b), from the same start state: identical physics work.
    Returns the median seconds per round of (a), (b), (c): a burst of load from other processes
    spoils one round, not the figure."""
    n, nu = c.num_envs, c.backend.dims.nu
    ctrl = c.task.default_joint_pos.expand(n, -1).clone() if nu == c.action_dim else torch.zeros(n, nu)
    gen = torch.Generator().manual_seed(0)
    pool = [(torch.rand(n, c.action_dim, generator=gen) * 2 - 1) * action_scale for _ in range(8)]
    c.reset_all()
    for i in range(3):  # warm-up both paths
        c.step(pool[i])
        c.backend.step(ctrl)
    c.reset_timings()
    all_worlds = torch.ones(n, dtype=torch.bool)
    raw_s: list[float] = []
    col_s: list[float] = []
    replay_s: list[float] = []
    for _ in range(rounds):
        c.reset_all()
        t0 = time.perf_counter()
        for _ in range(steps):
            c.backend.step(ctrl)
        t1 = time.perf_counter()
        c.reset_all()
        start = (c.backend.state.qpos.clone(), c.backend.state.qvel.clone())
        with _CallLog(c.backend) as log:
            t2 = time.perf_counter()
            for k in range(steps):
                c.step(pool[k % len(pool)])
            t3 = time.perf_counter()
        c.backend.reset(all_worlds, *start)
        t4 = time.perf_counter()
        log.replay()
        t5 = time.perf_counter()
        raw_s.append(t1 - t0)
        col_s.append(t3 - t2)
        replay_s.append(t5 - t4)
    return statistics.median(raw_s), statistics.median(col_s), statistics.median(replay_s)


def _schedule(num_envs: int, env_steps: int, steps: int = 50, min_rounds: int = 5) -> tuple[int, int]:
    """(steps per round, rounds): rounds of ``steps`` env steps at every size (1 s of simulated
    time at 50 Hz: the standing robot of (a) has settled from its reset and not yet collapsed, the
    same regime at every size), about ``env_steps`` per mode in all and at least ``min_rounds``
    rounds for the median."""
    return steps, max(min_rounds, -(-env_steps // (steps * num_envs)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", type=Path, default=ROOT / "specs" / "g1.toml")
    p.add_argument("--num-envs", type=int, default=None, help="primary size (default: task.num_envs)")
    p.add_argument("--workers", type=int, default=None, help="CPU backend workers (default: sim.workers, auto = CPUs)")
    p.add_argument("--sizes", default="64,256,1024", help="comma-separated env counts for the scaling table")
    p.add_argument(
        "--env-steps", type=int, default=24_000, help="env steps per mode and size (at least 5 rounds of 50 steps)"
    )
    p.add_argument(
        "--task",
        default=None,
        choices=["g1_walk", "g1_motion_tracking"],
        help="run this G1 task instead of the spec's (the bench drives the G1's joints)",
    )
    p.add_argument(
        "--action-scale",
        type=float,
        default=1.0,
        help="random actions are uniform in [-s, s] (0: the collector also holds the default pose)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the collector process")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    loaded = load_spec(args.spec)
    spec = loaded.spec
    task = spec.task
    if args.task and args.task != task.name:
        # Another task takes other keys and has other reward terms: keep only the envs and episode.
        clip = {"motion": "builtin:g1_squat"} if args.task == "g1_motion_tracking" else {}
        task = task_spec(name=args.task, num_envs=task.num_envs, episode_length_s=task.episode_length_s, **clip)
    workers = args.workers
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if spec.sim.workers == "auto" else spec.sim.workers
    primary = args.num_envs or task.num_envs
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    print(
        f"spec={args.spec} task={task.name} backend={spec.sim.backend} workers={workers} "
        f"decimation={spec.sim.decimation} timestep={spec.sim.timestep} cpus={sorted(os.sched_getaffinity(0))} "
        f"torch_threads={torch.get_num_threads()}"
    )
    results: dict[int, tuple[float, float]] = {}
    for n in [primary, *[s for s in sizes if s != primary]]:
        w = min(workers, n)
        with build_collector(task, spec.sim, spec_dir=loaded.spec_dir, num_envs=n, workers=w) as c:
            steps, rounds = _schedule(n, args.env_steps)
            raw_s, col_s, replay_s = _rounds(c, steps, rounds, args.action_scale)
            per_round = steps * n
            raw, col, replay = per_round / raw_s, per_round / col_s, per_round / replay_s
            results[n] = (raw, col, replay)
            print(
                f"num_envs={n:5d} (a) raw_physics={raw:7.0f}  (b) collector={col:7.0f}  "
                f"(c) replay={replay:7.0f} env_steps/s  a/b-1={raw / col - 1:+.3f}  c/b-1={replay / col - 1:+.3f}"
            )
            if n == primary:
                t = c.timings()
                per_step = {k: v.total_s / (steps * rounds) * 1e6 for k, v in t.items()}
                total_us = sum(per_step.values())
                task_share = (total_us - per_step["physics_step"]) / per_step["physics_step"]
                print(
                    f"  collector step breakdown at {n} envs (mean us per collector step of all {n} envs, "
                    f"{total_us:.0f} us in all):"
                )
                for k, us in per_step.items():
                    print(f"    {k:24s} {us:9.1f}  ({100 * us / total_us:4.1f}%)")
    raw, col, replay = results[primary]
    # Non-physics time of the collector step relative to its own physics time: the task code's
    # cost independent of the contact regime the actions drive the robot into.
    print(f"collector_task_time_over_physics_time={task_share:.4f}")
    print(f"replay_physics_env_steps_per_s={replay:.0f}")
    print(f"collector_overhead_vs_replay={replay / col - 1:.4f}")
    print(f"raw_physics_env_steps_per_s={raw:.0f}")
    print(f"collector_env_steps_per_s={col:.0f}")
    print(f"collector_overhead={raw / col - 1:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
