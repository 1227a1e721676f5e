"""Run one arm repeat: a real `unilab apply` subprocess into its own directory, then its measured
window from the manifest versions the run logged (events.jsonl holds every manifest written).

Windows are placed on whole blocks of PUBLISH_EVERY_SYNCS syncs (and whole PPO rollouts), so no
window is shorter than 64 syncs and windows of different arms cover comparable stretches. (The
collector publishes its phase totals every sync, so any bound would read exact figures.)"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from unilab.errors import UnilabError
from unilab.lifetime import DIE_WITH_PARENT_ENV
from unilab.manifest.models import Manifest
from unilab.profile.arms import Arm
from unilab.profile.models import WindowSample
from unilab.records.run_dir import RunDir

PUBLISH_EVERY_SYNCS = 64


@dataclass(frozen=True)
class Windows:
    env_steps_per_sync: int
    warmup_syncs: int
    window_syncs: int

    @property
    def warmup_env_steps(self) -> int:
        return self.warmup_syncs * self.env_steps_per_sync

    @property
    def window_env_steps(self) -> int:
        return self.window_syncs * self.env_steps_per_sync

    @property
    def total_env_steps(self) -> int:
        return self.warmup_env_steps + self.window_env_steps


def place_windows(
    env_steps_per_sync: int, warmup_env_steps: int, window_env_steps: int, iteration_syncs: int = 1
) -> Windows:
    """Round both windows up to whole publication blocks (at least one each) that are also whole
    learner iterations (PPO checkpoints only between rollouts of ``iteration_syncs`` syncs)."""
    block = math.lcm(PUBLISH_EVERY_SYNCS, iteration_syncs)

    def blocks(steps: int) -> int:
        per_block = block * env_steps_per_sync
        return max(1, -(-steps // per_block)) * block

    return Windows(env_steps_per_sync, blocks(warmup_env_steps), blocks(window_env_steps))


def apply_command(
    spec: Path, arm: Arm, base_sets: list[str], windows: Windows, out_dir: Path, algo_warmup: bool
) -> list[str]:
    sets = [*base_sets]
    if algo_warmup:  # off-policy: updates run through the whole measured window
        sets.append(f"algo.warmup_env_steps={windows.warmup_env_steps}")
    sets += arm.set_args()
    sets += [
        f"run.total_env_steps={windows.total_env_steps}",
        # One checkpoint (and so one manifest version) exactly at the end of warm-up; the next would
        # fall at twice the warm-up, which is the end of the run or later when window <= warm-up.
        f"run.checkpoint_every_env_steps={windows.warmup_env_steps}",
        f"run.output_dir={json.dumps(str(out_dir))}",
        f"run.name={json.dumps(arm.name)}",
    ]
    cmd = [sys.executable, "-m", "unilab", "apply", str(spec), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


@dataclass(frozen=True)
class RunOutcome:
    command: list[str]
    run_dir: Path
    exit_code: int
    warmup: Manifest
    final: Manifest
    window_s: float  # from the warm-up manifest's event to the loop's last iteration event


STOP_GRACE_S = 60.0  # for a stopped run to write its final checkpoint and manifest


def _wait_or_kill(proc: subprocess.Popen[bytes]) -> None:
    """Give a stopping run STOP_GRACE_S to finish its record, then kill it."""
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_apply_subprocess(cmd: list[str], out_dir: Path, timeout_s: float, log: Path) -> RunOutcome:
    out_dir.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as fh:
        # In a session of its own, the run gets no signal but the one stop request the profile
        # sends it: a terminal's Ctrl-C reaches the profile alone, and a second signal (which
        # would stop the run at once, without its record) never follows the first.
        # Out of the profile's process group, the run would outlive a SIGKILL of it: it dies with
        # the profile instead (PR_SET_PDEATHSIG, asked for by `unilab apply` at its start).
        env = {**os.environ, DIE_WITH_PARENT_ENV: str(os.getpid())}
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # Stop it as Ctrl-C would: the run ends with a final checkpoint and its manifest says
            # interrupted, instead of a SIGKILL leaving one that still says running. SIGTERM, not
            # SIGINT: a shell without job control starts background jobs ignoring SIGINT.
            proc.send_signal(signal.SIGTERM)
            _wait_or_kill(proc)
            raise UnilabError(
                f"a profiled run did not finish within {timeout_s:g} s and was stopped",
                detail=f"command: {' '.join(cmd)}; its output: {log}",
                fix="shorten --warmup/--window, or raise --run-timeout",
            ) from None
        except BaseException:  # the profile was stopped (Ctrl-C, SIGTERM, SIGHUP): so is its run
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            _wait_or_kill(proc)
            raise
    dirs = sorted(p for p in out_dir.iterdir() if p.is_dir())
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-8:]
    if proc.returncode != 0 or len(dirs) != 1:
        raise UnilabError(
            f"a profiled run failed (exit {proc.returncode})",
            detail="\n".join(tail),
            fix=f"run it alone to see why: {' '.join(cmd)}",
        )
    run_dir = dirs[0]
    run = RunDir(run_dir)
    final = Manifest.model_validate_json(run.manifest.read_text(encoding="utf-8"))
    warm, t_warm, t_end = window_bounds(run.events, final.counters.env_steps)
    return RunOutcome(cmd, run_dir, proc.returncode, warm, final, t_end - t_warm)


def window_bounds(events: Path, total_env_steps: int) -> tuple[Manifest, float, float]:
    """The manifest written at the end of warm-up (the first checkpoint's), the time it was
    logged, and the time of the loop's last `iteration` event (at the last env step).

    The final manifest is written after the last checkpoint and the closing of tensorboard, so its
    wall time overstates the loop; the events' own timestamps bound the window instead."""
    warm: Manifest | None = None
    t_warm = t_end = None
    for line in events.read_text(encoding="utf-8").splitlines():
        rec: dict[str, Any] = json.loads(line)
        ev = rec.get("event")
        ts = datetime.fromisoformat(rec["timestamp"].replace("Z", "+00:00")).timestamp()
        if ev == "manifest" and warm is None:
            m = Manifest.model_validate(rec["manifest"])
            if m.checkpoints and m.status == "running":
                warm, t_warm = m, ts
        elif ev == "iteration" and rec.get("env_steps") == total_env_steps:
            t_end = ts
    if warm is None or t_warm is None or t_end is None:
        raise UnilabError(
            f"{events} lacks the manifest at the end of warm-up or the last iteration event",
            fix="the profile needs runs that log manifest versions and iterations to events.jsonl",
        )
    return warm, t_warm, t_end


def window_sample(warm: Manifest, final: Manifest, window_s: float) -> WindowSample:
    """The measured window: final minus warm-up of every cumulative figure, per sync.

    The collector's wait for the first action of the window includes the warm-up checkpoint's save,
    which ends before the window's clock starts: coverage reads high by that save (about 1% here)."""
    a, b = warm.timing, final.timing
    s0, s1 = warm.counters.syncs, final.counters.syncs
    syncs = s1 - s0
    if syncs <= 0:
        raise UnilabError(f"the measured window of {final.run_id} holds no sync", fix="raise --window")
    if s0 % PUBLISH_EVERY_SYNCS or s1 % PUBLISH_EVERY_SYNCS:
        raise UnilabError(
            f"{final.run_id}: the window ({s0}..{s1} syncs) is not on {PUBLISH_EVERY_SYNCS}-sync blocks",
            detail=f"windows are placed on {PUBLISH_EVERY_SYNCS}-sync blocks",
            fix="leave run.total_env_steps and env counts to the profile",
        )

    def per_sync(end: dict[str, float], start: dict[str, float]) -> dict[str, float]:
        return {k: (end[k] * s1 - start.get(k, 0.0) * s0) / syncs for k in end}

    phases = per_sync(b.collector_phases_us, a.collector_phases_us)
    u0, u1 = warm.counters.updates, final.counters.updates

    def learner_us(end_ms: float, start_ms: float) -> float:  # window total of a mean-per-update figure
        return 1e3 * (end_ms * u1 - start_ms * u0)

    upd_us_total = learner_us(b.learner_update_ms, a.learner_update_ms)
    sample_us_total = learner_us(b.learner_sample_ms, a.learner_sample_ms)
    iteration = 1e6 * window_s / syncs
    cwait = 1e6 * (b.collector_wait_s - a.collector_wait_s) / syncs
    total = sum(phases.values())
    physics = phases.get("physics_step", 0.0)
    return WindowSample(
        syncs=syncs,
        updates=u1 - u0,
        wall_s=window_s,
        collector_phases_us=phases,
        collector_phases_cpu_us=per_sync(b.collector_phases_cpu_us, a.collector_phases_cpu_us),
        collector_wait_us=cwait,
        learner_sample_ms=sample_us_total / 1e3 / (u1 - u0) if u1 > u0 else 0.0,
        learner_sample_us_per_sync=sample_us_total / syncs,
        learner_update_ms=upd_us_total / 1e3 / (u1 - u0) if u1 > u0 else 0.0,
        learner_update_us_per_sync=upd_us_total / syncs,
        learner_grad_sync_us_per_sync=learner_us(b.learner_grad_sync_ms, a.learner_grad_sync_ms) / syncs,
        learner_wait_us=1e6 * (b.learner_wait_s - a.learner_wait_s) / syncs,
        iteration_us=iteration,
        collector_phase_sum_us=total,
        coverage=(total + cwait) / iteration if iteration > 0 else 0.0,
        non_physics_share=(total - physics) / total if total > 0 else 0.0,
    )
