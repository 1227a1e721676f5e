"""g1_motion_tracking's `[task]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from unilab.sections import G1TaskSpec, home_resolves


class G1MotionTrackingSpec(G1TaskSpec):
    """`[task]` with `name = "g1_motion_tracking"`: The G1 follows a reference motion clip (docs/tasks.md)."""

    name: Literal["g1_motion_tracking"] = Field(description="The task.")
    motion: str = Field(
        description="The reference motion: `builtin:NAME` (e.g. `builtin:g1_squat`) or a .npz path (relative "
        "paths resolve against the spec file's directory; format: docs/tasks.md)."
    )

    @field_validator("motion")
    @classmethod
    def _motion_home(cls, v: str, info: ValidationInfo) -> str:
        return home_resolves(v, info)
