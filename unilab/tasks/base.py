"""The runtime task: a fixed-shape tensor program over the backend's PhysicsState.

A task owns persistent buffers (actions, derived state, observation, reward, done flags) that
are allocated once; each lifecycle method updates them in place. The collector
(``unilab.collect.collector``) calls the methods in this order every env step:

    apply_actions -> [backend.step] -> read_state, advance -> compute_terminations ->
    compute_rewards (the alive bonus reads this step's terminations) -> step_events (commands,
    interval events) -> compute_observations ->
    [reset of done worlds: reset_targets -> backend.reset -> read_state -> compute_observations]

Nothing here reads a device value back to the host.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import torch

from unilab.errors import UnilabError
from unilab.robot import g1
from unilab.sections import G1TaskSpec
from unilab.tasks.declarations import TermDecl, TermKind
from unilab.tasks.terms import (
    CommandTerm,
    CurriculumTerm,
    EventTerm,
    ObservationNoiseTerm,
    ObservationTerm,
    RewardTerm,
    TensorFn,
    TerminationTerm,
)
from unilab.tasks.timing import max_episode_steps


class _Named(Protocol):
    name: str


_T = TypeVar("_T", bound=_Named)
# Declared terms the task builds apart from their kind's list (unilab.tasks.base.Task.bind).
BUILT_APART = frozenset({"observation_noise"})

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sim.contract import ModelDims, PhysicsBackend, PhysicsState
    from unilab.tasks.contract import CollectorTask
    from unilab.tasks.taskdef import TaskDef


def _contiguous(adr: tuple[int, ...]) -> slice | None:
    if all(b == a + 1 for a, b in itertools.pairwise(adr)):
        return slice(adr[0], adr[-1] + 1)
    return None


# Joint-space action offsets: ctrl = default_pose + action_scale * action, with mjlab's G1 rule
# `factor * effort_limit / kp` per joint (factor: the spec's task.action_scale, 0.25 by default).
ACTION_SCALE_FACTOR = 0.25


def joint_action_scale(layout: RobotLayout, factor: float | None = None) -> torch.Tensor:
    """[29] float32 on the CPU, in the layout's joint order: an action of 1 asks for `factor` of the
    joint's effort limit (the G1's published limit where the model leaves it unlimited) from the PD
    loop at the standing pose. `factor` None: mjlab's 0.25."""
    factor = ACTION_SCALE_FACTOR if factor is None else factor
    effort = [
        e if math.isfinite(e) else g1.EFFORT_LIMIT[j]
        for e, j in zip(layout.effort_limit.tolist(), layout.joint_names, strict=True)
    ]
    kp = torch.tensor(layout.kp, dtype=torch.float32).clamp(min=1e-6)
    return factor * torch.tensor(effort, dtype=torch.float32) / kp


# The task's own spec model (G1WalkSpec, G1MotionTrackingSpec): each task reads its own keys.
SpecT = TypeVar("SpecT", bound=G1TaskSpec)


def composed_layout(layout: RobotLayout | None, task: str) -> RobotLayout:
    """The composed G1's layout a G1 task's `build` is given (None only for a task with its own model)."""
    if layout is None:
        raise ValueError(f"{task} simulates the G1: it needs the composed robot's layout")
    return layout


def as_g1_task(task: CollectorTask) -> Task[Any]:
    """``task`` as a G1 task (its base frame, layout, command and clip controls), for the lines
    eval and play draw of the G1 alone; they reach here only for a task that simulates it."""
    if not isinstance(task, Task):
        raise UnilabError(
            f"the task {task.name} does not simulate the G1: its base frame and feet are not there to read",
            fix="evaluate it without the G1's tracking and gait lines (they are drawn for G1 tasks only)",
        )
    return task


class Task(ABC, Generic[SpecT]):
    """Common machinery of the G1 tasks; subclasses build the terms."""

    name: str = "task"
    definition: TaskDef  # the task package's record: its term inventory and reward weights

    def __init__(
        self,
        spec: SpecT,
        backend: PhysicsBackend,
        layout: RobotLayout,
        *,
        step_dt: float,
        seed: int = 0,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.layout = layout
        self.device = backend.device
        self.num_envs = n = backend.num_envs
        self.step_dt = float(step_dt)
        # The plan records the same value (unilab.plan.compile uses the same function).
        self.max_episode_steps = max_episode_steps(spec.episode_length_s, self.step_dt)
        self.generator = torch.Generator(device=self.device)
        self.seed = int(seed)
        self.generator.manual_seed(self.seed)
        dev = self.device
        f32 = torch.float32

        dims = backend.dims
        self._index_layout(layout, dims)

        self._consts: dict[tuple[float, torch.dtype], torch.Tensor] = {}
        # Persistent buffers.
        self.actions = torch.zeros(n, self.num_actions, device=dev, dtype=f32)
        self.last_actions = torch.zeros_like(self.actions)
        self.ctrl = torch.zeros(n, dims.nu, device=dev, dtype=f32)
        self.episode_step = torch.zeros(n, device=dev, dtype=torch.int32)
        self._one_step = self.const(1, torch.int32)
        self._max_steps = self.const(self.max_episode_steps, torch.int32)
        self.reset_qpos = self.default_qpos.repeat(n, 1)
        self.reset_qvel = torch.zeros(n, dims.nv, device=dev, dtype=f32)
        # Derived state. Base pose, base velocities and (where contiguous) joint positions and
        # velocities are views of the backend's persistent state tensors: no copy per step.
        self._gravity_w = torch.tensor([0.0, 0.0, -1.0], device=dev, dtype=f32).expand(n, 3)
        # [N, 2, 3]: base linear velocity and gravity, rotated into the base frame together.
        self._base_frame = torch.zeros(n, 2, 3, device=dev, dtype=f32)
        self._world_vecs = torch.zeros(n, 2, 3, device=dev, dtype=f32)
        self._world_vecs[:, 1] = self._gravity_w
        self._world_lin_vel = self._world_vecs[:, 0]
        self._rot_a = torch.zeros(n, 2, 3, device=dev, dtype=f32)  # scratch of the rotation
        self._rot_b = torch.zeros(n, 2, 3, device=dev, dtype=f32)
        self.base_lin_vel_b = self._base_frame[:, 0]
        self.projected_gravity = self._base_frame[:, 1]
        self.projected_gravity_z = self._base_frame[:, 1, 2]
        self.joint_pos_rel = torch.zeros(n, self.num_joints, device=dev, dtype=f32)
        # Buffers of the shared reward terms (each returns its own persistent output).
        self._action_diff = torch.zeros(n, self.num_actions, device=dev, dtype=f32)
        self._torque_sq = torch.zeros(n, dims.nu, device=dev, dtype=f32)
        self._r_action_rate = torch.zeros(n, device=dev, dtype=f32)
        self._r_joint_torques = torch.zeros(n, device=dev, dtype=f32)
        self._bind(backend.state)
        self._build_action_delay()

        # Terms, filled by subclasses in build_terms().
        self.commands: list[CommandTerm] = []
        self.observations: list[ObservationTerm] = []
        self.noise: ObservationNoiseTerm | None = None
        self.rewards: list[RewardTerm] = []
        self.terminations: list[TerminationTerm] = []
        self.events: list[EventTerm] = []
        self.curricula: list[CurriculumTerm] = []
        self.build_terms()
        self._finalize()

    def _index_layout(self, layout: RobotLayout, dims: ModelDims) -> None:
        """Where the layout's joints, actuators and base sit in the model's qpos, qvel and ctrl, and the
        robot's default pose, joint limits and action scale, on the task's device."""
        dev = self.device
        f32 = torch.float32
        qpos_adr = tuple(int(a) for a in layout.qpos_adr)
        qvel_adr = tuple(int(a) for a in layout.qvel_adr)
        act_ids = tuple(int(a) for a in layout.actuator_ids)
        self.num_joints = len(qpos_adr)
        if dims.nu < self.num_joints or layout.default_qpos.shape[0] != dims.nq:
            raise UnilabError(
                f"the physics model (nq={dims.nq}, nu={dims.nu}) does not match the robot layout "
                f"(nq={layout.default_qpos.shape[0]}, {self.num_joints} actuated joints)",
                fix="build the backend and the task from the same model (unilab.robot.model.build_model_xml)",
            )
        self._qpos_idx = torch.tensor(qpos_adr, device=dev, dtype=torch.long)
        # Where each joint's position sits in qpos (a task's reset event writes `reset_qpos` there).
        self.joint_qpos_index = self._qpos_idx
        self._qvel_idx = torch.tensor(qvel_adr, device=dev, dtype=torch.long)
        self._qpos_slice = _contiguous(qpos_adr)
        self._qvel_slice = _contiguous(qvel_adr)
        self._act_idx = torch.tensor(act_ids, device=dev, dtype=torch.long)
        self._act_identity = act_ids == tuple(range(dims.nu))
        b = int(layout.base_qpos_adr)
        self._base_pos = slice(b, b + 3)
        self._base_quat = slice(b + 3, b + 7)
        v = int(layout.base_qvel_adr)
        self._base_lin = slice(v, v + 3)
        self._base_ang = slice(v + 3, v + 6)
        if layout.pose != self.spec.default_pose:
            raise UnilabError(
                f"internal: the robot layout stands in pose {layout.pose!r}, the task spec asks for "
                f"{self.spec.default_pose!r}",
                fix="build the layout with RobotLayout.from_model(model, spec.default_pose)",
            )
        self.default_qpos = torch.tensor(layout.default_qpos, device=dev, dtype=f32)
        self.default_joint_pos = self.default_qpos[self._qpos_idx].clone()
        self.joint_lower = torch.tensor(layout.joint_range[:, 0], device=dev, dtype=f32)
        self.joint_upper = torch.tensor(layout.joint_range[:, 1], device=dev, dtype=f32)
        self.action_scale = joint_action_scale(layout, self.spec.action_scale).to(dev)
        # The joints the policy's actions drive (all by default); the others hold the default pose.
        names = self.action_joint_names()
        if names is None:
            self._action_joints: torch.Tensor | None = None
            self.num_actions = self.num_joints
        else:
            idx = [layout.joint_names.index(j) for j in names]
            self._action_joints = torch.tensor(idx, device=dev, dtype=torch.long)
            self.num_actions = len(idx)
            self._action_default = self.default_joint_pos[self._action_joints].clone()
            self._action_joint_scale = self.action_scale[self._action_joints].clone()
            self._joint_targets = self.default_joint_pos.repeat(self.num_envs, 1)  # held joints stay here

    def _build_action_delay(self) -> None:
        """The policy's recent actions, for `task.domain_randomization.action_delay_steps`: world i's
        servos get the action of `delay[i]` control steps ago (0 at reset: the standing pose)."""
        dr = self.spec.randomization
        steps = dr.action_delay_steps if dr is not None else False
        self._action_delay: torch.Tensor | None = None
        if steps is False or steps[1] == 0:
            return
        n, dev = self.num_envs, self.device
        self._action_hist = torch.zeros(n, steps[1] + 1, self.num_actions, device=dev)
        self._action_delay = torch.zeros(n, 1, self.num_actions, device=dev, dtype=torch.long)
        self._delayed = torch.zeros(n, 1, self.num_actions, device=dev)

    def set_action_delay(self, mask: torch.Tensor, steps: torch.Tensor) -> None:
        """The action delay of the worlds in ``mask``, control steps [N] (at most the spec's upper bound)."""
        if self._action_delay is None:
            if bool((steps[mask] != 0).any()):
                raise UnilabError("internal: an action delay for a task built without one")
            return
        delay = self._action_delay
        delay.copy_(torch.where(mask.view(-1, 1, 1), steps.view(-1, 1, 1).expand_as(delay), delay))

    def _delayed_actions(self) -> torch.Tensor:
        """This step's actions as the servos get them: each world's, `delay` steps late."""
        if self._action_delay is None:
            return self.actions
        hist = self._action_hist
        for k in range(hist.shape[1] - 1, 0, -1):  # one slot older each, newest last: no copy of the whole
            hist[:, k].copy_(hist[:, k - 1])
        hist[:, 0].copy_(self.actions)
        return torch.gather(hist, 1, self._action_delay, out=self._delayed).squeeze(1)

    def action_joint_names(self) -> tuple[str, ...] | None:
        """The joints the actions drive, in action order; None: every joint, in the layout's order."""
        return self.definition.action_joints(self.spec)

    # ------------------------------------------------------------------ construction
    @abstractmethod
    def build_terms(self) -> None:
        """Create the task's term lists (commands, observations, rewards, terminations, events)."""

    def _finalize(self) -> None:
        n, dev = self.num_envs, self.device
        self.obs_dim = sum(t.dim for t in self.observations)
        self._obs_slices: list[slice] = []
        start = 0
        for t in self.observations:
            self._obs_slices.append(slice(start, start + t.dim))
            start += t.dim
        self.obs = torch.zeros(n, self.obs_dim, device=dev)
        scales = torch.cat([torch.full((t.dim,), float(t.scale)) for t in self.observations])
        self._obs_scale = scales.to(dev) if bool((scales != 1.0).any()) else None
        if self.spec.observation_noise:
            self.noise = ObservationNoiseTerm("observation_noise", self._noise_amplitude())
        self._noise_scratch = torch.zeros(n if self.noise is not None else 0, self.obs_dim, device=dev)
        self.reward_terms = torch.zeros(n, len(self.rewards), device=dev)
        self._reward_scale = torch.tensor([t.weight * self.step_dt for t in self.rewards], device=dev)
        self.reward = torch.zeros(n, device=dev)
        self.terminated = torch.zeros(n, device=dev, dtype=torch.bool)
        self.truncated = torch.zeros(n, device=dev, dtype=torch.bool)
        self._terminating = [t for t in self.terminations if not t.time_out]
        self._time_outs = [t for t in self.terminations if t.time_out]
        self._reset_events = [e for e in self.events if e.mode == "reset"]
        self._interval_events = [e for e in self.events if e.mode == "interval"]
        # Interval events fire per world on a staggered schedule known on the host: world i fires
        # when (step + offset_i) % period == 0. Offsets are spread evenly (then shuffled) so each
        # step touches about N / period worlds and no step needs a device read to know whether
        # any world fires.
        self._interval_sched: list[tuple[EventTerm, torch.Tensor, list[bool]]] = []
        for k, e in enumerate(self._interval_events):
            p = max(1, e.period_steps)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1000 + k))
            offsets = (torch.arange(n) % p)[perm]
            fires_at = [False] * p
            for o in offsets.tolist():
                fires_at[(-o) % p] = True
            self._interval_sched.append((e, offsets.to(dev), fires_at))
        self._step_count = 0

    @property
    def terms(self) -> list[Any]:
        """The runtime inventory, in the order `TaskDef.terms` lists it."""
        out: list[Any] = [*self.commands, *self.observations]
        if self.noise is not None:
            out.append(self.noise)
        out += [*self.rewards, *self.terminations, *self.events, *self.curricula]
        return out

    def term_decls(self) -> list[TermDecl]:
        return [t.decl for t in self.terms]

    def observation_layout(self) -> dict[str, slice]:
        """Columns of each observation term in the observation vector."""
        return {t.name: sl for t, sl in zip(self.observations, self._obs_slices, strict=True)}

    @property
    def reward_names(self) -> list[str]:
        return [t.name for t in self.rewards]

    def _noise_amplitude(self) -> torch.Tensor:
        # Only the actor's inputs are noisy: a privileged term (`task.privileged_observations`) is
        # the critic's, read from the simulator as it is (mjlab's critic has no noise either).
        privileged = set(self.spec.privileged_observations or ())
        amp = torch.zeros(self.obs_dim, device=self.device)
        start = 0
        for t in self.observations:
            if t.name not in privileged:
                amp[start : start + t.dim] = t.noise * t.scale
            start += t.dim
        return amp

    # ------------------------------------------------------------------ helpers for terms
    def const(self, value: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``value`` as a 0-dim tensor on the task's device, made once. As an operand it acts like
        the number (same dtype promotion, same result) but saves the per-call wrapping of a Python
        number into a fresh tensor (about 3 us per op on CPU, a third of a small op's cost)."""
        key = (float(value), dtype)
        t = self._consts.get(key)
        if t is None:
            t = self._consts[key] = torch.tensor(value, device=self.device, dtype=dtype)
        return t

    def rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, device=self.device, generator=self.generator)

    def uniform(self, lo: float, hi: float, *shape: int) -> torch.Tensor:
        # uniform_ draws from the generator exactly as rand does (the same numbers, scaled in one op).
        return torch.empty(*shape, device=self.device).uniform_(lo, hi, generator=self.generator)

    # ------------------------------------------------------------------ lifecycle
    def apply_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions [N, 29] -> PD position targets in the persistent ctrl buffer."""
        self.last_actions.copy_(self.actions)
        self.actions.copy_(actions)
        applied = self._delayed_actions()
        if self._action_joints is None:
            target = torch.addcmul(self.default_joint_pos, applied, self.action_scale)
        else:
            target = self._joint_targets
            target.index_copy_(
                1, self._action_joints, torch.addcmul(self._action_default, applied, self._action_joint_scale)
            )
        if self._act_identity:
            self.ctrl.copy_(target)
        else:
            self.ctrl.index_copy_(1, self._act_idx, target)
        return self.ctrl

    def _bind(self, state: PhysicsState) -> None:
        self.state = state
        qpos, qvel = state.qpos, state.qvel
        self._bound = (qpos, qvel)
        self.base_pos = qpos[:, self._base_pos]
        self.base_quat = qpos[:, self._base_quat]
        self.base_lin_vel_w = qvel[:, self._base_lin]  # free joint: linear velocity in the world frame
        self.base_ang_vel_b = qvel[:, self._base_ang]  # free joint: angular velocity in the body frame
        n = qpos.shape[0]
        if self._qpos_slice is not None:
            self.joint_pos = qpos[:, self._qpos_slice]
        else:
            self.joint_pos = torch.zeros(n, self.num_joints, device=self.device)
        if self._qvel_slice is not None:
            self.joint_vel = qvel[:, self._qvel_slice]
        else:
            self.joint_vel = torch.zeros(n, self.num_joints, device=self.device)
        # Views made once per binding, so a step spends no op on slicing (each torch op, even a
        # view, costs microseconds at these sizes, more with caches cold after the physics step).
        self.base_height = qpos[:, self._base_pos.start + 2]
        self.base_yaw_rate = qvel[:, self._base_ang.start + 2]
        self._quat_w = self.base_quat[:, None, :1]  # [N, 1, 1]
        self._quat_v = self.base_quat[:, None, 1:]  # [N, 1, 3]

    def read_state(self, state: PhysicsState) -> None:
        """Refresh derived quantities from the physics state (pure: may run twice per step)."""
        if state.qpos is not self._bound[0] or state.qvel is not self._bound[1]:
            self._bind(state)  # a backend that replaced its tensors (the contract says it does not)
        self.state = state
        if self._qpos_slice is None:
            torch.index_select(state.qpos, 1, self._qpos_idx, out=self.joint_pos)
        if self._qvel_slice is None:
            torch.index_select(state.qvel, 1, self._qvel_idx, out=self.joint_vel)
        torch.sub(self.joint_pos, self.default_joint_pos, out=self.joint_pos_rel)
        self._world_lin_vel.copy_(self.base_lin_vel_w)
        # Base linear velocity and gravity into the base frame together, as quat.quat_apply_inverse
        # computes it but in four ops into persistent buffers: with a = u x v and b = u x a
        # (u the quaternion's vector part, w its scalar), the result is v + 2 (b - w a).
        a, b = self._rot_a, self._rot_b
        torch.linalg.cross(self._quat_v, self._world_vecs, dim=-1, out=a)
        torch.linalg.cross(self._quat_v, a, dim=-1, out=b)
        b.addcmul_(self._quat_w, a, value=-1.0)
        torch.add(self._world_vecs, b, alpha=2.0, out=self._base_frame)
        self.read_task_state()

    def read_task_state(self) -> None:
        """Task-specific derived quantities (pure)."""

    def advance(self) -> None:
        """Once per env step, after the physics step: counters and per-step task state."""
        self.episode_step.add_(self._one_step)
        self._step_count += 1

    def compute_rewards(self) -> torch.Tensor:
        torch.stack([t.fn(self) for t in self.rewards], dim=1, out=self.reward_terms)
        self.reward_terms.mul_(self._reward_scale)
        torch.sum(self.reward_terms, dim=1, out=self.reward)
        return self.reward

    def set_reward_weights(self, weights: Sequence[float]) -> None:
        if len(weights) != len(self.rewards):
            raise UnilabError(f"internal: {len(weights)} reward weights for {len(self.rewards)} terms")
        for t, w in zip(self.rewards, weights, strict=True):
            t.weight = float(w)
        self._reward_scale.copy_(torch.tensor([t.weight * self.step_dt for t in self.rewards]))

    def compute_terminations(self) -> tuple[torch.Tensor, torch.Tensor]:
        self._any_of(self._terminating, self.terminated)
        self._any_of(self._time_outs, self.truncated)
        # A true termination wins over a time-out at the same step (on bools, a > b is a and not b).
        torch.gt(self.truncated, self.terminated, out=self.truncated)
        return self.terminated, self.truncated

    def _any_of(self, terms: list[TerminationTerm], out: torch.Tensor) -> None:
        # The first term is copied in rather than or-ed into a zeroed buffer: one op fewer.
        if not terms:
            out.zero_()
            return
        out.copy_(terms[0].fn(self))
        for t in terms[1:]:
            out.logical_or_(t.fn(self))

    def step_events(self) -> None:
        """Commands' per-step update, then interval events due at this step."""
        for c in self.commands:
            if c.update is not None:
                c.update(self)
        for e, offsets, fires_at in self._interval_sched:
            p = len(fires_at)
            if fires_at[self._step_count % p]:
                mask = (offsets + self._step_count) % p == 0
                e.apply(self, mask)
        for c in self.curricula:
            if not c.reset_owned:
                c.update(self, torch.ones(self.num_envs, dtype=torch.bool, device=self.device))

    def compute_observations(self) -> torch.Tensor:
        torch.cat([t.fn(self) for t in self.observations], dim=1, out=self.obs)
        if self._obs_scale is not None:
            self.obs.mul_(self._obs_scale)
        if self.noise is not None:
            self.noise.apply(self.obs, self._noise_scratch, self.generator)
        return self.obs

    def reset_targets(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prepare the reset of the worlds in ``mask`` [N] bool: resample commands, run reset
        events (which write ``reset_qpos``/``reset_qvel`` and model randomization), clear
        per-episode buffers. Returns the full-shape targets; rows outside ``mask`` are ignored."""
        for c in self.curricula:
            if c.reset_owned:
                c.update(self, mask)
        for c in self.commands:
            c.resample(self, mask)
        for e in self._reset_events:
            e.apply(self, mask)
        col = mask.unsqueeze(1)
        self.actions.masked_fill_(col, 0.0)
        self.last_actions.masked_fill_(col, 0.0)
        if self._action_delay is not None:
            self._action_hist.masked_fill_(mask.view(-1, 1, 1), 0.0)
        self.episode_step.masked_fill_(mask, 0)
        self.reset_task_buffers(mask)
        return self.reset_qpos, self.reset_qvel

    def reset_task_buffers(self, mask: torch.Tensor) -> None:
        """Task-specific per-episode buffers of the masked worlds."""

    def reference_qpos(self, worlds: int) -> torch.Tensor | None:
        """[worlds, nq]: the pose worlds 0..worlds-1 are told to track now, as a robot state, for
        drawing it beside the robot (`unilab eval --video`); None for a task that tracks no pose."""
        return None

    def commanded_velocity(self, worlds: int) -> torch.Tensor | None:
        """[worlds, 3]: the (vx, vy, yaw rate) worlds 0..worlds-1 are commanded now, in the robot's
        heading frame, for drawing it (`unilab eval --video`); None for a task without one."""
        return None

    # ------------------------------------------------------------------ live control (`unilab play`)
    def velocity_command_ranges(self) -> tuple[tuple[float, float], ...] | None:
        """The (lo, hi) of the velocity command's components (vx, vy, yaw rate) the task draws from,
        for a viewer's sliders; None for a task without a velocity command."""
        return None

    def hold_velocity_command(self, command: Sequence[float] | None) -> None:
        """Command every world ``command`` (vx, vy, yaw rate) from now on, in place of the task's
        draws; None lets the draws go on. Only a task with `velocity_command_ranges` takes one."""
        raise UnilabError(f"the task {self.name} takes no velocity command")

    def motion_clip(self) -> tuple[int, float] | None:
        """(frames, fps) of the reference clip a tracking task follows; None for a task without one."""
        return None

    def clip_frame(self, world: int) -> int | None:
        """The clip frame ``world`` tracks now; None for a task without a clip."""
        return None

    def hold_clip_start(self, frame: int | None) -> None:
        """Start every episode from now on at clip frame ``frame`` in place of a random one; None
        lets the draws go on. Only a task with a `motion_clip` takes one."""
        raise UnilabError(f"the task {self.name} tracks no motion clip")

    def after_reset(self, mask: torch.Tensor, state: PhysicsState) -> None:
        """Called once the backend has reset the masked worlds."""
        self.read_state(state)

    def diagnostic_terms(self) -> dict[str, TensorFn]:
        """Per-step learning-health figures beyond the rewards: name -> ``fn(task) -> [N]``, read
        after the step's state (as a reward term is). The collector sums them on the device and a
        run reports each as its mean per env step at every log (events and TensorBoard); none by
        default."""
        return {}

    # ------------------------------------------------------------------ shared terms
    def obs_base_ang_vel(self) -> torch.Tensor:
        return self.base_ang_vel_b

    def obs_base_lin_vel(self) -> torch.Tensor:
        return self.base_lin_vel_b

    def obs_projected_gravity(self) -> torch.Tensor:
        return self.projected_gravity

    def obs_joint_pos_rel(self) -> torch.Tensor:
        return self.joint_pos_rel

    def obs_joint_vel_rel(self) -> torch.Tensor:
        return self.joint_vel

    def obs_last_action(self) -> torch.Tensor:
        return self.actions

    def rew_action_rate_l2(self) -> torch.Tensor:
        diff = self._action_diff
        torch.sub(self.actions, self.last_actions, out=diff)
        return torch.sum(diff.square_(), dim=1, out=self._r_action_rate)

    def rew_joint_torques_l2(self) -> torch.Tensor:
        sq = self._torque_sq
        torch.square(self.state.actuator_force, out=sq)
        return torch.sum(sq, dim=1, out=self._r_joint_torques)

    def term_time_out(self) -> torch.Tensor:
        return self.episode_step >= self._max_steps

    def bind(self, kind: TermKind, terms: Sequence[_T]) -> list[_T]:
        """This spec's `kind` terms, by name and in order, from the declarations the planner reads
        (`TaskDef.terms` of the task's package, the one inventory): a term the task implements but the spec
        does not ask for (the gait clock's without `task.gait_period_s`) is left out. Observation
        noise is declared as an observation term and built apart (`ObservationNoiseTerm`)."""
        have = {t.name: t for t in terms}
        names = [d.name for d in self.definition.terms(self.spec) if d.kind == kind and d.name not in BUILT_APART]
        missing = [n for n in names if n not in have]
        if missing:
            raise UnilabError(f"internal: task {self.spec.name} declares {kind} terms it does not build: {missing}")
        return [have[n] for n in names]

    def weighted_rewards(self, fns: dict[str, TensorFn]) -> list[RewardTerm]:
        """The reward terms by name, in the task's declared order, with their weights: the task's
        defaults with ``task.reward_weights`` applied (`TaskDef.weights`, which the plan lists); a
        term the spec does not ask for is left out, as `bind` does."""
        weights = self.definition.weights(self.spec)
        missing = [n for n in weights if n not in fns]
        if missing:
            raise UnilabError(f"internal: task {self.spec.name} declares reward terms it does not build: {missing}")
        return [RewardTerm(name, w, fns[name]) for name, w in weights.items()]

    def shared_observations(self, joint_vel_noise: float) -> list[ObservationTerm]:
        """Joint state and last action, the tail of both G1 observations (the joint velocity noise
        differs: mjlab's velocity task uses 1.5, its tracking task 0.5)."""
        return [
            ObservationTerm("joint_pos_rel", self.num_joints, Task.obs_joint_pos_rel, noise=0.01),
            ObservationTerm("joint_vel_rel", self.num_joints, Task.obs_joint_vel_rel, noise=joint_vel_noise),
            ObservationTerm("last_action", self.num_actions, Task.obs_last_action),
        ]
