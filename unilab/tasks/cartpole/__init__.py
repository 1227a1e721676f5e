"""`cartpole`: a small check task (not a G1) that learns in about a minute. The record and the
term inventory the planner reads, torch-free; the runtime task and its model are `task.py`."""

from __future__ import annotations

from unilab.spec.models import CartpoleSpec
from unilab.tasks.declarations import TermDecl
from unilab.tasks.taskdef import TaskDef

CARTPOLE_OBSERVATIONS = ("cart_pos", "pole_cos", "pole_sin", "cart_vel", "pole_ang_vel")
_CARTPOLE_REWARD_WEIGHTS = {"upright": 1.0, "centered": 0.2, "action_l2": -0.05}
CARTPOLE_TERMINATIONS = ("pole_fell", "off_rail", "time_out")


def reward_weights(task: CartpoleSpec) -> dict[str, float]:
    return dict(_CARTPOLE_REWARD_WEIGHTS)


def observations(task: CartpoleSpec) -> tuple[str, ...]:
    return CARTPOLE_OBSERVATIONS


def terms(task: CartpoleSpec) -> list[TermDecl]:
    return [
        *(TermDecl(n, "observation") for n in CARTPOLE_OBSERVATIONS),
        *(TermDecl(n, "reward") for n in _CARTPOLE_REWARD_WEIGHTS),
        *(TermDecl(n, "termination") for n in CARTPOLE_TERMINATIONS),
        TermDecl("reset_near_upright", "event"),
    ]


CARTPOLE = TaskDef(
    name="cartpole",
    title="cart-pole",
    spec=CartpoleSpec,
    runtime="unilab.tasks.cartpole.task:build",
    reward_weights=reward_weights,
    observations=observations,
    terms=terms,
    robot=False,
    own_model="unilab.tasks.cartpole.task:cartpole_xml",
)
