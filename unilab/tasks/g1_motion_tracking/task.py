"""`g1_motion_tracking`: follow a reference motion clip (BeyondMimic / mjlab tracking terms).

Episodes start at a random phase of the clip with the robot placed in the reference state
(reference state initialization). The anchor body is the torso; key-body errors are measured
after aligning the reference's anchor to the robot's (yaw and horizontal position), as in
BeyondMimic. Episodes end on large deviation, at the end of the clip or on the time limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from unilab.errors import MotionFileError, UnilabError
from unilab.tasks import quat as Q
from unilab.tasks.base import Task, composed_layout
from unilab.tasks.events import shared_events
from unilab.tasks.g1_motion_tracking import G1_MOTION_TRACKING
from unilab.tasks.g1_motion_tracking.spec import G1MotionTrackingSpec
from unilab.tasks.motion_file import load_motion, resolve_motion
from unilab.tasks.terms import CommandTerm, EventTerm, ObservationTerm, TerminationTerm

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sim.contract import PhysicsBackend
    from unilab.tasks.motion_file import Motion

JOINT_STD = 0.5  # rad, on the mean squared joint error
POS_STD = 0.3  # m
ORI_STD = 0.4  # rad
ANCHOR_HEIGHT_LIMIT = 0.25  # m
ANCHOR_GRAVITY_LIMIT = 0.8  # difference of the projected gravity's z component
END_EFFECTOR_HEIGHT_LIMIT = 0.25  # m
END_EFFECTORS = ("left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")
RESET_JOINT_NOISE = 0.05  # rad around the reference pose


def build(
    spec: G1MotionTrackingSpec,
    backend: PhysicsBackend,
    layout: RobotLayout | None,
    *,
    step_dt: float,
    seed: int,
    spec_dir: Path,
) -> G1MotionTrackingTask:
    layout = composed_layout(layout, spec.name)
    path = resolve_motion(spec.motion, spec_dir)
    motion = load_motion(path, num_joints=len(layout.qpos_adr), num_bodies=backend.dims.nbody - 1)
    return G1MotionTrackingTask(spec, backend, layout, step_dt=step_dt, motion=motion, seed=seed)


class G1MotionTrackingTask(Task[G1MotionTrackingSpec]):
    name = "g1_motion_tracking"
    definition = G1_MOTION_TRACKING

    def __init__(
        self,
        spec: G1MotionTrackingSpec,
        backend: PhysicsBackend,
        layout: RobotLayout,
        *,
        step_dt: float,
        motion: Motion,
        seed: int = 0,
    ) -> None:
        if motion.info.num_bodies != backend.dims.nbody - 1:
            raise MotionFileError(
                f"the motion has {motion.info.num_bodies} bodies, the robot model has {backend.dims.nbody - 1}",
                fix="export the motion with the same robot model (see docs/tasks.md)",
            )
        self.motion = motion
        self._held_start: int | None = None  # `hold_clip_start`
        super().__init__(spec, backend, layout, step_dt=step_dt, seed=seed)

    def build_terms(self) -> None:
        self._put_clip()
        self._build_reference_buffers()

        track = G1MotionTrackingTask
        self.commands = self.bind("command", [CommandTerm("motion_phase", track.resample_phase, track.advance_phase)])
        self.observations = self.bind(
            "observation",
            [
                ObservationTerm("motion_command", 2 * self.num_joints, track.obs_motion_command),
                ObservationTerm("motion_anchor_pos_b", 3, track.obs_anchor_pos_b, noise=0.25),
                ObservationTerm("motion_anchor_ori_b", 6, track.obs_anchor_ori_b, noise=0.05),
                ObservationTerm("base_lin_vel", 3, Task.obs_base_lin_vel, noise=0.5),
                ObservationTerm("base_ang_vel", 3, Task.obs_base_ang_vel, noise=0.2),
                *self.shared_observations(joint_vel_noise=0.5),
            ],
        )
        self.rewards = self.weighted_rewards(
            {
                "motion_joint_pos": G1MotionTrackingTask.rew_joint_pos,
                "motion_anchor_pos": G1MotionTrackingTask.rew_anchor_pos,
                "motion_anchor_ori": G1MotionTrackingTask.rew_anchor_ori,
                "motion_body_pos": G1MotionTrackingTask.rew_body_pos,
                "motion_body_ori": G1MotionTrackingTask.rew_body_ori,
                "action_rate_l2": Task.rew_action_rate_l2,
                "joint_torques_l2": Task.rew_joint_torques_l2,
            }
        )
        self.terminations = self.bind(
            "termination",
            [
                TerminationTerm("anchor_height_deviation", track.term_anchor_height),
                TerminationTerm("anchor_orientation_deviation", track.term_anchor_orientation),
                TerminationTerm("key_body_height_deviation", track.term_end_effector_height),
                TerminationTerm("motion_end", track.term_motion_end, time_out=True),
                TerminationTerm("time_out", Task.term_time_out, time_out=True),
            ],
        )
        self.events = [EventTerm("reset_to_reference", "reset", G1MotionTrackingTask.reset_to_reference)]
        self.events += shared_events(self)
        self._gather_reference()

    def _put_clip(self) -> None:
        """The clip on the task's device, with the key bodies and anchor it is compared on gathered once."""
        dev, m = self.device, self.motion
        self.m_joint_pos = torch.as_tensor(m.joint_pos, device=dev)
        self.m_joint_vel = torch.as_tensor(m.joint_vel, device=dev)
        self.m_body_pos = torch.as_tensor(m.body_pos_w, device=dev)
        self.m_body_quat = torch.as_tensor(m.body_quat_w, device=dev)
        self.m_body_lin_vel = torch.as_tensor(m.body_lin_vel_w, device=dev)
        self.m_body_ang_vel = torch.as_tensor(m.body_ang_vel_w, device=dev)
        self.num_frames = m.num_frames
        self.fps = float(m.fps)

        names = {b: i for i, b in enumerate(self.layout.key_body_names)}
        key = [int(i) for i in self.layout.key_body_ids]
        self._key_idx = torch.tensor(key, device=dev, dtype=torch.long)  # model body ids
        self._key_ref_idx = self._key_idx - 1  # motion arrays exclude the world body
        self._anchor = int(self.layout.anchor_body_id)
        self._base = int(self.layout.base_body_id)
        self._ee_in_key = torch.tensor([names[b] for b in END_EFFECTORS], device=dev, dtype=torch.long)
        # The clip's key bodies and anchor, gathered once: [T, K, ...] and [T, ...].
        self.m_key_pos = self.m_body_pos[:, self._key_ref_idx].contiguous()
        self.m_key_quat = self.m_body_quat[:, self._key_ref_idx].contiguous()
        self.m_anchor_pos = self.m_body_pos[:, self._anchor - 1].contiguous()
        self.m_anchor_quat = self.m_body_quat[:, self._anchor - 1].contiguous()
        # Per frame, what the alignment to the robot needs (see read_task_state).
        self.m_anchor_heading = Q.heading(self.m_anchor_quat)
        self.m_key_rel = (self.m_key_pos - self.m_anchor_pos.unsqueeze(1)).contiguous()
        self.m_key_quat_perm = Q.rotate_z_quat_perm(self.m_key_quat).contiguous()

    def _build_reference_buffers(self) -> None:
        """Per world: the clip frame, the reference there, and the robot side it is compared with."""
        n, dev = self.num_envs, self.device
        # Reference at each world's current frame.
        k = len(self._key_idx)
        self.motion_frame = torch.zeros(n, device=dev, dtype=torch.long)
        ratio = self.fps * self.step_dt
        self._frames_per_step: int | None = round(ratio) if abs(ratio - round(ratio)) < 1e-6 else None
        self._phase_time = torch.zeros(n, device=dev)  # clip time, s (used when frames_per_step is None)
        self._frame_f = torch.zeros(n, device=dev)
        self.ref_joint_pos = torch.zeros(n, self.num_joints, device=dev)
        self.ref_joint_vel = torch.zeros(n, self.num_joints, device=dev)
        self.ref_anchor_pos = torch.zeros(n, 3, device=dev)
        self.ref_anchor_quat = torch.zeros(n, 4, device=dev)
        self.ref_key_pos = torch.zeros(n, k, 3, device=dev)
        self.ref_key_quat = torch.zeros(n, k, 4, device=dev)
        self.ref_anchor_heading = torch.zeros(n, device=dev)
        self.ref_key_rel = torch.zeros(n, k, 3, device=dev)
        self.ref_key_quat_perm = torch.zeros(n, k, 4, device=dev)
        # Robot side and the aligned reference, refreshed by read_task_state.
        self.anchor_pos = torch.zeros(n, 3, device=dev)
        self.anchor_quat = torch.zeros(n, 4, device=dev)
        self.key_pos = torch.zeros(n, k, 3, device=dev)
        self.key_quat = torch.zeros(n, k, 4, device=dev)
        self.ref_key_pos_aligned = torch.zeros(n, k, 3, device=dev)
        self.ref_key_quat_aligned = torch.zeros(n, k, 4, device=dev)

    # ------------------------------------------------------------------ reference
    def _gather_reference(self) -> None:
        f = self.motion_frame
        self.ref_joint_pos.copy_(self.m_joint_pos[f])
        self.ref_joint_vel.copy_(self.m_joint_vel[f])
        self.ref_anchor_pos.copy_(self.m_anchor_pos[f])
        self.ref_anchor_quat.copy_(self.m_anchor_quat[f])
        self.ref_key_pos.copy_(self.m_key_pos[f])
        self.ref_key_quat.copy_(self.m_key_quat[f])
        self.ref_anchor_heading.copy_(self.m_anchor_heading[f])
        self.ref_key_rel.copy_(self.m_key_rel[f])
        self.ref_key_quat_perm.copy_(self.m_key_quat_perm[f])

    def reference_qpos(self, worlds: int) -> torch.Tensor:
        """The clip's pose at each world's current frame (see Task.reference_qpos)."""
        f = self.motion_frame[:worlds]
        qpos = self.default_qpos.expand(len(f), -1).clone()
        self._clip_base_pose(qpos, f)
        qpos[:, self._qpos_idx] = self.m_joint_pos[f]
        return qpos

    def _clip_base_pose(self, qpos: torch.Tensor, f: torch.Tensor) -> None:
        """The floating base of ``qpos`` [len(f), nq] set to the clip's base body at frames ``f``."""
        b = self._base - 1
        qpos[:, self._base_pos] = self.m_body_pos[f, b]
        qpos[:, self._base_quat] = self.m_body_quat[f, b]

    def motion_clip(self) -> tuple[int, float]:
        return self.num_frames, self.fps

    def clip_frame(self, world: int) -> int:
        return int(self.motion_frame[world])

    def hold_clip_start(self, frame: int | None) -> None:
        if frame is not None and not 0 <= frame < self.num_frames - 1:
            raise UnilabError(f"clip frame {frame} is out of range: the clip has {self.num_frames} frames")
        self._held_start = frame

    def resample_phase(self, mask: torch.Tensor) -> None:
        # Any frame that leaves at least one step before the clip ends (or a viewer's choice).
        new = (self.rand(self.num_envs) * (self.num_frames - 1)).long()
        if self._held_start is not None:
            new.fill_(self._held_start)
        torch.where(mask, new, self.motion_frame, out=self.motion_frame)
        torch.where(mask, new.to(torch.float32) / self.fps, self._phase_time, out=self._phase_time)
        self._gather_reference()

    def advance_phase(self) -> None:
        if self._frames_per_step is not None:
            self.motion_frame.add_(self._frames_per_step).clamp_(max=self.num_frames - 1)
        else:
            # Clip and control rates differ: nearest frame of the episode's clip time.
            self._phase_time.add_(self.step_dt)
            torch.round(self._phase_time * self.fps, out=self._frame_f)
            self.motion_frame.copy_(self._frame_f.long().clamp_(max=self.num_frames - 1))
        self._gather_reference()

    def reset_to_reference(self, mask: torch.Tensor) -> None:
        n, f, b = self.num_envs, self.motion_frame, self._base - 1
        qpos, qvel = self.reset_qpos, self.reset_qvel
        qpos.copy_(self.default_qpos.expand(n, -1))
        self._clip_base_pose(qpos, f)
        quat = self.m_body_quat[f, b]
        joints = self.m_joint_pos[f] + self.uniform(-RESET_JOINT_NOISE, RESET_JOINT_NOISE, n, self.num_joints)
        qpos.index_copy_(1, self._qpos_idx, torch.clamp(joints, self.joint_lower, self.joint_upper))
        qvel.zero_()
        qvel[:, self._base_lin] = self.m_body_lin_vel[f, b]
        qvel[:, self._base_ang] = Q.quat_apply_inverse(quat, self.m_body_ang_vel[f, b])
        qvel.index_copy_(1, self._qvel_idx, self.m_joint_vel[f])

    # ------------------------------------------------------------------ derived state
    def read_task_state(self) -> None:
        xpos, xquat = self.state.xpos, self.state.xquat
        self.anchor_pos.copy_(xpos[:, self._anchor])
        self.anchor_quat.copy_(xquat[:, self._anchor])
        torch.index_select(xpos, 1, self._key_idx, out=self.key_pos)
        torch.index_select(xquat, 1, self._key_idx, out=self.key_quat)
        # Align the reference to the robot: rotate it about z by the anchors' heading difference
        # and put the reference anchor over the robot's anchor (keeping the reference height).
        half = (Q.heading(self.anchor_quat) - self.ref_anchor_heading).mul_(0.5).unsqueeze(1)
        ch, sh = torch.cos(half), torch.sin(half)
        c, s = ch * ch - sh * sh, 2.0 * ch * sh  # cos and sin of the full angle
        rel, out = self.ref_key_rel, self.ref_key_pos_aligned
        x, y = rel[..., 0], rel[..., 1]
        out[..., 0] = self.anchor_pos[:, 0:1] + c * x - s * y
        out[..., 1] = self.anchor_pos[:, 1:2] + s * x + c * y
        torch.add(rel[..., 2], self.ref_anchor_pos[:, 2:3], out=out[..., 2])
        torch.addcmul(
            self.ref_key_quat * ch.unsqueeze(2), self.ref_key_quat_perm, sh.unsqueeze(2), out=self.ref_key_quat_aligned
        )

    # ------------------------------------------------------------------ observations
    def obs_motion_command(self) -> torch.Tensor:
        return torch.cat((self.ref_joint_pos, self.ref_joint_vel), dim=1)

    def obs_anchor_pos_b(self) -> torch.Tensor:
        return Q.quat_apply_inverse(self.anchor_quat, self.ref_anchor_pos - self.anchor_pos)

    def obs_anchor_ori_b(self) -> torch.Tensor:
        return Q.quat_to_rot6d(Q.quat_mul(Q.quat_conj(self.anchor_quat), self.ref_anchor_quat))

    # ------------------------------------------------------------------ rewards
    def rew_joint_pos(self) -> torch.Tensor:
        err = torch.mean(torch.square(self.joint_pos - self.ref_joint_pos), dim=1)
        return torch.exp(err * (-1.0 / JOINT_STD**2))

    def rew_anchor_pos(self) -> torch.Tensor:
        err = torch.sum(torch.square(self.ref_anchor_pos - self.anchor_pos), dim=1)
        return torch.exp(err * (-1.0 / POS_STD**2))

    def rew_anchor_ori(self) -> torch.Tensor:
        err = torch.square(Q.quat_error_angle(self.anchor_quat, self.ref_anchor_quat))
        return torch.exp(err * (-1.0 / ORI_STD**2))

    def rew_body_pos(self) -> torch.Tensor:
        err = torch.sum(torch.square(self.ref_key_pos_aligned - self.key_pos), dim=2).mean(dim=1)
        return torch.exp(err * (-1.0 / POS_STD**2))

    def rew_body_ori(self) -> torch.Tensor:
        err = torch.square(Q.quat_error_angle(self.key_quat, self.ref_key_quat_aligned)).mean(dim=1)
        return torch.exp(err * (-1.0 / ORI_STD**2))

    # ------------------------------------------------------------------ terminations
    def term_anchor_height(self) -> torch.Tensor:
        return torch.abs(self.ref_anchor_pos[:, 2] - self.anchor_pos[:, 2]) > ANCHOR_HEIGHT_LIMIT

    def term_anchor_orientation(self) -> torch.Tensor:
        return torch.abs(Q.gravity_z(self.ref_anchor_quat) - Q.gravity_z(self.anchor_quat)) > ANCHOR_GRAVITY_LIMIT

    def term_end_effector_height(self) -> torch.Tensor:
        dz = self.ref_key_pos_aligned[:, self._ee_in_key, 2] - self.key_pos[:, self._ee_in_key, 2]
        return torch.any(torch.abs(dz) > END_EFFECTOR_HEIGHT_LIMIT, dim=1)

    def term_motion_end(self) -> torch.Tensor:
        return self.motion_frame >= self.num_frames - 1
