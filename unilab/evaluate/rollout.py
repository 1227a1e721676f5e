"""Play a run's policy for a fixed number of episodes and measure them.

Every world plays exactly one episode from a reset, so the episodes are a fair sample of the
task's reset distribution: counting the first N episodes to end on fewer worlds would favour
short ones (falls). Actions are the policy's deterministic ones (what `unilab export` deploys);
the physics is CPU MuJoCo whatever backend the run trained on (the backends agree, see
tests/test_sim_backends.py), so a GPU run is evaluated on any machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from unilab.algos.common import policy_columns
from unilab.collect.collector import SATURATED_ACTION
from unilab.collect.curriculum import RewardCurriculum
from unilab.errors import UnilabError
from unilab.evaluate.models import (
    AveragedTracking,
    ClassTracking,
    CommandClasses,
    CommandTracking,
    EvalReport,
    EvalVideo,
    Gait,
    Stat,
    VideoClip,
)
from unilab.evaluate.status import StatusLine
from unilab.evaluate.video_request import check_video_request
from unilab.host.platform import require_runtime_platform
from unilab.plan.inputs import applied_from, check_planned_inputs, planned_input_paths, planned_task
from unilab.plan.models import Plan
from unilab.records.checkpoint import check_policy_fits, env_steps_of
from unilab.records.policy import policy_from_state
from unilab.records.run_dir import RunDir
from unilab.sim.backends import CPU_BACKEND
from unilab.sim.mujoco_cpu import MujocoCpuBackend
from unilab.tasks.base import as_g1_task
from unilab.tasks.g1_walk.task import FOOT_CONTACT_HEIGHT

if TYPE_CHECKING:
    from unilab.collect.collector import Collector
    from unilab.evaluate.video import ClipRecorder, VideoRenderer
    from unilab.sim.contract import PhysicsState
    from unilab.spec.models import SimSpec, TaskSpec

MAX_EPISODES = 65_536  # worlds in one CPU collector; more would only exhaust memory


@dataclass(frozen=True)
class EvalRequest:
    run_dir: Path
    episodes: int
    seed: int = 0
    checkpoint: Path | None = None  # a file of RUN_DIR/checkpoints; None: the newest
    workers: int | None = None  # CPU MuJoCo workers; None: one per CPU this process may use
    progress: bool = True
    video: Path | None = None  # an .mp4 file to film episodes into
    video_episodes: int | None = None  # the episodes of worlds 0..video_episodes-1; None: 1 with --video


def input_base(plan: Plan, run_dir: Path) -> Path:
    """The directory the plan's relative input paths (robot MJCF, motion) resolve against: this
    one, else the one the run was applied in, whichever holds the files as the run had them."""

    if not planned_input_paths(plan.task, Path.cwd()):
        return Path.cwd()
    where = applied_from(run_dir)
    failures: dict[Path, UnilabError] = {}
    for base in dict.fromkeys(b for b in (Path.cwd(), where) if b is not None):
        try:
            check_planned_inputs(plan.task, base)
            return base
        except UnilabError as exc:
            failures[base] = exc
    # Name the directory that holds the files (they changed there) before one that lacks them.
    held = [b for b in failures if all(p.exists() for p in planned_input_paths(plan.task, b))]
    first = failures[held[0] if held else Path.cwd()]
    raise UnilabError(
        first.summary,
        detail="an evaluation plays the task on the files the run trained on, checked by their digests",
        fix=f"run `unilab eval` from the directory the run was applied in ({where or 'see its manifest'}), "
        "with the run's files as they were",
    )


@dataclass(frozen=True)
class RunPolicy:
    """A run's checkpoint, verified against the digest the run recorded, and its deterministic
    policy fed from the task's whole observation: what `unilab eval` and `unilab play` play."""

    plan: Plan
    checkpoint: Path
    state: dict[str, Any]  # the checkpoint's policy state
    env_steps: int  # trained
    digest: str
    policy: Callable[[torch.Tensor], torch.Tensor]
    base: Path  # the directory the plan's input files resolve against

    def task(self, worlds: int) -> Any:
        """The run's task plan for ``worlds`` worlds, its input files as the plan recorded them."""

        return planned_task(self.plan.task).model_copy(update={"num_envs": worlds})

    def sim(self) -> Any:
        """The run's physics on CPU MuJoCo, whatever backend it trained on."""
        return self.plan.sim.model_copy(update={"backend": CPU_BACKEND.name})

    def check_fits(self, c: Collector, fix: str) -> None:

        check_policy_fits(
            self.state, c.obs_dim, c.action_dim, c.obs_terms, what=f"checkpoint {self.checkpoint.name}", fix=fix
        )


def load_run_policy(run_dir: Path, checkpoint: Path | None, command: str) -> RunPolicy:
    """RUN_DIR's newest checkpoint (or ``checkpoint``), verified; ``command`` names the `unilab`
    command in the fixes. A missing or unreadable run directory is named first."""

    run = RunDir(run_dir)
    plan = run.read_plan(command)
    path = run.find_checkpoint(checkpoint, command)
    blob, digest = run.verified_checkpoint(plan, path)
    policy, _ = policy_from_state(plan, blob["state"])
    return RunPolicy(
        plan=plan,
        checkpoint=path,
        state=blob["state"],
        env_steps=int(blob.get("env_steps", env_steps_of(path) or 0)),
        digest=digest,
        policy=on_task_observation(policy, plan, blob["state"]),
        base=input_base(plan, run_dir),
    )


def _stat(values: torch.Tensor) -> Stat:
    v = values.to(torch.float64)
    return Stat(mean=float(v.mean()), std=float(v.std(unbiased=False)), min=float(v.min()), max=float(v.max()))


@dataclass
class _Episodes:
    """Per world, its first episode: return, length, per-term sums, how it ended, MuJoCo warnings."""

    ret: torch.Tensor
    length: torch.Tensor
    terms: torch.Tensor
    by_time_out: torch.Tensor
    by_termination: torch.Tensor
    by_non_finite: torch.Tensor
    warnings: np.ndarray  # [N, warning kinds]
    env_steps: int
    wall_s: float
    tracking: CommandTracking | None = None
    gait: Gait | None = None
    action_saturation: float | None = None


AVERAGING_WINDOW_S = 1.0  # about one stride of a walking G1: its sway averages out

# The classes of a velocity command, in the order of CommandClasses' fields; command_class returns
# indices into this.
COMMAND_CLASSES = ("forward", "backward", "lateral", "turning", "standing")
FORWARD, BACKWARD, LATERAL, TURNING, STANDING = range(len(COMMAND_CLASSES))
# m/s or rad/s: a command component at or below this asks for no motion along it. The standing
# commands are exactly zero, but uniform draws land near zero too, and a robot asked for 0.05 m/s
# has nothing visible to track.
MOVING_COMMAND = 0.1


def command_class(cmd: torch.Tensor) -> torch.Tensor:
    """[k] int64 the class of each command of [k, 3] (vx, vy, yaw rate), an index into COMMAND_CLASSES.

    Linear first: a command with |vx| or |vy| above MOVING_COMMAND is forward (vx > 0) or backward
    (vx < 0) when |vx| >= |vy|, else lateral, however fast it also turns (walking while turning
    is walking); one without is turning when |yaw rate| is above MOVING_COMMAND, else standing
    (zero, or every component at most MOVING_COMMAND). Every command has exactly one class.
    """
    ax, ay, az = cmd.abs().unbind(dim=1)
    linear = torch.where(ax >= ay, torch.where(cmd[:, 0] > 0, FORWARD, BACKWARD), LATERAL)
    still = torch.where(az > MOVING_COMMAND, TURNING, STANDING)
    return torch.where(torch.maximum(ax, ay) > MOVING_COMMAND, linear, still)


def class_sums(cmd: torch.Tensor, vel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' errors (as _errors sums them) summed per command class, [classes, 4], and the rows
    per class, [classes]."""
    cls = command_class(cmd)
    sums = torch.zeros(len(COMMAND_CLASSES), 4, dtype=torch.float64)
    sums.index_add_(0, cls, _row_errors(cmd, vel).double())
    return sums, torch.bincount(cls, minlength=len(COMMAND_CLASSES))


def _ratio(error: float, standing: float) -> float | None:
    return error / standing if standing > 0 else None


def by_command_class(sums: torch.Tensor, steps: torch.Tensor) -> CommandClasses:
    """Per class the mean errors of ``sums`` ([classes, 4], as class_sums adds them) over its
    ``steps``; a class without steps is None."""
    classes: dict[str, ClassTracking | None] = {}
    for name, row, n in zip(COMMAND_CLASSES, sums.tolist(), steps.tolist(), strict=True):
        if not n:
            classes[name] = None
            continue
        lin, yaw, standing_lin, standing_yaw = (v / n for v in row)
        classes[name] = ClassTracking(
            steps=n,
            lin_vel_xy_error=lin,
            standing_lin_vel_xy_error=standing_lin,
            lin_vel_xy_ratio=_ratio(lin, standing_lin),
            yaw_rate_error=yaw,
            standing_yaw_rate_error=standing_yaw,
            yaw_rate_ratio=_ratio(yaw, standing_yaw),
        )
    return CommandClasses.model_validate(classes)


class _TrackingSums:
    """Sums over the counted steps of the command-tracking errors and of a standing robot's, per
    step and with the base velocity averaged over the trailing AVERAGING_WINDOW_S."""

    def __init__(self, control_dt: float) -> None:
        # Per command class; the totals over all steps are their sums (`result`).
        self.class_sums = torch.zeros(len(COMMAND_CLASSES), 4, dtype=torch.float64)
        self.class_steps = torch.zeros(len(COMMAND_CLASSES), dtype=torch.int64)
        self.control_dt = control_dt
        self.window = max(1, round(AVERAGING_WINDOW_S / control_dt))
        self.averaged_sums = torch.zeros(4, dtype=torch.float64)
        self.averaged_steps = 0
        # Per world: the last `window` velocities (v_x, v_y, w_z) in a ring, their sum, and how many
        # consecutive counted steps have run under the current command.
        self._ring: torch.Tensor | None = None
        self._ring_sum = torch.zeros(0)
        self._run = torch.zeros(0, dtype=torch.int64)
        self._last_cmd = torch.zeros(0)
        self._slot = 0
        self._command: torch.Tensor | None = None

    def before_step(self, c: Collector) -> None:
        """Keep the command the coming step runs under. The task draws a resampled command after the
        step's reward, for the next step: read after the step, it would be paired with a velocity
        reached under the one before (and the step counted into that command's class)."""
        command = c.task.commanded_velocity(c.num_envs)
        self._command = None if command is None else command.to(torch.float64, copy=True)

    def add(self, c: Collector, counted: torch.Tensor) -> None:
        """This step's end state against the command it ran under (before_step's)."""
        cmd_all = self._command
        if cmd_all is None:
            return
        g1 = as_g1_task(c.task)
        vel = torch.cat([g1.base_lin_vel_b[:, :2], g1.base_yaw_rate.unsqueeze(1)], dim=1).double()
        self._average(cmd_all, vel, counted)
        if not bool(counted.any()):
            return
        rows = counted.nonzero().squeeze(1)
        sums, steps = class_sums(cmd_all[rows], vel[rows])
        self.class_sums += sums
        self.class_steps += steps

    def _average(self, cmd: torch.Tensor, vel: torch.Tensor, counted: torch.Tensor) -> None:
        if self._ring is None:
            self._ring = torch.zeros(self.window, *vel.shape, dtype=torch.float64)
            self._ring_sum = torch.zeros_like(vel)
            self._run = torch.zeros(len(vel), dtype=torch.int64)
            self._last_cmd = cmd.clone()
        self._ring_sum += vel - self._ring[self._slot]
        self._ring[self._slot] = vel
        self._slot = (self._slot + 1) % self.window
        # A new episode (its world was not counted on the step before) or a resampled command
        # starts a new window.
        same = (cmd == self._last_cmd).all(dim=1)
        self._run = torch.where(counted, torch.where(same, self._run + 1, 1), 0)
        self._last_cmd = cmd.clone()
        full = self._run >= self.window
        if bool(full.any()):
            rows = full.nonzero().squeeze(1)
            self.averaged_sums += _errors(cmd[rows], self._ring_sum[rows] / self.window)
            self.averaged_steps += len(rows)

    def result(self) -> CommandTracking | None:
        steps = int(self.class_steps.sum())
        if steps == 0:
            return None
        m = (self.class_sums.sum(dim=0) / steps).tolist()
        averaged = None
        if self.averaged_steps:
            a = (self.averaged_sums / self.averaged_steps).tolist()
            averaged = AveragedTracking(
                window_s=self.window * self.control_dt,
                lin_vel_xy_error=a[0],
                yaw_rate_error=a[1],
                standing_lin_vel_xy_error=a[2],
                standing_yaw_rate_error=a[3],
                steps=self.averaged_steps,
            )
        return CommandTracking(
            lin_vel_xy_error=m[0],
            yaw_rate_error=m[1],
            standing_lin_vel_xy_error=m[2],
            standing_yaw_rate_error=m[3],
            steps=steps,
            averaged=averaged,
            by_command=by_command_class(self.class_sums, self.class_steps),
        )


def _errors(cmd: torch.Tensor, vel: torch.Tensor) -> torch.Tensor:
    """[4] summed |cmd_xy - v_xy|, |cmd_yaw - w_z|, |cmd_xy|, |cmd_yaw| over the rows."""
    return _row_errors(cmd, vel).sum(dim=0)


def _row_errors(cmd: torch.Tensor, vel: torch.Tensor) -> torch.Tensor:
    """[k, 4] |cmd_xy - v_xy|, |cmd_yaw - w_z|, |cmd_xy|, |cmd_yaw| per row."""
    return torch.stack(
        [
            (cmd[:, :2] - vel[:, :2]).norm(dim=1),
            (cmd[:, 2] - vel[:, 2]).abs(),
            cmd[:, :2].norm(dim=1),
            cmd[:, 2].abs(),
        ],
        dim=1,
    )


class _GaitSums:
    """Sums over the counted steps of the feet's swing, touchdowns and stance width (a task with a
    velocity command: g1_walk). A foot is in swing with its body origin at or above the task's
    contact height, as the task's own contact flags read it."""

    def __init__(self, c: Collector) -> None:

        self.height = FOOT_CONTACT_HEIGHT
        self.control_dt = c.task.step_dt
        self.feet = [int(b) for b in as_g1_task(c.task).layout.feet_body_ids.tolist()]
        self.contact = self._contact(c)  # of the reset state: an episode starts standing
        self.sums = torch.zeros(4, dtype=torch.float64)  # swing steps, feet in swing, touchdowns, stance width
        self.steps = 0

    @staticmethod
    def of(c: Collector) -> _GaitSums | None:
        """For a task with a velocity command, after the collector's reset; else None."""
        return _GaitSums(c) if c.task.commanded_velocity(c.num_envs) is not None else None

    def _contact(self, c: Collector) -> torch.Tensor:
        return c.task.state.xpos[:, self.feet, 2] < self.height

    def add(self, c: Collector, counted: torch.Tensor) -> None:
        """This step's state (an ended world's is its next episode's by now: not counted). Every
        world's contacts are kept, so the next step's touchdowns compare with this one's."""
        contact, before = self._contact(c), self.contact
        self.contact = contact
        if not bool(counted.any()):
            return
        rows = counted.nonzero().squeeze(1)
        now, was = contact[rows], before[rows]
        swing = ~now
        self.sums[0] += swing.any(dim=1).sum()
        self.sums[1] += swing.double().mean(dim=1).sum()
        self.sums[2] += (now & ~was).sum()
        if len(self.feet) == 2:
            self.sums[3] += self._stance_width(c, rows).sum()
        self.steps += len(rows)

    def _stance_width(self, c: Collector, rows: torch.Tensor) -> torch.Tensor:
        """[k] |lateral distance| between the two feet in the base's heading (yaw) frame, metres."""
        feet = c.task.state.xpos[rows][:, self.feet, :2].double()
        d = feet[:, 0] - feet[:, 1]
        w, x, y, z = as_g1_task(c.task).base_quat[rows].double().unbind(dim=1)
        yaw = torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        return (d[:, 1] * torch.cos(yaw) - d[:, 0] * torch.sin(yaw)).abs()

    def result(self) -> Gait | None:
        if self.steps == 0:
            return None
        swing, air, touchdowns, width = self.sums.tolist()
        return Gait(
            swing_height=self.height,
            swing_share=swing / self.steps,
            feet_air_share=air / self.steps,
            touchdowns_per_s=touchdowns / (self.steps * self.control_dt),
            stance_width=width / self.steps if len(self.feet) == 2 else None,
            steps=self.steps,
        )


class _SaturationSums:
    """The share of the action's components beyond the collector's saturation mark, over the counted steps."""

    def __init__(self) -> None:
        self.saturated = 0.0
        self.components = 0

    def add(self, actions: torch.Tensor, counted: torch.Tensor) -> None:

        if not bool(counted.any()):
            return
        a = actions.detach().to("cpu")[counted]
        self.saturated += float((a.abs() > SATURATED_ACTION).sum())
        self.components += a.numel()

    def result(self) -> float | None:
        return self.saturated / self.components if self.components else None


def _play(
    c: Collector,
    policy: Callable[[torch.Tensor], torch.Tensor],
    progress: bool,
    recorder: ClipRecorder | None = None,
) -> _Episodes:
    """Step every world until its first episode has ended; later episodes are stepped, not counted.
    ``recorder`` gets the filmed worlds' joint states during their first episode."""
    n, max_steps = c.num_envs, c.task.max_episode_steps
    ret = torch.zeros(n, dtype=torch.float64)
    length = torch.zeros(n, dtype=torch.int64)
    terms = torch.zeros(n, len(c.task.reward_names), dtype=torch.float64)
    live = torch.ones(n, dtype=torch.bool)
    by_time_out, by_term, by_nonfinite = (torch.zeros(n, dtype=torch.bool) for _ in range(3))
    bar = StatusLine(progress)
    tracking = _TrackingSums(c.task.step_dt)
    saturation = _SaturationSums()
    obs = c.reset_all()
    gait = _GaitSums.of(c)
    if recorder is not None:
        _film_episodes(c, recorder, live)
    # MuJoCo resets a diverged world itself (mjWARN_BADQACC) and the episode goes on from the
    # model's default pose, nothing non-finite to flag: its counters say so. They count per world
    # from the backend's start, so each episode's share is read as it ends.
    start_warnings = c.backend.world_warnings()
    warnings = np.zeros_like(start_warnings)
    t0 = time.perf_counter()
    steps = 0
    try:
        # The time limit ends every episode within max_steps env steps; one more is slack.
        while bool(live.any()) and steps <= max_steps:
            with torch.no_grad():
                actions = policy(obs)
            tracking.before_step(c)
            obs, reward, terminated, truncated = c.step(actions)
            steps += 1
            # A flagged world's reward is zeroed and its terms may be NaN: neither counts.
            counted = live & ~c.nonfinite
            ret += torch.where(counted, reward.double(), 0.0)
            terms += torch.where(counted.unsqueeze(1), c.task.reward_terms.double(), 0.0)
            length += live
            nonfinite = c.nonfinite & live
            ended = (terminated | truncated | nonfinite) & live
            tracking.add(c, counted & ~ended)  # an ended world's state is its next episode's by now
            saturation.add(actions, counted & ~ended)  # the same steps
            if gait is not None:
                gait.add(c, counted & ~ended)
            by_nonfinite |= nonfinite
            by_term |= terminated & live & ~nonfinite
            by_time_out |= truncated & live & ~terminated & ~nonfinite
            if bool(ended.any()):
                rows = ended.numpy()
                warnings[rows] = c.backend.world_warnings()[rows] - start_warnings[rows]
            live &= ~ended
            bar.update(f"eval: step {steps:,}/{max_steps:,}, {n - int(live.sum()):,}/{n:,} episodes ended")
    finally:
        bar.close()
    wall = time.perf_counter() - t0
    if bool(live.any()):
        raise UnilabError(
            f"{int(live.sum())} of {n} episodes did not end within the task's time limit ({max_steps} steps)",
            fix="report this with the run's plan.toml: the collector's time limit did not fire",
        )
    return _Episodes(
        ret,
        length,
        terms,
        by_time_out,
        by_term,
        by_nonfinite,
        warnings,
        c.env_steps,
        wall,
        tracking.result(),
        gait.result() if gait is not None else None,
        saturation.result(),
    )


def _film_episodes(c: Collector, recorder: ClipRecorder, live: torch.Tensor) -> None:
    """Record the reset state now and, every step, the state before the ended worlds are reset
    (``live`` is _play's mask of worlds still in their first episode, updated in place)."""
    k = recorder.worlds

    def film(qpos: torch.Tensor, step: int, ending: torch.Tensor | None) -> None:
        task = c.task
        command = task.commanded_velocity(k)
        recorder.record(
            qpos,
            step,
            live,
            ending=ending,
            reference=task.reference_qpos(k),
            command=command,
            # A commanded robot's base velocity (world frame), read from the state the task reads.
            velocity=None if command is None else as_g1_task(task).base_lin_vel_w[:k],
        )

    film(c.backend.state.qpos, 0, None)
    step = 0

    def record(state: PhysicsState, done: torch.Tensor) -> None:
        nonlocal step
        step += 1
        film(state.qpos, step, done)
        if not bool((live[:k] & ~done[:k]).any()):
            c.before_reset = None  # every filmed episode has ended

    c.before_reset = record


def _check_request(req: EvalRequest) -> tuple[int, int]:
    """Refuse a request out of range; returns the worker count and the episodes to film."""
    if not 1 <= req.episodes <= MAX_EPISODES:
        raise UnilabError(
            f"--episodes {req.episodes} is out of range", fix=f"pass --episodes between 1 and {MAX_EPISODES:,}"
        )
    if not 0 <= req.seed < 2**31:  # the range of run.seed: the tasks derive their draws from it
        raise UnilabError(f"--seed {req.seed} is out of range", fix="pass --seed between 0 and 2147483647")
    cpus = len(os.sched_getaffinity(0))  # Linux: require_runtime_platform ran first
    if req.workers is not None and not 1 <= req.workers <= cpus:
        raise UnilabError(
            f"--workers {req.workers} is out of range: this process may use {cpus} CPU{'s' if cpus != 1 else ''}",
            fix=f"pass --workers between 1 and {cpus}, or leave it out (one per CPU)",
        )
    filmed = check_video_request(req.video, req.video_episodes, req.episodes)
    return max(1, min(req.workers or cpus, req.episodes)), filmed


def evaluate(req: EvalRequest) -> EvalReport:
    require_runtime_platform("unilab eval")
    workers, filmed = _check_request(req)
    if filmed:
        from unilab.evaluate.gl import load_mujoco_for_rendering

        load_mujoco_for_rendering()  # before the imports below bring MuJoCo in with no platform chosen
    from unilab.collect.build import build_collector

    run_dir = req.run_dir
    run = load_run_policy(run_dir, req.checkpoint, "eval")
    plan, path, base = run.plan, run.checkpoint, run.base

    n = req.episodes
    task, sim = run.task(n), run.sim()
    renderer = recorder = None
    if filmed:
        from unilab.evaluate.video import ClipRecorder, frame_stride

        renderer = _open_renderer(task, sim, base)  # before anything is played: a GL failure refuses first
        recorder = ClipRecorder(filmed, frame_stride(plan.task.control_dt))
    torch.set_num_threads(1)  # the physics workers take the CPUs; tiny policy batches gain nothing
    try:
        with build_collector(task, sim, spec_dir=base, num_envs=n, workers=workers, seed=req.seed, timing=False) as c:
            run.check_fits(
                c,
                fix="evaluate it with the unilab that wrote it (the version and commit its run's manifest names); "
                "`unilab export` still exports it, with the observation layout it was trained on",
            )
            # Scored under the reward weights the run had reached at this checkpoint (task.reward_curriculum).
            curriculum = RewardCurriculum.of(task, run.env_steps, 0)
            if curriculum is not None:
                curriculum.apply(c.task, 0)
            played = _play(c, run.policy, req.progress, recorder)
            reward_names = list(c.task.reward_names)
            max_steps = c.task.max_episode_steps
        video = None
        if renderer is not None and recorder is not None and req.video is not None:  # (narrows the types)
            video = _film(renderer, recorder, played, req.video, plan.task.control_dt, req.progress)
    finally:
        if renderer is not None:
            renderer.close()
    warned = played.warnings.sum(axis=0)
    return EvalReport(
        run_dir=str(run_dir),
        plan_id=plan.plan_id,
        task=plan.task.name,
        algo=plan.algo.name,
        checkpoint=path.name,
        checkpoint_env_steps=run.env_steps,
        checkpoint_sha256=run.digest,
        backend="mujoco",  # the report's schema pins CPU MuJoCo (CPU_BACKEND), which every host has
        workers=workers,
        seed=req.seed,
        episodes=n,
        control_dt=plan.task.control_dt,
        max_episode_steps=max_steps,
        episode_return=_stat(played.ret),
        episode_length=_stat(played.length),
        ended_by_time_out=int(played.by_time_out.sum()),
        ended_by_termination=int(played.by_termination.sum()),
        ended_non_finite=int(played.by_non_finite.sum()),
        episodes_with_physics_warnings=int((played.warnings.sum(axis=1) > 0).sum()),
        physics_warnings={k: int(v) for k, v in zip(MujocoCpuBackend.warning_names(), warned, strict=True) if v},
        reward_terms={name: float(v) for name, v in zip(reward_names, played.terms.mean(dim=0).tolist(), strict=True)},
        command_tracking=played.tracking,
        gait=played.gait,
        action_saturation=played.action_saturation,
        env_steps=played.env_steps,
        wall_s=round(played.wall_s, 3),
        video=video,
    )


def on_task_observation(policy: Any, plan: Plan, state: dict[str, Any]) -> Any:
    """The deployed policy fed from the task's whole observation: it takes the actor's columns alone
    where the run kept privileged observations for its critic (task.privileged_observations)."""

    cols = policy_columns(plan, state)
    if cols is None:
        return policy
    index = torch.tensor(cols, dtype=torch.long)
    return lambda obs: policy(obs.index_select(1, index))


def _open_renderer(task: TaskSpec, sim: SimSpec, base: Path) -> VideoRenderer:
    from unilab.collect.build import compose_robot
    from unilab.evaluate.video import VideoRenderer, render_model

    return VideoRenderer(render_model(compose_robot(task, sim, base).xml))


def _film(
    renderer: VideoRenderer, recorder: ClipRecorder, played: _Episodes, path: Path, control_dt: float, progress: bool
) -> EvalVideo:
    from unilab.evaluate.video import HEIGHT, WIDTH, write_video

    fps = 1.0 / (control_dt * recorder.stride)
    written = write_video(renderer, recorder.frames, fps, path, progress)
    clips = [
        VideoClip(
            world=w,
            start_s=round(start / fps, 3),
            episode_length=int(played.length[w]),
            episode_return=float(played.ret[w]),
            ended=_how_it_ended(played, w),
        )
        for w, start in enumerate(written.starts)
    ]
    return EvalVideo(
        path=str(path),
        episodes=recorder.worlds,
        frames=written.frames,
        fps=round(fps, 6),
        width=WIDTH,
        height=HEIGHT,
        clips=clips,
    )


def _how_it_ended(played: _Episodes, w: int) -> Literal["time_out", "termination", "non_finite"]:
    if bool(played.by_non_finite[w]):
        return "non_finite"
    return "termination" if bool(played.by_termination[w]) else "time_out"


def render(report: EvalReport) -> str:
    """The report as a user reads it in a terminal."""
    r, L = report.episode_return, report.episode_length
    dt = report.control_dt
    lines = [
        f"{report.run_dir}: {report.checkpoint} ({report.checkpoint_env_steps:,} env steps trained), "
        f"{report.algo} on {report.task}",
        f"{report.episodes} episodes, one per world (seed {report.seed}), deterministic actions, "
        f"CPU MuJoCo with {report.workers} worker{'s' if report.workers != 1 else ''}, {report.wall_s:.1f} s",
        f"  return   {r.mean:10.3f} +- {r.std:.3f}  (min {r.min:.3f}, max {r.max:.3f})",
        f"  length   {L.mean:10.1f} +- {L.std:.1f} steps = {L.mean * dt:.2f} s  "
        f"(min {L.min:.0f}, max {L.max:.0f}; time limit {report.max_episode_steps})",
        f"  ended    {report.ended_by_time_out} by time-out (no failure), {report.ended_by_termination} by termination"
        + (f", {report.ended_non_finite} on non-finite physics" if report.ended_non_finite else ""),
    ]
    if report.episodes_with_physics_warnings:
        kinds = ", ".join(f"{k} {v}" for k, v in report.physics_warnings.items())
        lines.append(
            f"  physics  MuJoCo warned in {report.episodes_with_physics_warnings} episode(s) ({kinds}); on bad_qacc "
            "it reset the diverged world to the model's default pose and the episode went on"
        )
    if report.video is not None:
        v = report.video
        lines.append(
            f"  video    {v.path}: {v.episodes} episode{'s' if v.episodes != 1 else ''}, {v.frames:,} frames at "
            f"{v.fps:g} fps ({v.width}x{v.height})"
        )
        lines += [
            f"    at {c.start_s:6.1f} s  world {c.world}: {c.episode_length} steps, return {c.episode_return:.3f}, "
            f"ended by {c.ended.replace('_', ' ')}"
            for c in v.clips
        ]
    if (t := report.command_tracking) is not None:
        lines += [
            f"  command  error |v_xy - cmd| {t.lin_vel_xy_error:.3f} m/s, |w_z - cmd| {t.yaw_rate_error:.3f} rad/s "
            f"(mean over {t.steps:,} steps)",
            f"           standing still: {t.standing_lin_vel_xy_error:.3f} m/s, {t.standing_yaw_rate_error:.3f} rad/s",
        ]
        if (a := t.averaged) is not None:
            lines += [
                f"           velocity averaged over {a.window_s:g} s (a stride's sway averaged out): "
                f"{a.lin_vel_xy_error:.3f} m/s, {a.yaw_rate_error:.3f} rad/s; standing still "
                f"{a.standing_lin_vel_xy_error:.3f} m/s, {a.standing_yaw_rate_error:.3f} rad/s",
            ]
        if (by := t.by_command) is not None:
            lines += _class_table(t, by)
    if (g := report.gait) is not None:
        width = f", stance width {g.stance_width:.3f} m" if g.stance_width is not None else ""
        lines += [
            f"  gait     a foot in swing on {g.swing_share:.1%} of steps ({g.feet_air_share:.1%} of the feet), "
            f"{g.touchdowns_per_s:.2f} touchdowns/s{width}",
            f"           in swing: the foot body origin >= {g.swing_height:.2f} m over the floor "
            "(the task's contact height)",
        ]
    if report.action_saturation is not None:
        from unilab.collect.collector import SATURATED_ACTION

        lines.append(
            f"  actions  {report.action_saturation:.1%} of the components saturated (|a| > {SATURATED_ACTION})"
        )
    if report.reward_terms:
        width = max(len(k) for k in report.reward_terms)
        lines.append("  reward terms, mean sum per episode:")
        lines += [f"    {k:<{width}}  {v:10.3f}" for k, v in report.reward_terms.items()]
    return "\n".join(lines)


def _class_table(t: CommandTracking, by: CommandClasses) -> list[str]:
    """The per-step tracking by command class, then over all steps, with each error's ratio to
    standing still's: a policy can walk forward well and ignore turns, which the totals blur."""

    def ratio(error: float, still: float) -> str:
        r = _ratio(error, still)
        return f"{r:.2f}x" if r is not None else "-"

    def row(*cells: str) -> str:
        widths = (-9, 9, 12, 7, 7, 11, 7, 7)  # negative: left-aligned; a class without steps has 2 cells
        return "             " + "  ".join(
            f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, w in zip(cells, widths, strict=False)
        )

    def figures(name: str, c: ClassTracking | CommandTracking | None) -> str:
        if c is None:
            return row(name, "0")
        lin, still_lin = c.lin_vel_xy_error, c.standing_lin_vel_xy_error
        yaw, still_yaw = c.yaw_rate_error, c.standing_yaw_rate_error
        return row(
            name,
            f"{c.steps:,}",
            f"{lin:.3f}",
            f"{still_lin:.3f}",
            ratio(lin, still_lin),
            f"{yaw:.3f}",
            f"{still_yaw:.3f}",
            ratio(yaw, still_yaw),
        )

    return [
        f"           by the command at each step: forward, backward or lateral by the larger of |vx|, |vy| "
        f"over {MOVING_COMMAND} m/s,",
        f"           else turning over {MOVING_COMMAND} rad/s, else standing (still: a robot standing still's "
        "error; ratio: error / still)",
        row("command", "steps", "|v_xy - cmd|", "still", "ratio", "|w_z - cmd|", "still", "ratio"),
        *(figures(name, getattr(by, name)) for name in COMMAND_CLASSES),
        figures("all", t),
    ]


def report_json(report: EvalReport) -> str:
    return report.model_dump_json(indent=2) + "\n"
