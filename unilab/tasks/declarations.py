"""Static inventory of task terms, importable without torch, warp or mujoco.

The plan's collector-graph preflight reads these declarations to decide, before anything
runs, whether a task's update body may be captured as a CUDA graph. The runtime task builds
its terms from the same names; a test checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from unilab.spec.models import CartpoleSpec, G1MotionTrackingSpec, G1TaskSpec, G1WalkSpec, TaskSpecBase

TermKind = Literal["observation", "reward", "termination", "command", "event", "curriculum", "recorder"]


@dataclass(frozen=True)
class TermDecl:
    """One named term of a task and the properties that matter for graph capture."""

    name: str
    kind: TermKind
    # Adds noise to or corrupts a value (draws random numbers every step).
    noise: bool = False
    # An event that fires on a wall-clock or step interval rather than at reset.
    interval_event: bool = False
    # Draws random numbers through a host-side shortcut (python `random`, numpy) instead of a
    # device generator with a recorded draw version.
    rng_shortcut: bool = False
    # A curriculum that changes state outside a reset (not owned by the reset path).
    non_reset_curriculum: bool = False

    @property
    def graph_safe(self) -> bool:
        return not (
            self.noise
            or self.interval_event
            or self.rng_shortcut
            or self.non_reset_curriculum
            or self.kind == "recorder"
        )

    def graph_blockers(self) -> list[str]:
        """Reasons this term blocks an update-state graph, in a stable order."""
        out = []
        if self.noise:
            out.append("adds observation noise or corruption")
        if self.interval_event:
            out.append("is an interval event")
        if self.rng_shortcut:
            out.append("draws random numbers through a host-side shortcut")
        if self.non_reset_curriculum:
            out.append("is a curriculum not owned by the reset path")
        if self.kind == "recorder":
            out.append("is a recorder")
        return out


# --- Inventories ------------------------------------------------------------------------------
# The runtime tasks (unilab.tasks.g1_walk, unilab.tasks.g1_motion_tracking) build exactly these
# terms, in this order, for a given task spec; tests/test_tasks_inventory.py checks it.

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
# order the runtime tasks build their reward terms; `task.reward_weights` overrides them by name.
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


def _walk_observations(task: G1WalkSpec) -> tuple[str, ...]:
    if not has_gait_clock(task):
        return _WALK_OBSERVATIONS
    i = _WALK_OBSERVATIONS.index("velocity_command") + 1
    return (*_WALK_OBSERVATIONS[:i], "gait_phase", *_WALK_OBSERVATIONS[i:])


_WALK_TERMINATIONS = ("fall_base_height", "fall_orientation", "time_out")

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
_TRACK_REWARDS = tuple(_TRACK_REWARD_WEIGHTS)
_TRACK_TERMINATIONS = (
    "anchor_height_deviation",
    "anchor_orientation_deviation",
    "key_body_height_deviation",
    "motion_end",
    "time_out",
)

CARTPOLE_OBSERVATIONS = ("cart_pos", "pole_cos", "pole_sin", "cart_vel", "pole_ang_vel")
_CARTPOLE_REWARD_WEIGHTS = {"upright": 1.0, "centered": 0.2, "action_l2": -0.05}
CARTPOLE_REWARDS = tuple(_CARTPOLE_REWARD_WEIGHTS)
_DEFAULT_REWARD_WEIGHTS = {
    "g1_walk": _WALK_REWARD_WEIGHTS,
    "g1_motion_tracking": _TRACK_REWARD_WEIGHTS,
    "cartpole": _CARTPOLE_REWARD_WEIGHTS,
}


# g1_walk with a gait clock (`task.gait_period_s`): one more reward term, before `alive`.
GAIT_REWARD_WEIGHTS = {"feet_phase": 2.0}


def default_reward_weights(task_name: str, gait_clock: bool = False) -> dict[str, float]:
    """Every reward term of the task and its default weight (per second), in the task's order
    (``gait_clock``: g1_walk with `task.gait_period_s` set)."""
    if task_name not in _DEFAULT_REWARD_WEIGHTS:
        raise ValueError(f"unknown task {task_name!r}")  # unreachable: each task model's name is a Literal
    weights = dict(_DEFAULT_REWARD_WEIGHTS[task_name])
    if gait_clock and task_name == "g1_walk":
        alive = weights.pop("alive")
        weights |= GAIT_REWARD_WEIGHTS
        weights["alive"] = alive
    return weights


def has_gait_clock(task: TaskSpecBase) -> bool:
    return isinstance(task, G1WalkSpec) and task.gait_period_s is not None


def reward_weights(task: TaskSpecBase) -> dict[str, float]:
    """The weight of every reward term: the task's defaults with ``task.reward_weights`` applied.
    The plan rule `task.reward-weights` refuses a name the task does not have before this runs."""
    weights = default_reward_weights(task.name, has_gait_clock(task))
    overrides = task.reward_weights or {}
    unknown = sorted(set(overrides) - set(weights))
    if unknown:
        raise ValueError(f"{task.name} has no reward term {unknown[0]!r}")
    return {name: float(overrides.get(name, w)) for name, w in weights.items()}


CARTPOLE_TERMINATIONS = ("pole_fell", "off_rail", "time_out")


def _shared_tail(task: G1TaskSpec) -> tuple[list[TermDecl], list[TermDecl]]:
    """Observation noise and events that both G1 tasks honour the same way."""
    obs: list[TermDecl] = []
    if task.observation_noise:
        obs.append(TermDecl("observation_noise", "observation", noise=True))
    events: list[TermDecl] = []
    if task.domain_randomization:
        # Drawn at reset, on the device generator, for the worlds being reset: reset-owned.
        events.append(TermDecl("randomize_friction", "event"))
        events.append(TermDecl("randomize_base_mass", "event"))
    if task.push_interval_s is not None:
        events.append(TermDecl("push_robot", "event", interval_event=True))
    return obs, events


def reads_acceleration_sensors(task: TaskSpecBase) -> bool:
    """Whether some term reads an acceleration-stage sensor (accelerometer, touch, force, ...) of
    the state a step returns. Only then does the physics backend run the extra constraint solve
    that makes those readings current (``unilab.sim.mjmodel``; about 10% of a G1 env step). No
    built-in term reads ``sensordata``: base velocities come from ``qvel``/``cvel``. A term that
    reads the accelerometer must be declared here; tests/test_collector.py checks that every task's
    outputs are the same with and without the solve."""
    if not isinstance(task, CartpoleSpec | G1TaskSpec):
        raise ValueError(f"unknown task {task.name!r}")
    return False


def observation_names(task: TaskSpecBase) -> tuple[str, ...]:
    """The task's observation terms, in the order its observation concatenates them."""
    if isinstance(task, CartpoleSpec):
        return tuple(CARTPOLE_OBSERVATIONS)
    if isinstance(task, G1WalkSpec):
        return _walk_observations(task)
    if isinstance(task, G1MotionTrackingSpec):
        return _TRACK_OBSERVATIONS
    raise ValueError(f"unknown task {task.name!r}")


def declared_terms(task: TaskSpecBase) -> list[TermDecl]:
    """The exact term inventory (names, kinds, graph-safety flags, order) the runtime task builds."""
    if isinstance(task, CartpoleSpec):
        return [
            *(TermDecl(n, "observation") for n in CARTPOLE_OBSERVATIONS),
            *(TermDecl(n, "reward") for n in CARTPOLE_REWARDS),
            *(TermDecl(n, "termination") for n in CARTPOLE_TERMINATIONS),
            TermDecl("reset_near_upright", "event"),
        ]
    if not isinstance(task, G1TaskSpec):
        raise ValueError(f"unknown task {task.name!r}")
    noise, events = _shared_tail(task)
    if isinstance(task, G1WalkSpec):
        return [
            # Drawn again every `commands.resample_s` inside the update body: an interval draw.
            TermDecl("velocity_command", "command", interval_event=task.commands.resample_s > 0),
            *([TermDecl("gait_clock", "command")] if has_gait_clock(task) else []),
            *(TermDecl(n, "observation") for n in _walk_observations(task)),
            *noise,
            *(TermDecl(n, "reward") for n in default_reward_weights(task.name, has_gait_clock(task))),
            *(TermDecl(n, "termination") for n in _WALK_TERMINATIONS),
            TermDecl("reset_joints_around_default", "event"),
            *events,
        ]
    if isinstance(task, G1MotionTrackingSpec):
        return [
            TermDecl("motion_phase", "command"),
            *(TermDecl(n, "observation") for n in _TRACK_OBSERVATIONS),
            *noise,
            *(TermDecl(n, "reward") for n in _TRACK_REWARDS),
            *(TermDecl(n, "termination") for n in _TRACK_TERMINATIONS),
            TermDecl("reset_to_reference", "event"),
            *events,
        ]
    raise ValueError(f"unknown task {task.name!r}")
