"""The simulation side of `unilab play`: a run's policy stepping a few worlds of its task on CPU
MuJoCo, one control step at a time, under a command the viewer sets. No viewer code here: the
session is driven and read the same way by the browser viewer and by the tests."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import mujoco
import numpy as np
import torch

from unilab.collect.build import build_collector, compose_robot
from unilab.errors import UnilabError
from unilab.evaluate.rollout import load_run_policy
from unilab.host.platform import require_runtime_platform
from unilab.tasks.base import as_g1_task
from unilab.tasks.registry import robot_spec

if TYPE_CHECKING:
    from unilab.collect.collector import Collector

VELOCITY_WINDOW_S = 1.0  # the base velocity shown beside the command: averaged over about one stride
MAX_WORLDS = 16  # drawn side by side: more would crowd the view and fall behind real time

Ending = Literal["time limit", "fall", "non-finite physics"]


@dataclass(frozen=True)
class PlayRequest:
    run_dir: Path
    checkpoint: Path | None = None  # a file of RUN_DIR/checkpoints; None: the newest
    worlds: int = 1
    seed: int = 0


@dataclass
class EpisodeEnd:
    """How world 0's last episode ended."""

    number: int
    length: int
    episode_return: float
    ending: Ending


@dataclass
class Snapshot:
    """What a viewer draws and prints after a step; arrays are per world."""

    steps: int  # control steps since the session started
    xpos: np.ndarray  # [worlds, nbody, 3]
    xquat: np.ndarray  # [worlds, nbody, 4] (w, x, y, z)
    command: np.ndarray | None  # [worlds, 3] vx, vy (heading frame), yaw rate; None: the task takes none
    velocity: np.ndarray | None  # [worlds, 3] the base's vx, vy (heading frame) and yaw rate, with a command
    velocity_w: np.ndarray | None  # [worlds, 3] the base's linear velocity in the world frame, with a command
    velocity_mean: np.ndarray | None  # [3] world 0's velocity over the last second (a stride's sway averaged out)
    heading: np.ndarray  # [worlds] the base's yaw, rad
    reference_qpos: np.ndarray | None  # [worlds, nq] the pose a tracking task tracks; None otherwise
    clip_frame: int | None  # world 0's clip frame (a tracking task)
    term_step: dict[str, float]  # world 0's weighted reward terms this step
    term_episode: dict[str, float]  # their sums over world 0's episode so far
    episode: int  # world 0's episode number, from 1
    episode_return: float
    episode_length: int
    last_end: EpisodeEnd | None = None


class PlaySession:
    """``worlds`` worlds of a run's task stepped by its deterministic policy."""

    def __init__(
        self,
        collector: Collector,
        policy: Callable[[torch.Tensor], torch.Tensor],
        model: mujoco.MjModel,
        *,
        checkpoint: Path | None = None,
        checkpoint_env_steps: int = 0,
    ) -> None:
        self.c = collector
        self.checkpoint = checkpoint
        self.checkpoint_env_steps = checkpoint_env_steps
        self.policy = policy
        self.model = model  # the run's robot model, compiled: the viewer's geometry
        self.task = as_g1_task(collector.task)  # the viewer is the G1's (`play` refuses other tasks first)
        self.reward_names = list(self.task.reward_names)
        self.control_dt = float(self.task.step_dt)
        self.command_ranges = self.task.velocity_command_ranges()
        self.clip = self.task.motion_clip()
        self.base_body = int(self.task.layout.base_body_id)  # the floating base: what the view follows
        n = collector.num_envs
        self._ret = torch.zeros(n, dtype=torch.float64)
        self._len = torch.zeros(n, dtype=torch.int64)
        self._terms = torch.zeros(n, len(self.reward_names), dtype=torch.float64)
        self._step_terms = torch.zeros(len(self.reward_names), dtype=torch.float64)
        self.steps = 0
        self.episode = 1
        self.last_end: EpisodeEnd | None = None
        self._recent: deque[np.ndarray] = deque(maxlen=max(1, round(VELOCITY_WINDOW_S / self.control_dt)))
        self.obs = collector.reset_all()

    @property
    def worlds(self) -> int:
        return self.c.num_envs

    def set_command(self, command: Sequence[float]) -> None:
        """Command every world (vx, vy, yaw rate), each clamped to the range the task trained on."""
        if self.command_ranges is None:
            raise UnilabError(f"the task {self.task.name} takes no velocity command")
        clamped = [min(max(float(v), lo), hi) for v, (lo, hi) in zip(command, self.command_ranges, strict=True)]
        self.task.hold_velocity_command(clamped)

    def start_clip_at(self, frame: int) -> None:
        """Every episode from now on starts at clip ``frame``; the worlds are reset there now."""
        self.task.hold_clip_start(int(frame))
        self.reset()

    def reset(self) -> None:
        """Reset every world (an episode counted as ended by nobody: it is not reported)."""
        self.obs = self.c.reset_all()
        self._ret.zero_()
        self._len.zero_()
        self._terms.zero_()
        self._recent.clear()
        self.episode += 1

    def step(self) -> EpisodeEnd | None:
        """One control step of every world; how world 0's episode ended, if it ended on this step."""
        with torch.no_grad():
            actions = self.policy(self.obs)
        obs, reward, terminated, truncated = self.c.step(actions)
        self.obs = obs
        self.steps += 1
        counted = ~self.c.nonfinite  # a flagged world's reward is zeroed and its terms may be NaN
        terms = self.task.reward_terms.double()
        self._step_terms = torch.where(counted[0], terms[0], 0.0)
        self._ret += torch.where(counted, reward.double(), 0.0)
        self._terms += torch.where(counted.unsqueeze(1), terms, 0.0)
        self._len += 1
        ended = terminated | truncated | self.c.nonfinite
        end = None
        if bool(ended[0]):
            how: Ending = (
                "non-finite physics" if bool(self.c.nonfinite[0]) else "fall" if bool(terminated[0]) else "time limit"
            )
            end = self.last_end = EpisodeEnd(self.episode, int(self._len[0]), float(self._ret[0]), how)
            self.episode += 1
            self._recent.clear()
        elif self.command_ranges is not None:
            self._recent.append(self._velocity()[0])
        self._ret.masked_fill_(ended, 0.0)
        self._len.masked_fill_(ended, 0)
        self._terms.masked_fill_(ended.unsqueeze(1), 0.0)
        return end

    def _velocity(self) -> np.ndarray:
        """[worlds, 3] the base's vx, vy in its heading frame and its yaw rate, as the task reads them."""
        t = self.task
        return torch.cat([t.base_lin_vel_b[:, :2], t.base_yaw_rate.unsqueeze(1)], dim=1).numpy().copy()

    def snapshot(self) -> Snapshot:
        task, state = self.task, self.task.state
        n = self.worlds
        command = task.commanded_velocity(n)
        velocity = velocity_w = None
        if command is not None:
            velocity = self._velocity()
            velocity_w = task.base_lin_vel_w.numpy().copy()
        w, x, y, z = task.base_quat.double().unbind(dim=1)
        heading = torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        reference = task.reference_qpos(n)
        clip_frame = task.clip_frame(0)
        return Snapshot(
            steps=self.steps,
            xpos=state.xpos.numpy().copy(),
            xquat=state.xquat.numpy().copy(),
            command=None if command is None else command.numpy().copy(),
            velocity=velocity,
            velocity_w=velocity_w,
            velocity_mean=np.mean(self._recent, axis=0) if self._recent else None,
            heading=heading.numpy(),
            reference_qpos=None if reference is None else reference.numpy().copy(),
            clip_frame=clip_frame,
            term_step=dict(zip(self.reward_names, self._step_terms.tolist(), strict=True)),
            term_episode=dict(zip(self.reward_names, self._terms[0].tolist(), strict=True)),
            episode=self.episode,
            episode_return=float(self._ret[0]),
            episode_length=int(self._len[0]),
            last_end=self.last_end,
        )

    def close(self) -> None:
        self.c.close()


def open_session(req: PlayRequest) -> PlaySession:
    """The run's newest (or named) checkpoint, verified, playing ``req.worlds`` worlds of its task."""

    require_runtime_platform("unilab play")
    if not 1 <= req.worlds <= MAX_WORLDS:
        raise UnilabError(f"--worlds {req.worlds} is out of range", fix=f"pass --worlds between 1 and {MAX_WORLDS}")
    if not 0 <= req.seed < 2**31:
        raise UnilabError(f"--seed {req.seed} is out of range", fix="pass --seed between 0 and 2147483647")
    run = load_run_policy(req.run_dir, req.checkpoint, "play")
    task, sim = run.task(req.worlds), run.sim()
    if robot_spec(task) is None:  # the viewer draws the G1's state (base frame, feet, commands)
        raise UnilabError(
            f"unilab play shows the G1 tasks; {run.plan.task.name} is not one",
            fix=f"watch it with unilab eval {req.run_dir} --video FILE.mp4",
        )
    # The viewer's geometry: the collector's physics workers keep their own compiled copy.
    model = mujoco.MjModel.from_xml_string(compose_robot(task, sim, run.base).xml)
    torch.set_num_threads(1)  # one world's policy batch is tiny; the viewer's threads need the CPUs
    c = build_collector(task, sim, spec_dir=run.base, num_envs=req.worlds, workers=1, seed=req.seed, timing=False)
    try:
        run.check_fits(c, fix="play it with the unilab that wrote it (the version and commit its run's manifest names)")
        return PlaySession(c, run.policy, model, checkpoint=run.checkpoint, checkpoint_env_steps=run.env_steps)
    except BaseException:
        c.close()
        raise
