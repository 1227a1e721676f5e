"""g1_walk's `[task]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from unilab.sections import G1TaskSpec, LinVelRange, Section, YawRateRange


class CommandRanges(Section):
    """`[task.commands]`: how the velocity command is drawn (g1_walk): uniform ranges, a share of
    standing commands, and how often it changes within an episode."""

    lin_vel_x: LinVelRange = Field((-0.5, 1.0), description="Forward velocity range, m/s.")
    lin_vel_y: LinVelRange = Field((-0.3, 0.3), description="Lateral velocity range, m/s.")
    ang_vel_z: YawRateRange = Field((-0.5, 0.5), description="Yaw rate range, rad/s.")
    standing_share: Annotated[float, Field(ge=0, le=1)] = Field(
        0.1,
        description="Share of the draws that command standing still (all three velocities 0), as mjlab and MuJoCo "
        "Playground do; 0: none.",
    )
    resample_s: Annotated[float, Field(ge=0, le=3600)] = Field(
        10.0,
        description="A new command is drawn every this many seconds within an episode (rounded to whole env "
        "steps), as well as at reset, so that one policy learns to start, stop and turn (mjlab: 3-8 s, MuJoCo "
        "Playground: 10 s); 0: one command per episode.",
    )

    @field_validator("lin_vel_x", "lin_vel_y", "ang_vel_z")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if v[0] > v[1]:
            raise ValueError(f"range lower bound {v[0]} exceeds upper bound {v[1]}")
        return v


class TrackingStd(Section):
    """`[task.tracking_std]`: the widths of g1_walk's tracking kernels, exp(-err^2 / std^2)."""

    lin_vel_xy: Annotated[float, Field(gt=0, le=10)] = Field(
        0.5, description="`track_lin_vel_xy_exp`'s width, m/s (legged_gym's and MuJoCo Playground's 0.5)."
    )
    ang_vel_z: Annotated[float, Field(gt=0, le=10)] = Field(
        0.5,
        description="`track_ang_vel_z_exp`'s width, rad/s. Narrower charges the pelvis's yaw sway within each "
        "stride more: at 0.5 a 0.2 rad/s sway costs 15 % of the term, at 0.25 47 %.",
    )


class G1WalkSpec(G1TaskSpec):
    """`[task]` with `name = "g1_walk"`: The G1 follows a commanded base velocity (docs/tasks.md)."""

    name: Literal["g1_walk"] = Field(description="The task.")
    default_pose: Literal["home", "knees_bent"] = Field(
        "knees_bent",
        description="The pose the robot resets to and its actions offset: `knees_bent` (mjlab's G1 keyframe, "
        "knees at 0.669 rad, which mjlab, MuJoCo Playground and holosoma train their velocity tasks from: a foot "
        "lifts by bending the knee further) or `home` (Menagerie's keyframe, knees at 0.3 rad).",
    )
    actions: Literal["all", "legs", "legs_waist_yaw"] = Field(
        "all",
        description="The joints the policy drives: `all` 29, or the 12 `legs` joints (hips, knees, ankles), as "
        "unitree_rl_gym trains the G1, with the waist and arms held at the default pose by their PD loops: "
        "12 action dimensions to explore instead of 29; `legs_waist_yaw` adds the waist's yaw (13), with which "
        "the upper body can turn against the swing leg's yaw moment instead of the pelvis.",
    )
    commands: CommandRanges = Field(default_factory=CommandRanges, description="Velocity command ranges.")
    tracking_std: TrackingStd = Field(
        default_factory=TrackingStd, description="The widths of the velocity-tracking reward kernels."
    )
    gait_reward_gate: Literal["command", "progress"] = Field(
        "command",
        description="When the gait terms (`feet_air_time`, `feet_phase`) pay: `command`, whenever a walk is "
        "commanded; `progress`, only while the base also moves toward its command (its velocity's projection on "
        "the command at least a quarter of the command: stepping in place earns nothing).",
    )
    gait_period_s: Annotated[float, Field(gt=0, le=10)] | None = Field(
        None,
        description="A gait clock of this stride period, seconds (MuJoCo Playground's G1 uses about "
        "0.7-0.8): the observation gains its phase (sine and cosine) and the reward the `feet_phase` term, "
        "which pays feet that swing and stand in its rhythm while a walk is commanded (docs/tasks.md). "
        "Unset: no clock.",
    )
