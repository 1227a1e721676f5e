"""`g1_walk`: velocity-command tracking on flat ground (mjlab / legged_gym style terms).

Commands (vx, vy, yaw rate) are drawn per episode from ``task.commands``; the policy outputs
joint offsets around the standing pose, which become PD position targets. Reward weights are
per second (the task multiplies by the env step's duration).
"""

from __future__ import annotations

import math

import torch

from unilab.robot import g1
from unilab.tasks import quat as Q
from unilab.tasks.base import Task
from unilab.tasks.events import shared_events
from unilab.tasks.terms import CommandTerm, EventTerm, ObservationTerm, RewardTerm, TerminationTerm

TRACKING_STD = 0.5  # m/s and rad/s: exp(-err^2 / std^2)
UPRIGHT_STD = 0.25  # on the horizontal part of the projected gravity
FALL_HEIGHT = 0.4  # m, pelvis below this: fallen
FALL_TILT = 1.0  # rad between the pelvis z axis and the world z axis
AIR_TIME_TARGET = 0.4  # s: swing phases longer than this are rewarded at touchdown
FOOT_CONTACT_HEIGHT = 0.06  # m: foot body origin below this counts as a contact (origin is ~0.037 standing)
RESET_JOINT_NOISE = 0.1  # rad, uniform around the standing pose
RESET_VEL_NOISE = 0.05  # m/s and rad/s on the base


class G1WalkTask(Task):
    name = "g1_walk"

    def build_terms(self) -> None:
        n, dev = self.num_envs, self.device
        self.velocity_command = torch.zeros(n, 3, device=dev)
        self.feet_air_time = torch.zeros(n, len(self.layout.feet_body_ids), device=dev)
        self.feet_contact = torch.zeros(n, len(self.layout.feet_body_ids), device=dev, dtype=torch.bool)
        self._air_time_at_touchdown = torch.zeros_like(self.feet_air_time)
        self._feet_idx = torch.tensor(self.layout.feet_body_ids.tolist(), device=dev, dtype=torch.long)
        c = self.spec.commands
        self._cmd_lo = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.ang_vel_z[0]], device=dev)
        self._cmd_span = torch.tensor(
            [c.lin_vel_x[1] - c.lin_vel_x[0], c.lin_vel_y[1] - c.lin_vel_y[0], c.ang_vel_z[1] - c.ang_vel_z[0]],
            device=dev,
        )

        self.commands = [CommandTerm("velocity_command", G1WalkTask.resample_command)]
        self.observations = [
            ObservationTerm("base_ang_vel", 3, Task.obs_base_ang_vel, noise=0.2),
            ObservationTerm("projected_gravity", 3, Task.obs_projected_gravity, noise=0.05),
            ObservationTerm("velocity_command", 3, G1WalkTask.obs_velocity_command),
            *self.shared_observations(),
        ]
        self.rewards = [
            RewardTerm("track_lin_vel_xy_exp", 1.0, G1WalkTask.rew_track_lin_vel_xy),
            RewardTerm("track_ang_vel_z_exp", 0.5, G1WalkTask.rew_track_ang_vel_z),
            RewardTerm("upright", 0.5, G1WalkTask.rew_upright),
            RewardTerm("base_height", -10.0, G1WalkTask.rew_base_height),
            RewardTerm("joint_torques_l2", -1.0e-5, Task.rew_joint_torques_l2),
            RewardTerm("action_rate_l2", -0.01, Task.rew_action_rate_l2),
            RewardTerm("feet_air_time", 0.5, G1WalkTask.rew_feet_air_time),
            RewardTerm("alive", 0.5, G1WalkTask.rew_alive),
        ]
        self.terminations = [
            TerminationTerm("fall_base_height", G1WalkTask.term_base_height),
            TerminationTerm("fall_orientation", G1WalkTask.term_orientation),
            TerminationTerm("time_out", Task.term_time_out, time_out=True),
        ]
        self.events = [EventTerm("reset_joints_around_default", "reset", G1WalkTask.reset_around_default)]
        self.events += shared_events(self)

    # ------------------------------------------------------------------ per-step state
    def advance(self) -> None:
        super().advance()
        feet_z = self.state.xpos[:, self._feet_idx, 2]
        contact = feet_z < FOOT_CONTACT_HEIGHT
        self.feet_air_time.add_(self.step_dt)
        first_contact = contact & ~self.feet_contact
        torch.mul(self.feet_air_time, first_contact, out=self._air_time_at_touchdown)
        self.feet_air_time.mul_(~contact)
        self.feet_contact.copy_(contact)

    def reset_task_buffers(self, mask: torch.Tensor) -> None:
        col = mask.unsqueeze(1)
        self.feet_air_time.masked_fill_(col, 0.0)
        self._air_time_at_touchdown.masked_fill_(col, 0.0)
        self.feet_contact.masked_fill_(col, False)

    # ------------------------------------------------------------------ commands, events
    def resample_command(self, mask: torch.Tensor) -> None:
        new = torch.addcmul(self._cmd_lo, self.rand(self.num_envs, 3), self._cmd_span)
        torch.where(mask.unsqueeze(1), new, self.velocity_command, out=self.velocity_command)

    def reset_around_default(self, mask: torch.Tensor) -> None:
        # Rows outside `mask` are ignored by the backend, so every row is written.
        n = self.num_envs
        qpos, qvel = self.reset_qpos, self.reset_qvel
        qpos.copy_(self.default_qpos.expand(n, -1))
        yaw = self.uniform(-math.pi, math.pi, n)
        qpos[:, self._base_quat] = Q.quat_from_axis_angle_z(yaw)
        joints = self.default_joint_pos + self.uniform(-RESET_JOINT_NOISE, RESET_JOINT_NOISE, n, self.num_actions)
        joints = torch.clamp(joints, self.joint_lower, self.joint_upper)
        qpos.index_copy_(1, self._qpos_idx, joints)
        qvel.zero_()
        qvel[:, self._base_lin.start : self._base_ang.stop] = self.uniform(-RESET_VEL_NOISE, RESET_VEL_NOISE, n, 6)

    # ------------------------------------------------------------------ observations
    def obs_velocity_command(self) -> torch.Tensor:
        return self.velocity_command

    # ------------------------------------------------------------------ rewards
    def rew_track_lin_vel_xy(self) -> torch.Tensor:
        err = torch.sum(torch.square(self.velocity_command[:, :2] - self.base_lin_vel_b[:, :2]), dim=1)
        return torch.exp(err * (-1.0 / TRACKING_STD**2))

    def rew_track_ang_vel_z(self) -> torch.Tensor:
        err = torch.square(self.velocity_command[:, 2] - self.base_ang_vel_b[:, 2])
        return torch.exp(err * (-1.0 / TRACKING_STD**2))

    def rew_upright(self) -> torch.Tensor:
        tilt = torch.sum(torch.square(self.projected_gravity[:, :2]), dim=1)
        return torch.exp(tilt * (-1.0 / UPRIGHT_STD**2))

    def rew_base_height(self) -> torch.Tensor:
        return torch.square(self.base_pos[:, 2] - g1.DEFAULT_BASE_HEIGHT)

    def rew_feet_air_time(self) -> torch.Tensor:
        moving = torch.linalg.vector_norm(self.velocity_command[:, :2], dim=1) > 0.1
        touchdown = self._air_time_at_touchdown > 0
        r = torch.sum((self._air_time_at_touchdown - AIR_TIME_TARGET) * touchdown, dim=1)
        return r * moving

    def rew_alive(self) -> torch.Tensor:
        return (~self.terminated).to(torch.float32)

    # ------------------------------------------------------------------ terminations
    def term_base_height(self) -> torch.Tensor:
        return self.base_pos[:, 2] < FALL_HEIGHT

    def term_orientation(self) -> torch.Tensor:
        return self.projected_gravity[:, 2] > -math.cos(FALL_TILT)
