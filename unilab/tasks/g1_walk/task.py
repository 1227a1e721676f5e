"""`g1_walk`: velocity-command tracking on flat ground (mjlab / legged_gym style terms).

Commands (vx, vy, yaw rate) are drawn from ``task.commands`` at reset and, with
``commands.resample_s``, again within an episode, a ``commands.standing_share`` of them zero; the
policy outputs joint offsets around the standing pose, which become PD position targets. Reward
weights are per second (the task multiplies by the env step's duration).

With ``task.gait_period_s``, a gait clock (MuJoCo Playground's G1 joystick task has one) gives the
policy a stepping rhythm: a phase that cycles once per stride, observed as its sine and cosine,
and the `feet_phase` reward for feet that follow it while a walk is commanded. Each foot swings
for half of the stride, anti-phase to the other, along ``SWING_HEIGHT * max(sin(2 pi x), 0)``
over its phase x.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from unilab.errors import UnilabError
from unilab.robot import g1
from unilab.tasks.base import Task, composed_layout
from unilab.tasks.events import shared_events
from unilab.tasks.g1_walk import G1_WALK
from unilab.tasks.g1_walk.spec import G1WalkSpec
from unilab.tasks.terms import CommandTerm, EventTerm, ObservationTerm, TensorFn, TerminationTerm

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sim.contract import PhysicsBackend

UPRIGHT_STD = 0.25  # on the horizontal part of the projected gravity
FALL_HEIGHT = 0.4  # m, pelvis below this: fallen
FALL_TILT = 1.0  # rad between the pelvis z axis and the world z axis
# `feet_air_time` pays each touchdown its air time beyond AIR_TIME_MIN, up to AIR_TIME_MAX (MuJoCo
# Playground's G1 thresholds), and never less than 0: a short first shuffle earns nothing rather
# than a penalty, so stepping is never worse than standing.
AIR_TIME_MIN = 0.2  # s
AIR_TIME_MAX = 0.5  # s
FOOT_CONTACT_HEIGHT = 0.06  # m: foot body origin below this counts as a contact (origin is ~0.037 standing)
MOVING_COMMAND = 0.1  # m/s: a linear velocity command above this asks to walk (air-time reward)
RESET_JOINT_NOISE = 0.1  # rad, uniform around the standing pose
RESET_VEL_NOISE = 0.05  # m/s and rad/s on the base
# The gait clock's swing arc and kernel are holosoma's G1 FastSAC values (0.09 m, 0.008 m^2): with
# a tighter kernel (0.0015) no foot ever earned more than a standing one, as the arc's first
# centimetres paid nothing.
SWING_HEIGHT = 0.09  # m above the standing foot height at mid-swing
FOOT_STANDING_Z = 0.037  # m: the foot body origin's height standing in the default pose
FEET_PHASE_VAR = 0.008  # m^2: exp(-sum of squared height errors / this)
MOVING_COMMAND_NORM = 0.1  # |(vx, vy, yaw rate)| above which the feet are asked to step
# `task.gait_reward_gate = "progress"`: the gait terms pay while (v_xy, w_z) . cmd >= this * |cmd|^2,
# the base's velocity along its command at least a quarter of the command.
PROGRESS_SHARE = 0.25


def deployment_metadata(task: G1WalkSpec) -> dict[str, str]:
    """How a velocity policy's episodes were drawn and ended, for a runner outside unilab
    (`unilab.velocity_task` in an exported policy's metadata; docs/deploy.md)."""
    import json

    c = task.commands
    return {
        "unilab.velocity_task": json.dumps(
            {
                "episode_length_s": task.episode_length_s,
                "lin_vel_x": list(c.lin_vel_x),
                "lin_vel_y": list(c.lin_vel_y),
                "ang_vel_z": list(c.ang_vel_z),
                "standing_share": c.standing_share,
                "resample_s": c.resample_s,
                "gait_period_s": task.gait_period_s,
                "fall_height": FALL_HEIGHT,
                "fall_tilt": FALL_TILT,
                "reset_joint_noise": RESET_JOINT_NOISE,
                "reset_base_velocity_noise": RESET_VEL_NOISE,
            }
        )
    }


def build(
    spec: G1WalkSpec,
    backend: PhysicsBackend,
    layout: RobotLayout | None,
    *,
    step_dt: float,
    seed: int,
    spec_dir: Path,
) -> G1WalkTask:
    return G1WalkTask(spec, backend, composed_layout(layout, spec.name), step_dt=step_dt, seed=seed)


class G1WalkTask(Task[G1WalkSpec]):
    name = "g1_walk"
    definition = G1_WALK

    def build_terms(self) -> None:
        n, dev = self.num_envs, self.device
        self.velocity_command = torch.zeros(n, 3, device=dev)
        self._held_command: torch.Tensor | None = None  # `hold_velocity_command`
        self._build_feet_buffers()
        # Constants as 0-dim tensors (Task.const): cheaper operands than Python numbers.
        self._c_zero = self.const(0.0)
        self._c_one = self.const(1.0)
        self._c_step_dt = self.const(self.step_dt)
        self._c_contact_height = self.const(FOOT_CONTACT_HEIGHT)
        self._c_base_height = self.const(g1.POSE_BASE_HEIGHT[self.spec.default_pose])
        self._c_air_time_min = self.const(AIR_TIME_MIN)
        self._c_air_time_span = self.const(AIR_TIME_MAX - AIR_TIME_MIN)
        self._c_moving = self.const(MOVING_COMMAND)
        self._c_fall_height = self.const(FALL_HEIGHT)
        self._c_fall_gravity_z = self.const(-math.cos(FALL_TILT))
        self._build_reset_buffers()
        self._build_reward_buffers()
        gait = self.spec.gait_period_s
        if gait is not None:
            self._build_gait_clock(gait)
        self._build_command_draws()
        self._declare_terms()

    def _build_feet_buffers(self) -> None:
        """Per-episode feet state (air times, contacts, touchdowns) and the foot body ids it reads."""
        n, dev = self.num_envs, self.device
        feet = len(self.layout.feet_body_ids)
        # Per-episode feet buffers share storage: one float block, so a reset clears both in one op,
        # and one bool block.
        self._feet_times = torch.zeros(n, 2, feet, device=dev)
        self._feet_flags = torch.zeros(n, 2, feet, device=dev, dtype=torch.bool)
        self.feet_air_time = self._feet_times[:, 0]
        self._air_time_at_touchdown = self._feet_times[:, 1]
        self.feet_contact = self._feet_flags[:, 0]
        self._first_contact = self._feet_flags[:, 1]
        self._contact_now = torch.zeros(n, feet, device=dev, dtype=torch.bool)
        self._d_swing = torch.zeros(n, device=dev, dtype=torch.bool)  # diagnostic_terms' outputs
        self._d_feet_air = torch.zeros(n, device=dev)
        self._feet_idx = torch.tensor(self.layout.feet_body_ids.tolist(), device=dev, dtype=torch.long)
        self._feet_src: torch.Tensor | None = None  # the xpos tensor _feet_z views
        self._feet_z: torch.Tensor | None = None

    def _build_reset_buffers(self) -> None:
        """The default pose rows, the reset state views and the scratch `reset_around_default` draws into."""
        n, dev = self.num_envs, self.device
        default = self.default_qpos.clone()
        default[self._base_quat.start + 1 : self._base_quat.start + 3] = 0.0  # yaw-only quaternions
        self._default_qpos_rows = default.expand(n, -1)
        b = self._base_quat.start
        self._reset_views = (
            self.reset_qpos[:, b],
            self.reset_qpos[:, b + 3],
            self.reset_qpos[:, self._qpos_slice] if self._qpos_slice is not None else None,
            self.reset_qvel[:, self._base_lin.start : self._base_ang.stop],
        )
        self._reset_scratch = (
            torch.zeros(n, device=dev),
            torch.zeros(n, self.num_joints, device=dev),
            torch.zeros(n, 6, device=dev),
        )

    def _build_reward_buffers(self) -> None:
        n, dev, feet = self.num_envs, self.device, len(self.layout.feet_body_ids)
        # Reward term buffers and the views they read.
        self._cmd_xy = self.velocity_command[:, :2]
        self._cmd_yaw = self.velocity_command[:, 2]
        self._base_lin_vel_b_xy = self._base_frame[:, 0, :2]
        self._projected_gravity_xy = self._base_frame[:, 1, :2]
        self._lin_err = torch.zeros(n, 2, device=dev)
        self._gravity_xy_sq = torch.zeros(n, 2, device=dev)
        self._touchdown_gain = torch.zeros(n, feet, device=dev)
        self._moving = torch.zeros(n, device=dev, dtype=torch.bool)
        self._progress_vel = torch.zeros(n, 3, device=dev)  # `task.gait_reward_gate = "progress"`
        self._progress_sq = torch.zeros(n, 3, device=dev)
        self._progress_along, self._progress_need = torch.zeros(2, n, device=dev)
        self._c_progress_share = self.const(PROGRESS_SHARE)
        self._r_track_lin, self._r_track_ang, self._r_upright, self._r_base_height = torch.zeros(4, n, device=dev)
        self._r_feet_air_time, self._r_alive, self._r_hip_deviation = torch.zeros(3, n, device=dev)
        # Hip roll and yaw: the joints a splayed, toe-in stance saturates (every reference task
        # penalises their deviation from the default pose).
        hips = [i for i, j in enumerate(self.layout.joint_names) if j.endswith(("hip_roll_joint", "hip_yaw_joint"))]
        self._hip_idx = torch.tensor(hips, device=dev, dtype=torch.long)
        self._hip_default = self.default_joint_pos[self._hip_idx].clone()
        self._hip_dev = torch.zeros(n, len(hips), device=dev)
        std = self.spec.tracking_std
        self._c_neg_inv_lin_var = self.const(-1.0 / std.lin_vel_xy**2)
        self._c_neg_inv_yaw_var = self.const(-1.0 / std.ang_vel_z**2)
        self._c_neg_inv_upright_var = self.const(-1.0 / UPRIGHT_STD**2)

    def _build_command_draws(self) -> None:
        """Buffers of the velocity command draws (`task.commands`): ranges, standing share, resampling."""
        n, dev = self.num_envs, self.device
        c = self.spec.commands
        self._cmd_draw = torch.zeros(n, 3, device=dev)
        self._standing_draw = torch.zeros(n, device=dev)
        self._standing = torch.zeros(n, device=dev, dtype=torch.bool)
        self._c_standing_share = self.const(c.standing_share)
        # Whole env steps between draws within an episode (None: one draw per episode).
        self._resample_steps = (
            None if c.resample_s == 0 else self.const(max(1, round(c.resample_s / self.step_dt)), torch.int32)
        )
        self._resample_due = torch.zeros(n, device=dev, dtype=torch.bool)
        self._episode_step_mod = torch.zeros(n, device=dev, dtype=torch.int32)
        self._cmd_lo = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.ang_vel_z[0]], device=dev)
        self._cmd_span = torch.tensor(
            [c.lin_vel_x[1] - c.lin_vel_x[0], c.lin_vel_y[1] - c.lin_vel_y[0], c.ang_vel_z[1] - c.ang_vel_z[0]],
            device=dev,
        )

    def _declare_terms(self) -> None:
        """The task's command, observation, reward, termination and event terms, bound by name to
        the spec's declared inventory (the gait clock's only with `task.gait_period_s`)."""
        walk = G1WalkTask
        self.commands = self.bind(
            "command",
            [
                CommandTerm(
                    "velocity_command",
                    walk.resample_command,
                    walk.resample_due_commands,
                    interval=self.spec.commands.resample_s > 0,
                ),
                CommandTerm("gait_clock", walk.reset_gait_clock, walk.advance_gait_clock),
            ],
        )
        self.observations = self.bind(
            "observation",
            [
                ObservationTerm("base_lin_vel", 3, Task.obs_base_lin_vel, noise=0.5),
                ObservationTerm("base_ang_vel", 3, Task.obs_base_ang_vel, noise=0.2),
                ObservationTerm("projected_gravity", 3, Task.obs_projected_gravity, noise=0.05),
                ObservationTerm("velocity_command", 3, walk.obs_velocity_command),
                ObservationTerm("gait_phase", 2, walk.obs_gait_phase),
                *self.shared_observations(joint_vel_noise=1.5),
            ],
        )
        self.rewards = self.weighted_rewards(
            {
                "track_lin_vel_xy_exp": G1WalkTask.rew_track_lin_vel_xy,
                "track_ang_vel_z_exp": G1WalkTask.rew_track_ang_vel_z,
                "upright": G1WalkTask.rew_upright,
                "base_height": G1WalkTask.rew_base_height,
                "joint_torques_l2": Task.rew_joint_torques_l2,
                "action_rate_l2": Task.rew_action_rate_l2,
                "feet_air_time": G1WalkTask.rew_feet_air_time,
                "hip_deviation": G1WalkTask.rew_hip_deviation,
                "feet_phase": G1WalkTask.rew_feet_phase,
                "alive": G1WalkTask.rew_alive,
            }
        )
        self.terminations = self.bind(
            "termination",
            [
                TerminationTerm("fall_base_height", walk.term_base_height),
                TerminationTerm("fall_orientation", walk.term_orientation),
                TerminationTerm("time_out", Task.term_time_out, time_out=True),
            ],
        )
        self.events = [EventTerm("reset_joints_around_default", "reset", G1WalkTask.reset_around_default)]
        self.events += shared_events(self)

    def _build_gait_clock(self, period_s: float) -> None:
        """Buffers of the gait clock (`task.gait_period_s`): the left foot's phase in [0, 1); the
        right foot runs half a stride behind."""
        n, dev, feet = self.num_envs, self.device, len(self.layout.feet_body_ids)
        self.gait_phase = torch.zeros(n, device=dev)
        self._feet_phase = torch.zeros(n, feet, device=dev)
        self._phase_offsets = torch.tensor([0.5 * (i % 2) for i in range(feet)], device=dev)
        self._gait_angle = torch.zeros(n, device=dev)
        self._gait_obs = torch.zeros(n, 2, device=dev)
        self._swing_target = torch.zeros(n, feet, device=dev)
        self._phase_err = torch.zeros(n, device=dev)
        self._stepping = torch.zeros(n, device=dev, dtype=torch.bool)
        self._r_feet_phase = torch.zeros(n, device=dev)
        self._c_phase_step = self.const(self.step_dt / period_s)
        self._c_two_pi = self.const(2.0 * math.pi)
        self._c_swing_height = self.const(SWING_HEIGHT)
        self._c_foot_standing_z = self.const(FOOT_STANDING_Z)
        self._c_neg_inv_phase_var = self.const(-1.0 / FEET_PHASE_VAR)
        self._c_moving_norm = self.const(MOVING_COMMAND_NORM)

    # ------------------------------------------------------------------ per-step state
    def advance(self) -> None:
        super().advance()
        feet_z = self._feet_heights()
        contact, first_contact = self._contact_now, self._first_contact
        torch.lt(feet_z, self._c_contact_height, out=contact)
        torch.gt(contact, self.feet_contact, out=first_contact)  # on bools: contact and not before
        self.feet_air_time.add_(self._c_step_dt)
        torch.where(first_contact, self.feet_air_time, self._c_zero, out=self._air_time_at_touchdown)
        self.feet_air_time.masked_fill_(contact, 0.0)
        self.feet_contact.copy_(contact)

    def _feet_heights(self) -> torch.Tensor:
        """[N, feet] foot body heights of the current state (a view of it where the ids allow)."""
        xpos = self.state.xpos
        if xpos is not self._feet_src:
            self._feet_src, self._feet_z = xpos, _rows_view(xpos, self.layout.feet_body_ids.tolist())
        return self._feet_z if self._feet_z is not None else xpos[:, self._feet_idx, 2]

    # ------------------------------------------------------------------ learning-health diagnostics
    def diagnostic_terms(self) -> dict[str, TensorFn]:
        """Whether the feet leave the floor (a foot body origin at or above FOOT_CONTACT_HEIGHT, as
        `advance` reads contacts): a policy that earns its return standing shows a swing share near 0."""
        return {"swing_share": G1WalkTask.diag_swing_share, "feet_air_share": G1WalkTask.diag_feet_air_share}

    def diag_swing_share(self) -> torch.Tensor:
        """[N] bool: at least one foot in swing this step."""
        return torch.all(self._contact_now, dim=1, out=self._d_swing).logical_not_()

    def diag_feet_air_share(self) -> torch.Tensor:
        """[N]: the share of the feet in swing this step."""
        out = torch.mean(self._contact_now, dim=1, dtype=torch.float32, out=self._d_feet_air)
        return torch.sub(self._c_one, out, out=out)

    def reset_task_buffers(self, mask: torch.Tensor) -> None:
        # Air times and touchdown times to 0; first contacts (compute_rewards reads them as
        # "touchdown") off. Contacts on: an episode starts standing, so its first step's feet on
        # the floor are not touchdowns (that read as a 0.02 s swing, penalised at every reset).
        rows = mask.view(-1, 1)
        self._feet_times.masked_fill_(mask.view(-1, 1, 1), 0.0)
        self._first_contact.masked_fill_(rows, False)
        self.feet_contact.masked_fill_(rows, True)

    # ------------------------------------------------------------------ commands, events
    def velocity_command_ranges(self) -> tuple[tuple[float, float], ...]:
        c = self.spec.commands
        return (tuple(c.lin_vel_x), tuple(c.lin_vel_y), tuple(c.ang_vel_z))  # type: ignore[return-value]

    def hold_velocity_command(self, command: Sequence[float] | None) -> None:
        if command is None:
            self._held_command = None
            return
        if len(command) != 3:
            raise UnilabError(f"a velocity command has 3 components (vx, vy, yaw rate), not {len(command)}")
        self._held_command = torch.tensor([float(v) for v in command], device=self.device)
        self.velocity_command.copy_(self._held_command.expand_as(self.velocity_command))

    def resample_command(self, mask: torch.Tensor) -> None:
        if self._held_command is not None:  # a viewer's command stands in for the draws
            self.velocity_command.copy_(self._held_command.expand_as(self.velocity_command))
            return
        new = self._cmd_draw.uniform_(generator=self.generator)  # as self.rand(n, 3) draws
        torch.addcmul(self._cmd_lo, new, self._cmd_span, out=new)
        if self.spec.commands.standing_share > 0:  # a share asks to stand still (mjlab's standing envs)
            torch.lt(self._standing_draw.uniform_(generator=self.generator), self._c_standing_share, out=self._standing)
            new.masked_fill_(self._standing.unsqueeze(1), 0.0)
        torch.where(mask.unsqueeze(1), new, self.velocity_command, out=self.velocity_command)

    def resample_due_commands(self) -> None:
        """Every ``commands.resample_s`` of an episode, a new command: one policy learns to start,
        stop and turn, not only to hold the command it was reset with."""
        if self._resample_steps is None:
            return
        due = self._resample_due
        torch.remainder(self.episode_step, self._resample_steps, out=self._episode_step_mod)
        torch.eq(self._episode_step_mod, 0, out=due)
        self.resample_command(due)

    def reset_gait_clock(self, mask: torch.Tensor) -> None:
        self.gait_phase.masked_fill_(mask, 0.0)

    def advance_gait_clock(self) -> None:
        self.gait_phase.add_(self._c_phase_step).frac_()  # phases are >= 0: frac is the wrap into [0, 1)

    def reset_around_default(self, mask: torch.Tensor) -> None:
        # Rows outside `mask` are ignored by the backend, so every row is written.
        # Written in place through views made once (fewer ops); the draws are those of
        # quat.quat_from_axis_angle_z(uniform yaw), then joint noise, then base velocity noise.
        qpos, qvel = self.reset_qpos, self.reset_qvel
        half_yaw, joints, base_vel = self._reset_scratch
        quat_w, quat_z, joint_rows, base_vel_rows = self._reset_views
        qpos.copy_(self._default_qpos_rows)  # with the base orientation's x and y zeroed
        half_yaw.uniform_(-0.5 * math.pi, 0.5 * math.pi, generator=self.generator)
        torch.cos(half_yaw, out=quat_w)
        torch.sin(half_yaw, out=quat_z)
        joints.uniform_(-RESET_JOINT_NOISE, RESET_JOINT_NOISE, generator=self.generator).add_(self.default_joint_pos)
        if joint_rows is not None:
            torch.clamp(joints, self.joint_lower, self.joint_upper, out=joint_rows)
        else:
            qpos.index_copy_(1, self._qpos_idx, joints.clamp_(self.joint_lower, self.joint_upper))
        qvel.zero_()
        base_vel.uniform_(-RESET_VEL_NOISE, RESET_VEL_NOISE, generator=self.generator)
        base_vel_rows.copy_(base_vel)

    # ------------------------------------------------------------------ observations
    def commanded_velocity(self, worlds: int) -> torch.Tensor:
        """This episode's command (see Task.commanded_velocity)."""
        return self.velocity_command[:worlds]

    def obs_velocity_command(self) -> torch.Tensor:
        return self.velocity_command

    def obs_gait_phase(self) -> torch.Tensor:
        angle, out = self._gait_angle, self._gait_obs
        torch.mul(self.gait_phase, self._c_two_pi, out=angle)
        torch.sin(angle, out=out[:, 0])
        torch.cos(angle, out=out[:, 1])
        return out

    # ------------------------------------------------------------------ rewards
    # Each term writes into its own persistent buffer through views made once (no allocation, no
    # slicing per step) and returns it; compute_rewards copies the terms out at once.
    def rew_track_lin_vel_xy(self) -> torch.Tensor:
        err, out = self._lin_err, self._r_track_lin
        torch.sub(self._cmd_xy, self._base_lin_vel_b_xy, out=err)
        torch.sum(err.square_(), dim=1, out=out)
        return out.mul_(self._c_neg_inv_lin_var).exp_()

    def rew_track_ang_vel_z(self) -> torch.Tensor:
        out = self._r_track_ang
        torch.sub(self._cmd_yaw, self.base_yaw_rate, out=out)
        return out.square_().mul_(self._c_neg_inv_yaw_var).exp_()

    def rew_upright(self) -> torch.Tensor:
        sq, out = self._gravity_xy_sq, self._r_upright
        torch.square(self._projected_gravity_xy, out=sq)
        torch.sum(sq, dim=1, out=out)
        return out.mul_(self._c_neg_inv_upright_var).exp_()

    def rew_base_height(self) -> torch.Tensor:
        out = self._r_base_height
        torch.sub(self.base_height, self._c_base_height, out=out)
        return out.square_()

    def rew_feet_air_time(self) -> torch.Tensor:
        # A touchdown is exactly a first contact: the air time is then >= step_dt > 0 (and a reset
        # clears both), so the first-contact flags select the touchdown times.
        td, out = self._touchdown_gain, self._r_feet_air_time
        torch.sub(self._air_time_at_touchdown, self._c_air_time_min, out=td)
        torch.clamp(td, self._c_zero, self._c_air_time_span, out=td)
        torch.where(self._first_contact, td, self._c_zero, out=td)
        torch.sum(td, dim=1, out=out)
        torch.gt(torch.linalg.vector_norm(self._cmd_xy, dim=1), self._c_moving, out=self._moving)
        self._gate_on_progress(self._moving)
        return torch.where(self._moving, out, self._c_zero, out=out)

    def rew_feet_phase(self) -> torch.Tensor:
        # Each foot's target height: a swing arc over the first half of its phase, the floor over
        # the second; rewarded while a command asks to move (a standing robot keeps its feet down).
        x, target, err, out = self._feet_phase, self._swing_target, self._phase_err, self._r_feet_phase
        torch.add(self.gait_phase.unsqueeze(1), self._phase_offsets, out=x).frac_()
        torch.mul(x, self._c_two_pi, out=target)
        target.sin_().clamp_(min=0.0).mul_(self._c_swing_height).add_(self._c_foot_standing_z)
        target.sub_(self._feet_heights())
        torch.sum(target.square_(), dim=1, out=err)
        torch.mul(err, self._c_neg_inv_phase_var, out=out).exp_()
        torch.gt(torch.linalg.vector_norm(self.velocity_command, dim=1), self._c_moving_norm, out=self._stepping)
        self._gate_on_progress(self._stepping)
        return torch.where(self._stepping, out, self._c_zero, out=out)

    def _gate_on_progress(self, paid: torch.Tensor) -> None:
        """With `task.gait_reward_gate = "progress"`, keep ``paid`` only where the base moves toward
        its command: (v_x, v_y, w_z) . cmd >= PROGRESS_SHARE * |cmd|^2 (body frame)."""
        if self.spec.gait_reward_gate != "progress":
            return
        vel = self._progress_vel
        vel[:, :2].copy_(self._base_lin_vel_b_xy)
        vel[:, 2].copy_(self.base_yaw_rate)
        along = torch.sum(vel.mul_(self.velocity_command), dim=1, out=self._progress_along)
        need = torch.sum(torch.square(self.velocity_command, out=self._progress_sq), dim=1, out=self._progress_need)
        paid.logical_and_(along >= need.mul_(self._c_progress_share))

    def rew_hip_deviation(self) -> torch.Tensor:
        # L1, as MuJoCo Playground's `joint_deviation_hip`: a constant pull back however far out.
        dev = self._hip_dev
        torch.index_select(self.joint_pos, 1, self._hip_idx, out=dev)
        dev.sub_(self._hip_default).abs_()
        return torch.sum(dev, dim=1, out=self._r_hip_deviation)

    def rew_alive(self) -> torch.Tensor:
        return torch.where(self.terminated, self._c_zero, self._c_one, out=self._r_alive)

    # ------------------------------------------------------------------ terminations
    def term_base_height(self) -> torch.Tensor:
        return self.base_height < self._c_fall_height

    def term_orientation(self) -> torch.Tensor:
        return self.projected_gravity_z > self._c_fall_gravity_z


def _rows_view(xpos: torch.Tensor, body_ids: list[int]) -> torch.Tensor | None:
    """``xpos[:, body_ids, 2]`` as a view (no gather op per step) when the ids are evenly spaced."""
    if len(body_ids) == 1:
        return xpos[:, body_ids[0] : body_ids[0] + 1, 2]
    step = body_ids[1] - body_ids[0]
    if step > 0 and all(b - a == step for a, b in itertools.pairwise(body_ids)):
        return xpos[:, body_ids[0] : body_ids[-1] + 1 : step, 2]
    return None
