"""`g1_walk`: the G1 follows a commanded base velocity (docs/tasks.md). The record and the term
inventory the planner reads, torch-free; the runtime task is `task.py`."""

from __future__ import annotations

from unilab.robot.g1 import JOINT_NAMES, LEG_AND_WAIST_YAW_JOINTS, LEG_JOINTS, mirror_joint
from unilab.tasks.declarations import TermDecl, g1_shared_tail
from unilab.tasks.g1_walk.spec import G1WalkSpec
from unilab.tasks.mirror import TermMirror, joints_mirror
from unilab.tasks.taskdef import TaskDef

# The runtime task (task.py) builds exactly these terms, in this order, for a given task spec;
# tests/test_tasks_inventory.py checks it.
_WALK_OBSERVATIONS = (
    "base_lin_vel",
    "base_ang_vel",
    "projected_gravity",
    "velocity_command",
    "joint_pos_rel",
    "joint_vel_rel",
    "last_action",
)
# Default reward weights, per second (the task multiplies by the env step's duration), in the
# order the runtime task builds its reward terms; `task.reward_weights` overrides them by name.
# Tracking outweighs survival (alive + upright), as in mjlab's and holosoma's velocity tasks: with
# alive 0.5 and tracking 1.0 / 0.5 a robot standing still under the shipped commands earned 74 % of
# the best return, so standing was the optimum (docs/performance.md, "A G1 that steps").
_WALK_REWARD_WEIGHTS = {
    "track_lin_vel_xy_exp": 2.0,
    "track_ang_vel_z_exp": 1.0,
    "upright": 0.5,
    "base_height": -10.0,
    "joint_torques_l2": -1.0e-5,
    "action_rate_l2": -0.01,
    "feet_air_time": 1.0,
    "hip_deviation": -1.0,
    "alive": 0.25,
}
# With a gait clock (`task.gait_period_s`): one more reward term, before `alive`.
GAIT_REWARD_WEIGHTS = {"feet_phase": 2.0}
_WALK_TERMINATIONS = ("fall_base_height", "fall_orientation", "time_out")


def has_gait_clock(task: G1WalkSpec) -> bool:
    return task.gait_period_s is not None


def reward_weights(task: G1WalkSpec) -> dict[str, float]:
    weights = dict(_WALK_REWARD_WEIGHTS)
    if has_gait_clock(task):
        alive = weights.pop("alive")
        weights |= GAIT_REWARD_WEIGHTS
        weights["alive"] = alive
    return weights


def observations(task: G1WalkSpec) -> tuple[str, ...]:
    if not has_gait_clock(task):
        return _WALK_OBSERVATIONS
    i = _WALK_OBSERVATIONS.index("velocity_command") + 1
    return (*_WALK_OBSERVATIONS[:i], "gait_phase", *_WALK_OBSERVATIONS[i:])


def terms(task: G1WalkSpec) -> list[TermDecl]:
    noise, events = g1_shared_tail(task)
    return [
        # Drawn again every `commands.resample_s` inside the update body: an interval draw.
        TermDecl("velocity_command", "command", interval_event=task.commands.resample_s > 0),
        *([TermDecl("gait_clock", "command")] if has_gait_clock(task) else []),
        *(TermDecl(n, "observation") for n in observations(task)),
        *noise,
        *(TermDecl(n, "reward") for n in reward_weights(task)),
        *(TermDecl(n, "termination") for n in _WALK_TERMINATIONS),
        TermDecl("reset_joints_around_default", "event"),
        *events,
    ]


# The joints each `task.actions` choice drives; None: all 29.
_ACTION_JOINTS: dict[str, tuple[str, ...] | None] = {
    "all": None,
    "legs": LEG_JOINTS,
    "legs_waist_yaw": LEG_AND_WAIST_YAW_JOINTS,
}


def action_joints(task: G1WalkSpec) -> tuple[str, ...] | None:
    return _ACTION_JOINTS[task.actions]


def mirror_terms(task: G1WalkSpec) -> tuple[dict[str, TermMirror], TermMirror]:
    """The walk reflected through the robot's sagittal plane (y -> -y in the base frame): a
    velocity's y flips, an angular velocity's x and z (a pseudovector), the command's lateral speed
    and yaw rate, the joints swap sides (`unilab.robot.g1.mirror_joint`), and the gait clock moves
    half a stride, since the right foot runs half a stride behind the left."""
    joints = joints_mirror(JOINT_NAMES, mirror_joint)
    actions = joints_mirror(action_joints(task) or JOINT_NAMES, mirror_joint)
    terms = {
        "base_lin_vel": TermMirror.signs(1, -1, 1),
        "base_ang_vel": TermMirror.signs(-1, 1, -1),
        "projected_gravity": TermMirror.signs(1, -1, 1),
        "velocity_command": TermMirror.signs(1, -1, -1),
        "gait_phase": TermMirror.signs(-1, -1),  # (sin, cos) of the phase plus half a turn
        "joint_pos_rel": joints,
        "joint_vel_rel": joints,
        "last_action": actions,
    }
    return terms, actions


G1_WALK = TaskDef(
    name="g1_walk",
    title="G1 velocity tracking",
    spec=G1WalkSpec,
    runtime="unilab.tasks.g1_walk.task:build",
    reward_weights=reward_weights,
    observations=observations,
    terms=terms,
    action_joints=action_joints,
    deployment="unilab.tasks.g1_walk.task:deployment_metadata",
    mirror_terms=mirror_terms,
)
