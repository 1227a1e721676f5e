"""The evaluation report `unilab eval --json` prints (schemas/eval.v1.json)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EVAL_SCHEMA_VERSION = 1


class _E(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stat(_E):
    mean: float
    std: float = Field(description="Population standard deviation over the episodes.")
    min: float
    max: float


class VideoClip(_E):
    """One filmed episode."""

    world: int
    start_s: float = Field(description="Where the episode starts in the video, in seconds.")
    episode_length: int = Field(description="In env steps.")
    episode_return: float
    ended: Literal["time_out", "termination", "non_finite"]


class EvalVideo(_E):
    """The video `unilab eval --video FILE` wrote."""

    path: str = Field(description="The MP4 file, as given.")
    episodes: int = Field(description="Episodes filmed, one after the other: those of worlds 0 to episodes - 1.")
    frames: int = Field(
        description="Frames in the file: per episode its reset, every n-th step and its final state; the last "
        "frame of each episode but the last is held for half a second."
    )
    fps: float = Field(description="Frames per second: the control rate, or a whole fraction of it up to 30.")
    width: int
    height: int
    clips: list[VideoClip]


class AveragedTracking(_E):
    """The same comparison with the base velocity averaged over a trailing window (one second): a
    stepping robot's pelvis sways and yaws within every stride, so the per-step error counts that
    sway as well as whether the robot goes where it is told. Counted only at steps whose whole
    window lies in one episode under one command."""

    window_s: float = Field(description="The averaging window, seconds.")
    lin_vel_xy_error: float = Field(description="Mean |cmd_xy - mean over the window of v_xy|, m/s.")
    yaw_rate_error: float = Field(description="Mean |cmd_yaw - mean over the window of w_z|, rad/s.")
    standing_lin_vel_xy_error: float = Field(description="Mean |cmd_xy| over the same steps, m/s.")
    standing_yaw_rate_error: float = Field(description="Mean |cmd_yaw| over the same steps, rad/s.")
    steps: int = Field(description="Env steps counted: those with a full window.")


class ClassTracking(_E):
    """`CommandTracking`'s per-step figures over the steps whose command was of one class, with each
    error's ratio to a standing robot's: under 1 the robot tracks better than standing still would."""

    steps: int = Field(description="Env steps counted under a command of this class, all episodes together.")
    lin_vel_xy_error: float = Field(description="Mean |cmd_xy - v_xy|, m/s.")
    standing_lin_vel_xy_error: float = Field(description="Mean |cmd_xy|, m/s: a robot standing still.")
    lin_vel_xy_ratio: float | None = Field(
        description="lin_vel_xy_error / standing_lin_vel_xy_error; None where that is 0 (every command's xy zero)."
    )
    yaw_rate_error: float = Field(description="Mean |cmd_yaw - w_z|, rad/s.")
    standing_yaw_rate_error: float = Field(description="Mean |cmd_yaw|, rad/s: a robot standing still.")
    yaw_rate_ratio: float | None = Field(
        description="yaw_rate_error / standing_yaw_rate_error; None where that is 0 (every command's yaw rate zero)."
    )


class CommandClasses(_E):
    """The per-step tracking split by the class of the command in force at each step (commands are
    resampled within episodes, so one episode may count into several). A command (vx, vy, yaw rate)
    is classed linear first: where |vx| or |vy| exceeds 0.1 m/s it is forward (vx > 0) or backward
    (vx < 0) when |vx| >= |vy|, else lateral, however fast it turns; otherwise it is turning where
    |yaw rate| exceeds 0.1 rad/s, else standing (zero, or every component at most 0.1). A class no
    step was commanded is None."""

    forward: ClassTracking | None = None
    backward: ClassTracking | None = None
    lateral: ClassTracking | None = None
    turning: ClassTracking | None = Field(None, description="Turning on the spot.")
    standing: ClassTracking | None = Field(
        None,
        description="Standing still (task.commands.standing_share) or a command too small to class; a zero "
        "command's ratios are None.",
    )


class CommandTracking(_E):
    """How closely the base followed its velocity command (g1_walk), averaged over every step the
    episodes played but each one's last (its world is reset by then); beside it the error a robot
    standing still would have had under the same commands."""

    lin_vel_xy_error: float = Field(
        description="Mean |cmd_xy - v_xy|, m/s, the base velocity in its body frame as the tracking reward reads it."
    )
    yaw_rate_error: float = Field(description="Mean |cmd_yaw - w_z|, rad/s.")
    standing_lin_vel_xy_error: float = Field(
        description="Mean |cmd_xy|, m/s: the same error for a robot standing still."
    )
    standing_yaw_rate_error: float = Field(description="Mean |cmd_yaw|, rad/s.")
    steps: int = Field(description="Env steps averaged over, all episodes together.")
    averaged: AveragedTracking | None = Field(
        None, description="Over a one-second window; None when no step had a whole window (episodes under 1 s)."
    )
    by_command: CommandClasses | None = Field(
        None,
        description="The same per-step figures by the class of the command at each step; every report unilab "
        "writes has it (None only in one written before it was added).",
    )


class Gait(_E):
    """Whether and how the feet step (g1_walk), over the same steps as `CommandTracking`: a policy
    that scores by standing still shows a swing share near 0 and no touchdowns."""

    swing_height: float = Field(
        description="m: a foot counts as in swing when its body origin is at or above this height over the floor "
        "(g1_walk's FOOT_CONTACT_HEIGHT, the height its contact flags and air-time reward use; ~0.037 standing)."
    )
    swing_share: float = Field(description="Share of the steps on which at least one foot was in swing.")
    feet_air_share: float = Field(description="Mean share of the feet in swing per step.")
    touchdowns_per_s: float = Field(
        description="Feet coming down from swing (steps taken) per second of each robot's play: about 2 / stride "
        "period for a walking gait, 0 for a robot that stands."
    )
    stance_width: float | None = Field(
        description="m: mean lateral distance between the two feet (body origins) in the base's heading frame; "
        "None for a robot without exactly two feet."
    )
    steps: int = Field(description="Env steps averaged over, all episodes together.")


class EvalReport(_E):
    """One evaluation: every world plays exactly one episode from a reset, with the policy's
    deterministic action (no exploration noise); the task's observation noise and domain
    randomization stay as the run's plan set them."""

    schema_version: Literal[1] = 1
    run_dir: str = Field(description="The run directory evaluated, as given.")
    plan_id: str = Field(description="The run's plan.")
    task: str
    algo: str
    checkpoint: str = Field(description="The checkpoint's file name (in RUN_DIR/checkpoints).")
    checkpoint_env_steps: int = Field(description="Env steps the run had trained when it saved the checkpoint.")
    checkpoint_sha256: str = Field(description="Its sha256 (hex): the run recorded it, and the file still has it.")
    backend: Literal["mujoco"] = Field(description="Physics backend of the evaluation (CPU MuJoCo).")
    workers: int = Field(description="CPU MuJoCo worker processes.")
    seed: int = Field(description="Seed of the task's reset draws and observation noise.")
    episodes: int = Field(description="Episodes played, one per world.")
    control_dt: float = Field(description="Seconds per env step.")
    max_episode_steps: int = Field(description="The task's time limit, in env steps.")
    episode_return: Stat
    episode_length: Stat = Field(description="In env steps.")
    ended_by_time_out: int = Field(
        description="Episodes cut off by a time-out term, without a failure: the time limit, or for "
        "g1_motion_tracking the reference clip's end."
    )
    ended_by_termination: int = Field(description="Episodes ended by one of the task's terminations (a fall, ...).")
    ended_non_finite: int = Field(
        description="Episodes ended because the world's state went non-finite (reset by the collector)."
    )
    episodes_with_physics_warnings: int = Field(
        description="Episodes in which MuJoCo warned (e.g. `bad_qacc`: it reset a diverged world to the model's "
        "default pose and the episode went on, so its figures include that)."
    )
    physics_warnings: dict[str, int] = Field(
        description="MuJoCo's warnings over the episodes, by kind (only kinds seen)."
    )
    reward_terms: dict[str, float] = Field(
        description="Mean per episode of each reward term's sum (as weighted in the reward), in the task's order."
    )
    command_tracking: CommandTracking | None = Field(
        default=None, description="For a task with a velocity command (g1_walk): how closely the base followed it."
    )
    gait: Gait | None = Field(
        default=None, description="For a task with a velocity command (g1_walk): whether and how the feet stepped."
    )
    action_saturation: float | None = Field(
        default=None,
        description="Share of the action's components beyond 0.95 in magnitude (of the bound 1), over every step "
        "the episodes played but each one's last; near 1, a bang-bang policy. None when no step was counted.",
    )
    env_steps: int = Field(description="Env steps simulated, over all worlds.")
    wall_s: float = Field(description="Seconds the episodes took, without the setup.")
    video: EvalVideo | None = Field(default=None, description="The video written with --video, if any.")
