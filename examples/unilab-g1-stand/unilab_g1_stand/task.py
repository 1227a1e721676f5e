"""`g1_stand`'s runtime: its terms as short methods over the task's torch tensors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from unilab.tasks.base import Task, composed_layout
from unilab.tasks.events import shared_events
from unilab.tasks.terms import EventTerm, ObservationTerm, TerminationTerm
from unilab_g1_stand import G1_STAND, G1StandSpec

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sim.contract import PhysicsBackend

FALL_HEIGHT = 0.4  # m: the pelvis below this has fallen
FALL_TILT = 0.8  # rad between the pelvis z axis and the world z axis
POSE_NOISE = 0.15  # rad on every joint at reset
TILT_STD = 0.25  # of the upright kernel, on the horizontal part of the projected gravity
HEIGHT_STD = 0.05  # m, of the height kernel
STILL_STD = 0.5  # rad/s, of the still kernel, on the base angular velocity


def build(
    spec: G1StandSpec,
    backend: PhysicsBackend,
    layout: RobotLayout | None,
    *,
    step_dt: float,
    seed: int,
    spec_dir: Path,
) -> G1StandTask:
    return G1StandTask(spec, backend, composed_layout(layout, spec.name), step_dt=step_dt, seed=seed)


class G1StandTask(Task[G1StandSpec]):
    name = "g1_stand"
    definition = G1_STAND

    def build_terms(self) -> None:
        self.observations = self.bind(
            "observation",
            [
                ObservationTerm("base_ang_vel", 3, Task.obs_base_ang_vel, noise=0.2),
                ObservationTerm("projected_gravity", 3, Task.obs_projected_gravity, noise=0.05),
                *self.shared_observations(joint_vel_noise=1.5),
            ],
        )
        self.rewards = self.weighted_rewards(
            {
                "upright": G1StandTask.rew_upright,
                "height": G1StandTask.rew_height,
                "still": G1StandTask.rew_still,
                "action_rate_l2": Task.rew_action_rate_l2,
                "alive": G1StandTask.rew_alive,
            }
        )
        self.terminations = self.bind(
            "termination",
            [
                TerminationTerm("fell", G1StandTask.term_fell),
                TerminationTerm("time_out", Task.term_time_out, time_out=True),
            ],
        )
        self.events = [EventTerm("perturbed_pose", "reset", G1StandTask.reset_perturbed), *shared_events(self)]

    # ------------------------------------------------------------------ rewards
    def rew_upright(self) -> torch.Tensor:
        tilt = self.projected_gravity[:, :2].square().sum(dim=1)
        return torch.exp(-tilt / TILT_STD**2)

    def rew_height(self) -> torch.Tensor:
        return torch.exp(-(self.base_height - self.spec.target_height).square() / HEIGHT_STD**2)

    def rew_still(self) -> torch.Tensor:
        return torch.exp(-self.base_ang_vel_b.square().sum(dim=1) / STILL_STD**2)

    def rew_alive(self) -> torch.Tensor:
        return (~self.terminated).float()

    # ------------------------------------------------------------------ terminations
    def term_fell(self) -> torch.Tensor:
        return (self.base_height < FALL_HEIGHT) | (self.projected_gravity_z > -math.cos(FALL_TILT))

    # ------------------------------------------------------------------ events
    def reset_perturbed(self, mask: torch.Tensor) -> None:
        # Every row is written; the backend resets only the rows in `mask`.
        self.reset_qpos.copy_(self.default_qpos.expand_as(self.reset_qpos))
        noise = torch.empty(self.num_envs, self.num_joints, device=self.device)
        noise.uniform_(-POSE_NOISE, POSE_NOISE, generator=self.generator)
        joints = (self.default_joint_pos + noise).clamp(self.joint_lower, self.joint_upper)
        self.reset_qpos[:, self.joint_qpos_index] = joints
        self.reset_qvel.zero_()
