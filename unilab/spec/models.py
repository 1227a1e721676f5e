"""The run spec: what a user writes in TOML. Pydantic v2, frozen, unknown keys refused.

Validation here is about the spec alone (types, ranges, shapes), with one exception made only
while a spec is read (``SPEC_CONTEXT``): a `~NAME` path must name a user of this host. Whether the
host can honour a request is decided later, by the plan's rules, against recorded host facts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from unilab import plugins

SPEC_SCHEMA_VERSION = 1
# The largest count a spec takes: exact as a float (JSON readers) and far inside TOML's 64-bit integers,
# so every value a plan renders reads back.
MAX_COUNT = 2**53 - 1


class _Section(BaseModel):
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
_Rate = Annotated[float, Field(gt=0, le=1)]
# Coefficients of loss terms and supports of value distributions: far beyond any published setting.
_Coef = Annotated[float, Field(ge=0, le=1e6)]
_Support = Annotated[float, Field(ge=-1e6, le=1e6)]
Widths = Annotated[tuple[Annotated[int, Field(ge=1, le=65536)], ...], Strict(False)]
_WIDTHS: TypeAdapter[tuple[int, ...]] = TypeAdapter(Annotated[Widths, Field(min_length=1)])


# Validation context of a spec being read (`unilab.spec.load`): the checks that look at this host
# run only then, not when a saved plan (whose sections extend these models) is read on another.
SPEC_CONTEXT = {"reading_spec": True}


def _home_resolves(path: str, info: ValidationInfo) -> str:
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


class WandbSpec(_Section):
    """`[run.wandb]`: mirror the run's scalars and its manifest to Weights & Biases (the `wandb`
    extra). TensorBoard is written either way."""

    project: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        "unilab", description="W&B project (none of the characters / \\ # ? % :, which W&B refuses)."
    )
    entity: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        None, description="W&B entity (user or team); unset: the account's default."
    )
    mode: Literal["auto", "online", "offline"] = Field(
        "auto",
        description="`offline` writes the W&B run into the run directory (`wandb sync RUN_DIR/wandb/offline-run-*` "
        "uploads it later); `online` streams it and refuses to start without an API key or a reachable server; "
        "`auto` streams when both are there and otherwise goes offline, saying so. The choice waits at most 3 s "
        "for the network, W&B's start-up at most 30 s, and its final upload at most 60 s (then the local copy "
        "is named for `wandb sync`).",
    )
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=64, description="W&B tags of the run."
    )

    @field_validator("project")
    @classmethod
    def _project_name(cls, v: str) -> str:
        # W&B refuses these only when the run starts (wandb's Settings.validate_project): here, at plan time.
        if bad := [c for c in "/\\#?%:" if c in v]:
            raise ValueError(
                f"must be free of / \\ # ? % :, which W&B refuses in a project name (it has {' '.join(bad)})"
            )
        return v


class RunSpec(_Section):
    """`[run]`: identity, seed, budget and bookkeeping of one training run."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")] = Field(
        description="Run name; the run directory is `<output_dir>/<name>-<utc time>/`."
    )
    seed: Annotated[int, Field(ge=0, lt=2**31)] = Field(0, description="Base seed; rank r uses seed + r.")
    output_dir: str = Field(
        "runs",
        min_length=1,
        description="Directory that holds run directories (`~` is the home directory); a relative path resolves "
        "against the working directory of `unilab apply` (unlike `task.motion`, `task.robot_mjcf` and "
        "`run.init_from`, inputs that resolve against the spec file's directory so that a spec and its files move "
        "together).",
    )
    total_env_steps: Annotated[int, Field(gt=0, le=MAX_COUNT)] = Field(
        description="Environment steps to collect, summed over all envs and ranks; the plan rounds each rank's "
        "share up to whole env steps of its envs (PPO: whole rollouts) and records the result as "
        "`run.effective_env_steps`."
    )
    checkpoint_every_env_steps: Annotated[int, Field(gt=0, le=MAX_COUNT)] | None = Field(
        None, description="Checkpoint interval in env steps; unset: only a final checkpoint."
    )
    log_every_seconds: Annotated[float, Field(gt=0, le=MAX_SECONDS)] = Field(
        5.0, description="Interval of the progress line, metrics events and tensorboard scalars."
    )
    checkpoint_keep: Annotated[int, Field(ge=1, le=1000)] = Field(3, description="Newest checkpoints kept on disk.")
    init_from: str | None = Field(
        None,
        min_length=1,
        description="Start from another run's policy (fine-tuning): its run directory (the newest checkpoint) "
        "or a checkpoint file in its checkpoints/; a relative path resolves against the spec file's directory. "
        "The networks, the entropy temperature (PPO: the action noise) and the observation normalizer are loaded; "
        "optimizers, counters and the replay buffer start fresh, and the warm-up (`algo.warmup_env_steps`) "
        "collects with the loaded policy instead of random actions. That run must have the same task, algorithm, "
        "network shape and `algo.alpha_init` (PPO: `algo.init_noise_std`), which the loaded temperature (noise) "
        "replaces (rule `run.init-from`).",
    )

    wandb: WandbSpec | None = Field(
        None,
        description="Mirror the run's scalars and manifest to Weights & Biases (`[run.wandb]`, the `wandb` extra); "
        "unset: no mirror.",
    )

    @field_validator("output_dir")
    @classmethod
    def _output_home(cls, v: str, info: ValidationInfo) -> str:
        return _home_resolves(v, info)

    @field_validator("init_from")
    @classmethod
    def _init_home(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else _home_resolves(v, info)


class CommandRanges(_Section):
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


class RewardWeightChange(_Section):
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


class TaskSpecBase(_Section):
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


class G1TaskSpec(TaskSpecBase):
    """The keys both G1 tasks take: the robot, observation noise, randomization, pushes, action scale."""

    name: Literal["g1_walk", "g1_motion_tracking"]
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
    observation_noise: bool = Field(False, description="Add uniform noise to observations.")
    privileged_observations: (
        Annotated[tuple[Annotated[str, Field(min_length=1, max_length=64)], ...], Strict(False)] | None
    ) = Field(
        None,
        description="Observation terms only the critic sees: the actor, and the policy `unilab export` writes, do "
        'without them (asymmetric actor-critic). `["base_lin_vel"]` trains a policy a real G1 can run: the robot '
        "measures its angular velocity, gravity direction and joints, not its base's linear velocity (docs/tasks.md). "
        "Replay learners (SAC, TD3, FlashSAC); unset: actor and critic see the whole observation.",
    )
    domain_randomization: bool = Field(False, description="Randomize floor friction and added base mass at reset.")
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

    @field_validator("privileged_observations")
    @classmethod
    def _none_is_empty(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return v or None  # `[]` plans as unset: the same plan, the same plan id

    @field_validator("robot_mjcf")
    @classmethod
    def _robot_home(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else _home_resolves(v, info)


class TrackingStd(_Section):
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
    gait_period_s: Annotated[float, Field(gt=0, le=10)] | None = Field(
        None,
        description="A gait clock of this stride period, seconds (MuJoCo Playground's G1 uses about "
        "0.7-0.8): the observation gains its phase (sine and cosine) and the reward the `feet_phase` term, "
        "which pays feet that swing and stand in its rhythm while a walk is commanded (docs/tasks.md). "
        "Unset: no clock.",
    )


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
        return _home_resolves(v, info)


class CartpoleSpec(TaskSpecBase):
    """`[task]` with `name = "cartpole"`: A small check task (not a G1) that learns in about a minute."""

    name: Literal["cartpole"] = Field(description="The task.")


TaskSpec = Annotated[G1WalkSpec | G1MotionTrackingSpec | CartpoleSpec, Field(discriminator="name")]
# Each `[task]` model by its `name`.
TASK_MODELS: dict[str, type[TaskSpecBase]] = {
    m.model_fields["name"].annotation.__args__[0]: m for m in get_args(get_args(TaskSpec)[0])
}


def _plugin_model(base: type[BaseModel], name: str, record: object) -> str | None:
    """What is wrong with a plugin's record as far as its spec model goes, or None."""
    model = getattr(record, "spec", None)
    if not (isinstance(model, type) and issubclass(model, base)):
        return f"its record's `spec` is {model!r}, not a subclass of unilab.spec.models.{base.__name__}"
    field = model.model_fields.get("name")
    if field is None or get_args(field.annotation) != (name,):
        return f"its spec model {model.__name__} must declare `name: Literal[{name!r}]`, its entry point's name"
    return None


def task_record_problem(name: str, record: object) -> str | None:
    return _plugin_model(TaskSpecBase, name, record)


def plugin_task_model(name: str) -> type[TaskSpecBase] | None:
    """The `[task]` model of the installed plugin task ``name`` (unilab.plugins), or None."""
    record = plugins.load(plugins.TASK_GROUP, name, task_record_problem)
    return None if record is None else record.spec  # type: ignore[attr-defined]


def chosen_by_name(
    builtin: Mapping[str, type[BaseModel]], plugin: Callable[[str], type[BaseModel] | None]
) -> Callable[[Any, ValidatorFunctionWrapHandler, ValidationInfo], Any]:
    """A section chosen by its `name`: a built-in member through the discriminated union (its
    JSON Schema and messages), a name no built-in has through the installed plugin of that name."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        name = value.get("name") if isinstance(value, Mapping) else getattr(value, "name", None)
        if isinstance(name, str) and name not in builtin:
            model = plugin(name)
            if model is not None:
                return value if type(value) is model else model.model_validate(value, context=info.context)
        return handler(value)

    return validate


# `Spec.task`: a built-in task's model or an installed plugin's, serialized as the model it is.
TaskSection = Annotated[SerializeAsAny[TaskSpec], WrapValidator(chosen_by_name(TASK_MODELS, plugin_task_model))]
_TASK: TypeAdapter[TaskSpec] = TypeAdapter(TaskSection)


def task_spec(**keys: Any) -> TaskSpec:
    """The `[task]` model its `name` chooses, validated: `task_spec(name="cartpole", num_envs=16)`."""
    return _TASK.validate_python(keys)


class SimSpec(_Section):
    """`[sim]`: physics engine and time stepping."""

    backend: Literal["mujoco", "mjwarp"] = Field("mujoco", description="CPU MuJoCo or MuJoCo Warp.")
    timestep: Annotated[float, Field(gt=0, le=0.05)] = Field(0.005, description="Physics timestep, seconds.")
    decimation: Annotated[int, Field(ge=1, le=100)] = Field(4, description="Physics steps per env (control) step.")
    workers: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = Field(
        "auto",
        description="CPU backend: worker processes per rank (`auto`: one per CPU of the rank's collector block).",
    )
    njmax: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        None,
        description="MuJoCo Warp: constraint rows allocated per world (unset: 300, mjlab's figure for the G1). "
        "Rows beyond it are dropped and the manifest reports `overflow_nefc_worlds`: raise it then.",
    )
    nconmax: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        None,
        description="MuJoCo Warp: contacts allocated per world (unset: MuJoCo Warp's estimate for the model). "
        "The manifest reports `overflow_broadphase_worlds` or `overflow_narrowphase_worlds` when it is too small.",
    )


class _AlgoBase(_Section):
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


class ReplayAlgoSpec(_AlgoBase):
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
    actor_lr: _Rate = Field(3e-4, description="Actor learning rate.")
    critic_lr: _Rate = Field(3e-4, description="Critic learning rate.")
    tau: Annotated[float, Field(gt=0, le=1)] = Field(0.005, description="Polyak averaging rate of target critics.")
    actor_update_every: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        1, description="Actor (and alpha) updates every N critic updates."
    )
    num_atoms: Annotated[int, Field(ge=2, le=1001)] = Field(101, description="Atoms (bins) of a distributional critic.")
    v_min: _Support = Field(-20.0, description="Lowest support value of a distributional critic.")
    v_max: _Support = Field(20.0, description="Highest support value of a distributional critic.")
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


class _OffPolicyBase(ReplayAlgoSpec):
    """The maximum-entropy learners' keys: a learned temperature (SAC, FlashSAC)."""

    alpha_lr: _Rate = Field(3e-4, description="Entropy temperature learning rate.")
    alpha_init: Annotated[float, Field(gt=0, le=100)] = Field(0.1, description="Initial entropy temperature.")


class SacSpec(_OffPolicyBase):
    """`[algo]` with `name = "sac"`: soft actor-critic, with FastSAC's large-batch options."""

    name: Literal["sac"] = Field(description="The learner algorithm.")
    actor_hidden_dims: Widths = Field((256, 256), min_length=1, description="Hidden layer widths of the actor.")
    critic_hidden_dims: Widths = Field(
        (256, 256), min_length=1, description="Hidden layer widths of each of the two Q networks."
    )
    activation: Literal["relu", "silu", "elu"] = Field("relu", description="Activation after each hidden layer.")
    critic: Literal["mse", "c51"] = Field("mse", description="Scalar twin-Q (`mse`) or C51 distributional critic.")
    layer_norm: bool = Field(False, description="LayerNorm after each hidden layer (FastSAC).")
    target_entropy: Annotated[float, Field(ge=-1e4, le=1e4)] | Literal["auto"] = Field(
        "auto", description="`auto`: -action_dim."
    )
    n_step: Annotated[int, Field(ge=1, le=64)] = Field(
        1,
        description="n-step return length: the critic's target sums n rewards before it bootstraps, so reward "
        "reaches the critic n times faster (RSL-RL-SAC and FastTD3 use n-step returns on legged robots).",
    )


class FlashSacSpec(_OffPolicyBase):
    """`[algo]` with `name = "flashsac"`: FlashSAC (arXiv:2604.04539)."""

    name: Literal["flashsac"] = Field(description="The learner algorithm.")
    batch_size: Annotated[int, Field(ge=1, le=1_048_576)] = Field(2048, description="Replay minibatch size.")
    updates_per_step: Annotated[float, Field(gt=0, le=1024)] = Field(
        0.5, description="Low update-to-data ratio: gradient updates per env step of one env batch."
    )
    actor_update_every: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        2, description="Actor updates every N critic updates."
    )
    num_blocks: Annotated[int, Field(ge=1, le=64)] = Field(2, description="Inverted-residual blocks per network.")
    expansion: Annotated[int, Field(ge=1, le=16)] = Field(4, description="Inverted-residual expansion factor.")
    n_step: Annotated[int, Field(ge=1, le=64)] = Field(3, description="n-step return length.")
    target_action_std: Annotated[float, Field(gt=0, le=1)] = Field(
        0.15, description="Entropy target derived from this fixed action std."
    )
    reward_scaling: bool = Field(True, description="Adaptive reward scaling.")
    alpha_init: Annotated[float, Field(gt=0, le=100)] = Field(
        0.01, description="Initial entropy temperature (the paper's)."
    )
    tau: Annotated[float, Field(gt=0, le=1)] = Field(
        0.01, description="Polyak averaging rate of the target critic (the paper's)."
    )
    v_min: _Support = Field(-5.0, description="Lowest support value of the distributional critic (the paper's).")
    v_max: _Support = Field(5.0, description="Highest support value of the distributional critic (the paper's).")
    actor_hidden_dims: Widths = Field(
        (256,), min_length=1, max_length=1, description="The actor's residual stream width (one entry)."
    )
    critic_hidden_dims: Widths = Field(
        (256,), min_length=1, max_length=1, description="Each Q network's residual stream width (one entry)."
    )
    hidden_dims: Widths | None = Field(
        None,
        min_length=1,
        max_length=1,
        exclude=True,
        description="Shorthand: actor_hidden_dims and critic_hidden_dims where those are not given (one entry).",
    )


class Td3Spec(ReplayAlgoSpec):
    """`[algo]` with `name = "td3"`: TD3 (Fujimoto et al. 2018) with FastTD3's options (arXiv:2505.22642):
    a C51 distributional critic, clipped double Q, target policy smoothing, a delayed actor and
    per-env exploration noise scales."""

    name: Literal["td3"] = Field(description="The learner algorithm.")
    actor_hidden_dims: Widths = Field((256, 256), min_length=1, description="Hidden layer widths of the actor.")
    critic_hidden_dims: Widths = Field(
        (256, 256), min_length=1, description="Hidden layer widths of each of the two Q networks."
    )
    activation: Literal["relu", "silu", "elu"] = Field("relu", description="Activation after each hidden layer.")
    critic: Literal["mse", "c51"] = Field("c51", description="Scalar twin-Q (`mse`) or C51 distributional critic.")
    layer_norm: bool = Field(False, description="LayerNorm after each hidden layer.")
    actor_update_every: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        2, description="Delayed actor: one actor update every N critic updates (TD3's policy delay)."
    )
    tau: Annotated[float, Field(gt=0, le=1)] = Field(
        0.1, description="Polyak averaging rate of the target actor and critics (FastTD3's)."
    )
    clipped_double_q: bool = Field(
        True, description="Target from the lower of the two target critics (TD3); false: their mean."
    )
    n_step: Annotated[int, Field(ge=1, le=64)] = Field(1, description="n-step return length.")
    exploration_std_min: Annotated[float, Field(gt=0, le=1)] = Field(
        0.001, description="Lowest per-env exploration noise std (FastTD3 draws one per env and episode)."
    )
    exploration_std_max: Annotated[float, Field(gt=0, le=1)] = Field(
        0.4, description="Highest per-env exploration noise std."
    )
    target_noise_std: Annotated[float, Field(ge=0, le=1)] = Field(
        0.2, description="Target policy smoothing: noise std added to the target action."
    )
    target_noise_clip: Annotated[float, Field(ge=0, le=1)] = Field(
        0.5, description="Target policy smoothing: the noise is clipped to +- this."
    )

    @field_validator("exploration_std_max")
    @classmethod
    def _noise_range(cls, v: float, info: ValidationInfo) -> float:
        low = info.data.get("exploration_std_min")
        if low is not None and v < low:
            raise ValueError(f"must be at least exploration_std_min ({low})")
        return v


class PpoSpec(_AlgoBase):
    """`[algo]` with `name = "ppo"`: PPO through rsl-rl-lib's on-policy runner."""

    name: Literal["ppo"] = Field(description="The learner algorithm.")
    hidden_dims: Widths = Field(
        (256, 128, 64), min_length=1, description="Hidden layer widths of the actor and of the critic."
    )
    num_steps_per_env: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        24, description="Rollout length per env per iteration."
    )
    num_learning_epochs: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(5, description="Epochs over each rollout.")
    num_mini_batches: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(4, description="Minibatches per epoch.")
    learning_rate: _Rate = Field(1e-3, description="Adam learning rate.")
    clip_param: Annotated[float, Field(gt=0, le=1)] = Field(0.2, description="PPO ratio clip.")
    entropy_coef: _Coef = Field(0.01, description="Entropy bonus coefficient.")
    value_loss_coef: _Coef = Field(1.0, description="Value loss coefficient.")
    lam: Annotated[float, Field(ge=0, le=1)] = Field(0.95, description="GAE lambda.")
    schedule: Literal["adaptive", "fixed"] = Field("adaptive", description="Learning-rate schedule (rsl-rl).")
    desired_kl: Annotated[float, Field(gt=0, le=1)] = Field(0.01, description="KL target of the adaptive schedule.")
    init_noise_std: Annotated[float, Field(gt=0, le=10)] = Field(1.0, description="Initial action noise std.")
    max_grad_norm: Annotated[float, Field(gt=0, le=1e6)] = Field(1.0, description="Gradient norm clip.")


AlgoSpec = Annotated[SacSpec | FlashSacSpec | Td3Spec | PpoSpec, Field(discriminator="name")]
# Each `[algo]` model by its `name`.
ALGO_MODELS: dict[str, type[_AlgoBase]] = {
    m.model_fields["name"].annotation.__args__[0]: m for m in get_args(get_args(AlgoSpec)[0])
}


def algo_record_problem(name: str, record: object) -> str | None:
    return _plugin_model(_AlgoBase, name, record)


def plugin_algo_model(name: str) -> type[_AlgoBase] | None:
    """The `[algo]` model of the installed plugin algorithm ``name`` (unilab.plugins), or None."""
    record = plugins.load(plugins.ALGO_GROUP, name, algo_record_problem)
    return None if record is None else record.spec  # type: ignore[attr-defined]


# `Spec.algo` and the plan's: a built-in algorithm's model or an installed plugin's.
AlgoSection = Annotated[SerializeAsAny[AlgoSpec], WrapValidator(chosen_by_name(ALGO_MODELS, plugin_algo_model))]

DeviceRef = (
    Literal["cpu"]
    | Annotated[int, Field(ge=0, le=MAX_COUNT)]
    | Annotated[str, Field(pattern=r"^(GPU|MIG)-[0-9A-Za-z-]+$")]
)


class TrainingSpec(_Section):
    """`[training]`: execution modes. Each is either honoured or refused at plan time."""

    # min_length: an empty list has no rank to run (it used to divide by zero in the plan).
    devices: DeviceRef | Annotated[list[DeviceRef], Field(min_length=1)] = Field(
        "cpu",
        description='`"cpu"`, `["cpu", "cpu"]` (CPU data parallel), GPU indices `[0, 1]` '
        "(as CUDA_VISIBLE_DEVICES orders them) or GPU UUIDs.",
    )
    env_steps_per_sync: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        1,
        description="K: env steps per collector/learner synchronisation. 1 is the exact contract, and the "
        "only one this unilab's executor runs (K > 1 is refused at plan time, rule `sync.action-dependency`).",
    )
    inference_slot_capacity: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        1, description="Action requests the learner serves per sync; 1 with K=1."
    )
    action_dependency: Literal["synchronous", "precommitted_sequence"] | None = Field(
        None,
        description="How actions relate to observations; K=1 resolves to `synchronous`, K>1 must say. "
        "`precommitted_sequence` is part of the spec language but not implemented yet (refused at plan time).",
    )
    cuda_process_sharing: Literal["none", "mps"] = Field(
        "none", description="`mps`: collector and learner are clients of a running MPS daemon for their GPU."
    )
    mps_service: str | None = Field(
        None, description="Name of the `unilab mps` service to use; unset: the one registered for the GPU."
    )
    dp_gradient_wire_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Dtype of gradients on the all-reduce wire (data parallel only)."
    )
    learner_graph: Literal["auto", "on", "off"] = Field(
        "auto", description="CUDA graph of the whole learner update cycle."
    )
    physics_graph: Literal["auto", "on", "off"] = Field(
        "auto", description="Warp graph of the MuJoCo Warp step and reset (CUDA)."
    )
    collector_graph: Literal["off", "update_state"] = Field(
        "off", description="Experimental CUDA graph of the task's update body."
    )
    collector_cpu_ids: list[list[Annotated[int, Field(ge=0, le=MAX_COUNT)]]] | None = Field(
        None, description="Per-rank collector CPU blocks; unset: the affinity set split evenly."
    )
    torch_threads: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = Field(
        "auto", description="Learner torch intra-op threads per rank (`auto`: from the CPU budget)."
    )
    nccl_transport: Literal["default", "loopback"] = Field(
        "default", description="`loopback`: NCCL over the loopback socket (single-node debugging)."
    )


class Spec(_Section):
    """A unilab run spec (TOML)."""

    schema_version: Literal[1] = Field(description="Spec format version; this unilab reads 1.")
    run: RunSpec = Field(description="The run: name, seed, budget, output, checkpoints, logging.")
    task: TaskSection = Field(
        description=f"What to learn: {', '.join(f'`{n}`' for n in TASK_MODELS)}, chosen by `name`, and its "
        "settings (robot, number of envs, episode, rewards)."
    )
    sim: SimSpec = Field(default_factory=SimSpec, description="Physics: backend, timestep, decimation, workers.")
    algo: AlgoSection = Field(
        description=f"The learner: {', '.join(f'`{n}`' for n in ALGO_MODELS)}, chosen by `name`, and its settings."
    )
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="Execution: devices, K, CUDA sharing, gradient wire, graphs."
    )

    def device_list(self) -> list[str | int]:
        d = self.training.devices
        return list(d) if isinstance(d, list) else [d]
