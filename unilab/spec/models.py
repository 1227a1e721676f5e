"""The run spec: what a user writes in TOML. Pydantic v2, frozen, unknown keys refused.

Validation here is about the spec alone (types, ranges, shapes), with one exception made only
while a spec is read (``SPEC_CONTEXT``): a `~NAME` path must name a user of this host. Whether the
host can honour a request is decided later, by the plan's rules, against recorded host facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    TypeAdapter,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)

from unilab import plugins
from unilab.algos.registry import ALGOS
from unilab.sections import (
    MAX_COUNT,
    MAX_SECONDS,
    AlgoSpecBase,
    Section,
    TaskSpecBase,
    algo_record_problem,
    home_resolves,
    task_record_problem,
)
from unilab.sim.backends import BACKEND_NAMES, BACKEND_TITLES, CPU_BACKEND
from unilab.tasks.registry import TASKS

SPEC_SCHEMA_VERSION = 1
if TYPE_CHECKING:
    BackendName = str
else:  # each registered backend's name (unilab.sim.backends)
    BackendName = Literal[BACKEND_NAMES]


class WandbSpec(Section):
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


class RunSpec(Section):
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
        return home_resolves(v, info)

    @field_validator("init_from")
    @classmethod
    def _init_home(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else home_resolves(v, info)


# Each built-in `[task]` model by its `name`, in the registry's order (unilab.tasks.registry).
TASK_MODELS: dict[str, type[TaskSpecBase]] = {name: d.spec for name, d in TASKS.items()}
if TYPE_CHECKING:
    TaskSpec = TaskSpecBase
else:  # the discriminated union of the built-in tasks' models: their JSON Schema and messages
    TaskSpec = Annotated[Union[tuple(TASK_MODELS.values())], Field(discriminator="name")]  # noqa: UP007


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


class SimSpec(Section):
    """`[sim]`: physics engine and time stepping."""

    backend: BackendName = Field(CPU_BACKEND.name, description=f"{BACKEND_TITLES}.")
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


# Each built-in `[algo]` model by its `name`, in the registry's order (unilab.algos.registry).
ALGO_MODELS: dict[str, type[AlgoSpecBase]] = {name: d.spec for name, d in ALGOS.items()}
if TYPE_CHECKING:

    class AlgoSpec(AlgoSpecBase):  # what the type checker knows of any `[algo]`: its name and the shared keys
        name: str

else:
    AlgoSpec = Annotated[Union[tuple(ALGO_MODELS.values())], Field(discriminator="name")]  # noqa: UP007


def plugin_algo_model(name: str) -> type[AlgoSpecBase] | None:
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


class TrainingSpec(Section):
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


class Spec(Section):
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
