"""The sections a run spec is built from, and the bases of every task's and algorithm's spec model.

A task package (`unilab.tasks.<name>.spec`) or an algorithm package (`unilab.algos.<name>.spec`),
in unilab or in a plugin, defines its `[task]` or `[algo]` model on these bases; `unilab.spec.models`
assembles the spec from the registered ones. Pydantic v2, frozen, unknown keys refused.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

# The largest count a spec takes: exact as a float (JSON readers) and far inside TOML's 64-bit integers,
# so every value a plan renders reads back.
MAX_COUNT = 2**53 - 1


class Section(BaseModel):
    # strict: TOML has real types, so `num_envs = true`, `"16"` or `normalize_observations = 1`
    # is a mistake, not something to coerce (a TOML integer still fills a float key).
    # allow_inf_nan=False: `inf`/`nan` are valid TOML but no key means them; a NaN range once
    # trained to "succeeded" on all-NaN transitions.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


# Every number that reaches the physics, a task or a learner is bounded by what it means, so that an
# absurd value is refused by name at plan time instead of training on nonsense (or failing later
# with a message about something else). The bounds are generous: they catch a slip of the
# keyboard or a unit, not a bold setting.
# A G1 walks at up to about 2 m/s (Unitree's figure); a command range beyond 5 m/s means a unit slip.
MAX_LIN_VEL = 5.0
# A full turn a second (2 pi rad/s) and more is no command a walking robot follows.
MAX_YAW_RATE = 6.3
_LinVel = Annotated[float, Field(ge=-MAX_LIN_VEL, le=MAX_LIN_VEL)]
_YawRate = Annotated[float, Field(ge=-MAX_YAW_RATE, le=MAX_YAW_RATE)]
# Strict mode wants a Python tuple; TOML gives a list. The items stay strict.
LinVelRange = Annotated[tuple[_LinVel, _LinVel], Strict(False)]
YawRateRange = Annotated[tuple[_YawRate, _YawRate], Strict(False)]
# An hour: the longest interval a run's clock-like keys mean (the episode limit has the same bound).
MAX_SECONDS = 3600.0
# Learning rates of Adam-family optimizers above 1 diverge at once.
Rate = Annotated[float, Field(gt=0, le=1)]
# Coefficients of loss terms and supports of value distributions: far beyond any published setting.
Coef = Annotated[float, Field(ge=0, le=1e6)]
Support = Annotated[float, Field(ge=-1e6, le=1e6)]
Widths = Annotated[tuple[Annotated[int, Field(ge=1, le=65536)], ...], Strict(False)]
_WIDTHS: TypeAdapter[tuple[int, ...]] = TypeAdapter(Annotated[Widths, Field(min_length=1)])


# Validation context of a spec being read (`unilab.spec.load`): the checks that look at this host
# run only then, not when a saved plan (whose sections extend these models) is read on another.
SPEC_CONTEXT = {"reading_spec": True}


def home_resolves(path: str, info: ValidationInfo) -> str:
    """A path that starts with `~` or `~NAME` must name a home directory this host knows:
    otherwise every later use of it (the run directory, the file's digest) fails. No path may hold
    a NUL byte: no file system accepts one, and the run would fail at its first use."""
    if "\x00" in path:
        raise ValueError("must be a path: it holds a NUL byte, which no file system accepts")
    if not (info.context or {}).get("reading_spec"):
        return path
    if path.startswith("~") and os.path.expanduser(path) == path:
        user = path[1:].split("/", 1)[0]
        raise ValueError(
            f"must be a path on this host: `~{user}` names no user here"
            if user
            else "must be a path on this host: `~` needs HOME, which is not set"
        )
    return path


class RewardWeightChange(Section):
    """One reward term's weight changed during the run, keyed on the run's env steps (as Isaac Lab's
    `modify_reward_weight` curriculum changes a term's weight after a number of steps): the term keeps
    its weight (`task.reward_weights` or the task's default) up to `start_env_steps`, moves linearly to
    `weight` by `end_env_steps`, and keeps `weight` from there on."""

    weight: Annotated[float, Field(ge=-1e6, le=1e6)] = Field(description="The term's weight from `end_env_steps` on.")
    start_env_steps: Annotated[int, Field(ge=0)] = Field(
        description="The run's env steps (summed over ranks) at which the change starts."
    )
    end_env_steps: Annotated[int, Field(ge=0)] | None = Field(
        None, description="The run's env steps at which the term reaches `weight`; absent: `start_env_steps` (a step)."
    )

    @property
    def end(self) -> int:
        return self.start_env_steps if self.end_env_steps is None else self.end_env_steps


class TaskSpecBase(Section):
    """The keys every task takes."""

    name: str = Field(description="The task.")
    num_envs: Annotated[int, Field(ge=1, le=1_048_576)] = Field(description="Parallel environments per rank.")
    episode_length_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        20.0,
        description="Episode time limit, seconds; rounded up to whole control steps (the plan's "
        "`task.max_episode_steps`).",
    )
    reward_weights: dict[str, Annotated[float, Field(ge=-1e6, le=1e6)]] | None = Field(
        None,
        description="Reward term weights by name, per second (the task multiplies by the env step's duration), "
        "e.g. `{ alive = 1.0, base_height = -20.0 }` for g1_walk; terms not named keep the task's defaults "
        "(docs/tasks.md lists each task's), "
        "and 0 takes a term out of the reward. The plan lists every term's weight.",
    )
    reward_curriculum: dict[str, RewardWeightChange] | None = Field(
        None,
        description="Reward term weights changed during the run, by term name, each `{ weight, start_env_steps, "
        "end_env_steps }`: the term keeps its weight up to `start_env_steps` of the run (summed over ranks), moves "
        "linearly to `weight` by `end_env_steps` (absent: a step at `start_env_steps`) and keeps it, as Isaac Lab's "
        "`modify_reward_weight` curriculum does. E.g. `{ track_ang_vel_z_exp = { weight = 3.0, start_env_steps = "
        "8_000_000, end_env_steps = 10_000_000 } }` raises g1_walk's yaw tracking once the policy walks. A resumed "
        "run continues with the weights of its env steps; `unilab eval` scores a checkpoint under them.",
    )


_Friction = Annotated[float, Field(ge=0, le=5)]
_AddedKg = Annotated[float, Field(ge=-20, le=20)]
_ComM = Annotated[float, Field(ge=0, le=0.2)]
_Scale = Annotated[float, Field(ge=0, le=10)]
_Damping = Annotated[float, Field(ge=0, le=100)]
_DelaySteps = Annotated[int, Field(ge=0, le=10)]
# A term of `task.domain_randomization`: its range (a TOML list), or `false` to switch it off.
Off = Literal[False]
_FrictionTerm = Annotated[tuple[_Friction, _Friction], Strict(False)] | Off
_AddedKgTerm = Annotated[tuple[_AddedKg, _AddedKg], Strict(False)] | Off
_ComTerm = Annotated[tuple[_ComM, _ComM, _ComM], Strict(False)] | Off
_ScaleTerm = Annotated[tuple[_Scale, _Scale], Strict(False)] | Off
_DampingTerm = Annotated[tuple[_Damping, _Damping], Strict(False)] | Off
_DelayTerm = Annotated[tuple[_DelaySteps, _DelaySteps], Strict(False)] | Off


class DomainRandomization(Section):
    """`[task.domain_randomization]`: what differs between one G1 and another, or a G1 and its model,
    drawn per world at every reset (each key a range, or `false` to switch that term off). The
    defaults and their sources are in docs/tasks.md ("Domain randomization")."""

    floor_friction: _FrictionTerm = Field(
        (0.3, 1.2), description="The floor's sliding friction, uniform in [lo, hi] (mjlab's G1 range)."
    )
    base_mass_kg: _AddedKgTerm = Field(
        (-1.0, 3.0), description="Mass added to the pelvis, kg (unitree_rl_gym's and holosoma's G1 range)."
    )
    base_com_m: _ComTerm = Field(
        (0.05, 0.05, 0.05),
        description="The pelvis's centre of mass moved by up to this much along its x, y and z, metres, "
        "uniform in [-v, v] (holosoma's G1 range).",
    )
    link_mass_scale: _ScaleTerm = Field(
        (0.9, 1.2), description="Every link's mass (and inertia) times a factor in [lo, hi], per link (holosoma's G1)."
    )
    joint_armature_scale: _ScaleTerm = Field(
        (0.8, 1.2),
        description="Every joint's armature (its motor's reflected inertia, computed from the rotors' inertias "
        "and gear ratios as mjlab's G1 does) times a factor in [lo, hi], per joint.",
    )
    joint_damping: _DampingTerm = Field(
        (0.0, 0.5),
        description="Passive damping added to every joint, N m s / rad, uniform in [lo, hi] per joint: neither "
        "unilab's G1 model nor mjlab's has any beside the servos' (0.7-2.6 on the legs), a real gearbox has some.",
    )
    joint_friction_scale: _ScaleTerm = Field(
        (0.0, 2.0),
        description="Every joint's dry friction (friction loss) times a factor in [lo, hi], per joint: from none "
        "(mjlab's g1.xml) to twice the model's 0.1 N m.",
    )
    pd_gain_scale: _ScaleTerm = Field(
        (0.9, 1.1),
        description="Each servo's stiffness and damping gains times factors in [lo, hi], drawn apart per joint "
        "(motor strength; holosoma's G1 kp and kd ranges).",
    )
    action_delay_steps: _DelayTerm = Field(
        (0, 1),
        description="The policy's action reaches the servos this many control steps late, a whole number in "
        "[lo, hi] per episode (holosoma's G1: 0 or 1).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> DomainRandomization:
        for name in type(self).model_fields:
            v = getattr(self, name)
            if v is not False and len(v) == 2 and v[0] > v[1]:
                raise ValueError(f"{name}: lower bound {v[0]} exceeds upper bound {v[1]}")
        return self

    def on(self) -> list[str]:
        """The terms switched on, in declaration order."""
        return [name for name in type(self).model_fields if getattr(self, name) is not False]


class G1TaskSpec(TaskSpecBase):
    """The keys both G1 tasks take: the robot, observation noise, randomization, pushes, action scale."""

    robot_mjcf: str | None = Field(
        None,
        description="A user's G1 MJCF instead of the built-in model (29 joint names must match); "
        "relative paths resolve against the spec file's directory.",
    )
    default_pose: Literal["home", "knees_bent"] = Field(
        "home",
        description="The pose the robot resets to and its actions offset: `home` (Menagerie's keyframe, knees "
        "at 0.3 rad) or `knees_bent` (mjlab's G1 keyframe, knees at 0.669 rad, which mjlab, MuJoCo Playground "
        "and holosoma train their velocity tasks from).",
    )
    observation_noise: bool = Field(
        False, description="Add uniform noise to the actor's observations (the critic's privileged terms stay exact)."
    )
    privileged_observations: (
        Annotated[tuple[Annotated[str, Field(min_length=1, max_length=64)], ...], Strict(False)] | None
    ) = Field(
        None,
        description="Observation terms only the critic sees: the actor, and the policy `unilab export` writes, do "
        'without them (asymmetric actor-critic). `["base_lin_vel"]` trains a policy a real G1 can run: the robot '
        "measures its angular velocity, gravity direction and joints, not its base's linear velocity (docs/tasks.md). "
        "SAC, TD3 and FlashSAC, and PPO (rsl-rl-lib's `critic` observation group); unset: actor and critic see the "
        "whole observation.",
    )
    domain_randomization: bool | DomainRandomization = Field(
        False,
        description="Randomize at every reset what differs between robots and models: floor friction, link masses "
        "and the base's centre of mass, joint armature, damping and friction, servo gains and an action delay "
        "(`[task.domain_randomization]`, each a range or `false`). `true`: every term at its default range "
        "(docs/tasks.md); `false`: none.",
    )
    push_interval_s: Annotated[float, Field(gt=0, le=MAX_SECONDS)] | None = Field(
        None, description="Push the robot base every this many seconds (an interval event); unset: no pushes."
    )
    action_scale: Annotated[float, Field(gt=0, le=10)] = Field(
        0.25,
        description="Joint targets are `default pose + action_scale * effort_limit / kp * action`, per joint "
        "(mjlab's G1 rule at 0.25). The learners' actions lie in [-1, 1] (SAC and FlashSAC squash them, PPO's are "
        "clipped), so this bounds how far a target moves from the standing pose; the joint range clamps it "
        "further.",
    )

    @field_validator("domain_randomization", mode="before")
    @classmethod
    def _true_is_every_term(cls, v: object) -> object:
        return DomainRandomization() if v is True else v

    @property
    def randomization(self) -> DomainRandomization | None:
        """The randomization terms asked for; None: none."""
        dr = self.domain_randomization
        return dr if isinstance(dr, DomainRandomization) and dr.on() else None

    @field_validator("privileged_observations")
    @classmethod
    def _none_is_empty(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return v or None  # `[]` plans as unset: the same plan, the same plan id

    @field_validator("robot_mjcf")
    @classmethod
    def _robot_home(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else home_resolves(v, info)


class AlgoSpecBase(Section):
    gamma: Annotated[float, Field(gt=0, le=1)] = Field(0.99, description="Discount factor.")
    max_grad_norm: Annotated[float, Field(gt=0, le=1e6)] | None = Field(
        None, description="Gradient norm clip; unset: none."
    )
    normalize_observations: bool = Field(True, description="Running mean/std observation normalization.")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="The learner's matrix products and activations: `bfloat16` needs bf16 matrix units (CPU "
        "AMX or AVX512-BF16, or a CUDA GPU); parameters, optimizer state and losses stay float32. `auto`: the "
        "plan picks from the host's facts and records why.",
    )


class ReplayAlgoSpec(AlgoSpecBase):
    """The keys every replay-buffer learner shares (SAC, FlashSAC, TD3)."""

    batch_size: Annotated[int, Field(ge=1, le=1_048_576)] = Field(256, description="Replay minibatch size.")
    buffer_size: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        1_000_000, description="Replay capacity in transitions per rank."
    )
    updates_per_step: Annotated[float, Field(gt=0, le=1024)] = Field(
        1.0, description="Gradient updates per env step of one env batch (per sync of K=1)."
    )
    warmup_env_steps: Annotated[int, Field(ge=0, le=MAX_COUNT)] = Field(
        5_000, description="Env steps with uniform random actions before learning starts."
    )
    mirror_augmentation: bool = Field(
        False,
        description="Half of each batch is sampled, the other half is its left-right mirror image (the task's "
        "reflection of observations and actions, same rewards), so a gait learned on one side is learned on the "
        "other at no extra update cost (holosoma's FastSAC G1 does so). The task must declare a mirror (g1_walk).",
    )
    actor_lr: Rate = Field(3e-4, description="Actor learning rate.")
    critic_lr: Rate = Field(3e-4, description="Critic learning rate.")
    tau: Annotated[float, Field(gt=0, le=1)] = Field(0.005, description="Polyak averaging rate of target critics.")
    actor_update_every: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        1, description="Actor (and alpha) updates every N critic updates."
    )
    num_atoms: Annotated[int, Field(ge=2, le=1001)] = Field(101, description="Atoms (bins) of a distributional critic.")
    v_min: Support = Field(-20.0, description="Lowest support value of a distributional critic.")
    v_max: Support = Field(20.0, description="Highest support value of a distributional critic.")
    # `hidden_dims` is the shorthand for both widths (the key before actor and critic widths were
    # separate): it fills whichever of the two is not given and is dropped, so plans and spec
    # digests show only the two.
    hidden_dims: Widths | None = Field(
        None,
        min_length=1,
        exclude=True,
        description="Shorthand: the widths of actor_hidden_dims and critic_hidden_dims where those are not given.",
    )

    @model_validator(mode="before")
    @classmethod
    def _widths_shorthand(cls, data: object) -> object:
        if not isinstance(data, dict) or data.get("hidden_dims") is None:
            return data
        value = data["hidden_dims"]
        try:  # a bad value is reported once, at hidden_dims, by the field's own (strict) validation
            _WIDTHS.validate_python(tuple(value) if isinstance(value, list) else value, strict=True)
        except ValidationError:
            return data
        # A network's own key wins over the shorthand: `--set algo.actor_hidden_dims=[64]` on a
        # file with `hidden_dims` changes the actor alone.
        return {"actor_hidden_dims": value, "critic_hidden_dims": value, **data}


class MaxEntropyAlgoSpec(ReplayAlgoSpec):
    """The maximum-entropy learners' keys: a learned temperature (SAC, FlashSAC)."""

    alpha_lr: Rate = Field(3e-4, description="Entropy temperature learning rate.")
    alpha_init: Annotated[float, Field(gt=0, le=100)] = Field(0.1, description="Initial entropy temperature.")


def spec_model_problem(base: type[BaseModel], name: str, record: object) -> str | None:
    """What is wrong with a plugin's record as far as its spec model goes, or None."""
    model = getattr(record, "spec", None)
    if not (isinstance(model, type) and issubclass(model, base)):
        return f"its record's `spec` is {model!r}, not a subclass of unilab.sections.{base.__name__}"
    field = model.model_fields.get("name")
    if field is None or get_args(field.annotation) != (name,):
        return f"its spec model {model.__name__} must declare `name: Literal[{name!r}]`, its entry point's name"
    return None


def task_record_problem(name: str, record: object) -> str | None:
    return spec_model_problem(TaskSpecBase, name, record)


def algo_record_problem(name: str, record: object) -> str | None:
    return spec_model_problem(AlgoSpecBase, name, record)
