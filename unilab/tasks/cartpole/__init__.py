"""`cartpole`: a small check task (not a G1) that learns in about a minute. The record and the
term inventory the planner reads, torch-free; the runtime task and its model are `task.py`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from unilab.tasks.cartpole.spec import CartpoleSpec
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


# Plans made while one `[task]` model served every task wrote these two G1 keys, always false;
# accepted so that those runs still evaluate, export, resume and seed `run.init_from`. A new plan
# leaves them out (null), so its plan_id does not see them.
_OLDER_PLANS_KEYS = {
    "observation_noise": (Literal[False] | None, Field(None, description="Absent (false in older plans).")),
    "domain_randomization": (Literal[False] | None, Field(None, description="Absent (false in older plans).")),
}

CARTPOLE = TaskDef(
    name="cartpole",
    title="cart-pole",
    spec=CartpoleSpec,
    runtime="unilab.tasks.cartpole.task:build",
    reward_weights=reward_weights,
    observations=observations,
    terms=terms,
    robot=False,
    plan_fields=_OLDER_PLANS_KEYS,
    own_model="unilab.tasks.cartpole.task:cartpole_xml",
)
