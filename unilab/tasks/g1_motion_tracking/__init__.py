"""`g1_motion_tracking`: the G1 follows a reference motion clip (docs/tasks.md). The record and
the term inventory the planner reads, torch-free; the runtime task is `task.py`."""

from __future__ import annotations

from unilab.tasks.declarations import TermDecl, g1_shared_tail
from unilab.tasks.g1_motion_tracking.spec import G1MotionTrackingSpec
from unilab.tasks.taskdef import TaskDef

# The runtime task (task.py) builds exactly these terms, in this order; tests/test_tasks_inventory.py
# checks it.
_TRACK_OBSERVATIONS = (
    "motion_command",
    "motion_anchor_pos_b",
    "motion_anchor_ori_b",
    "base_lin_vel",
    "base_ang_vel",
    "joint_pos_rel",
    "joint_vel_rel",
    "last_action",
)
_TRACK_REWARD_WEIGHTS = {
    "motion_joint_pos": 0.5,
    "motion_anchor_pos": 0.5,
    "motion_anchor_ori": 0.5,
    "motion_body_pos": 1.0,
    "motion_body_ori": 1.0,
    "action_rate_l2": -0.1,
    "joint_torques_l2": -1.0e-5,
}
_TRACK_TERMINATIONS = (
    "anchor_height_deviation",
    "anchor_orientation_deviation",
    "key_body_height_deviation",
    "motion_end",
    "time_out",
)


def reward_weights(task: G1MotionTrackingSpec) -> dict[str, float]:
    return dict(_TRACK_REWARD_WEIGHTS)


def observations(task: G1MotionTrackingSpec) -> tuple[str, ...]:
    return _TRACK_OBSERVATIONS


def terms(task: G1MotionTrackingSpec) -> list[TermDecl]:
    noise, events = g1_shared_tail(task)
    return [
        TermDecl("motion_phase", "command"),
        *(TermDecl(n, "observation") for n in _TRACK_OBSERVATIONS),
        *noise,
        *(TermDecl(n, "reward") for n in _TRACK_REWARD_WEIGHTS),
        *(TermDecl(n, "termination") for n in _TRACK_TERMINATIONS),
        TermDecl("reset_to_reference", "event"),
        *events,
    ]


def motion(task: G1MotionTrackingSpec) -> str:
    return task.motion


G1_MOTION_TRACKING = TaskDef(
    name="g1_motion_tracking",
    title="G1 motion tracking",
    spec=G1MotionTrackingSpec,
    runtime="unilab.tasks.g1_motion_tracking.task:build",
    reward_weights=reward_weights,
    observations=observations,
    terms=terms,
    motion=motion,
)
