"""cartpole's `[task]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from unilab.sections import TaskSpecBase


class CartpoleSpec(TaskSpecBase):
    """`[task]` with `name = "cartpole"`: A small check task (not a G1) that learns in about a minute."""

    name: Literal["cartpole"] = Field(description="The task.")
