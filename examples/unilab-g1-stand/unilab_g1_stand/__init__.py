"""`g1_stand`: the G1 keeps its balance at a target height. The record and the term inventory
the planner reads, torch-free; the runtime task is `task.py`, imported only by a run."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from unilab.robot.g1 import LEG_JOINTS
from unilab.sections import G1TaskSpec
from unilab.tasks.declarations import TermDecl, g1_shared_tail
from unilab.tasks.taskdef import TaskDef


class G1StandSpec(G1TaskSpec):
    """`[task]` with `name = "g1_stand"`: stand and keep the balance from a perturbed pose."""

    name: Literal["g1_stand"] = Field(description="The task.")  # type: ignore[assignment]
    actions: Literal["all", "legs"] = Field("legs", description="The joints the policy drives: all 29, or the 12 legs.")
    target_height: Annotated[float, Field(ge=0.5, le=0.85)] = Field(
        0.76, description="The pelvis height the robot is paid to stand at, m."
    )


OBSERVATIONS = ("base_ang_vel", "projected_gravity", "joint_pos_rel", "joint_vel_rel", "last_action")
# Per second; the task multiplies by the env step's duration. `task.reward_weights` overrides them.
REWARD_WEIGHTS = {"upright": 1.0, "height": 1.0, "still": 0.5, "action_rate_l2": -0.01, "alive": 0.5}
TERMINATIONS = ("fell", "time_out")


def reward_weights(task: G1StandSpec) -> dict[str, float]:
    return dict(REWARD_WEIGHTS)


def observations(task: G1StandSpec) -> tuple[str, ...]:
    return OBSERVATIONS


def terms(task: G1StandSpec) -> list[TermDecl]:
    noise, events = g1_shared_tail(task)  # observation noise, domain randomization, pushes
    return [
        *(TermDecl(n, "observation") for n in OBSERVATIONS),
        *noise,
        *(TermDecl(n, "reward") for n in REWARD_WEIGHTS),
        *(TermDecl(n, "termination") for n in TERMINATIONS),
        TermDecl("perturbed_pose", "event"),
        *events,
    ]


def action_joints(task: G1StandSpec) -> tuple[str, ...] | None:
    return LEG_JOINTS if task.actions == "legs" else None


G1_STAND = TaskDef(
    name="g1_stand",
    title="G1 standing balance",
    spec=G1StandSpec,
    runtime="unilab_g1_stand.task:build",
    reward_weights=reward_weights,
    observations=observations,
    terms=terms,
    action_joints=action_joints,
)
