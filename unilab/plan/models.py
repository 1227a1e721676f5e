"""The execution plan: everything `unilab apply` needs, resolved against one host's facts.

Frozen and free of timestamps: the same spec and facts give byte-identical renderings, and
`plan_id` is the sha256 of the canonical body, so a plan is its own content address.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, WrapValidator, create_model, model_validator

from unilab.sections import TaskSpecBase
from unilab.sim.backends import backend_def
from unilab.spec.models import AlgoSection, RunSpec, SimSpec, TaskSpec, chosen_by_name
from unilab.tasks.registry import TASKS, plugin_task_def, task_def

if TYPE_CHECKING:
    from unilab.tasks.taskdef import TaskDef

PLAN_SCHEMA_VERSION = 1
BF16_MIN_GROUP_ELEMENTS = 1024


class _P(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlanHeader(_P):
    schema_version: Literal[1] = Field(1, description="Version of this schema (schemas/plan.v1.json).")
    unilab_version: str = Field(description="unilab version that compiled the plan.")
    spec_digest: str = Field(description="sha256 of the validated spec's canonical JSON.")
    host_fingerprint: str = Field(description="sha256 of the host facts this plan depends on ([host_facts]).")


class RobotPlan(_P):
    source: str = Field(description="`builtin` or the path of the user's MJCF.")
    sha256: str | None = Field(
        None,
        description="Digest of the user's MJCF: of the file, or when it has includes or asset files, of all of them.",
    )
    actuators: Literal["unilab_pd", "file"] = Field(description="Whose position actuators drive the joints.")


class MotionPlan(_P):
    source: str = Field(description="`builtin:NAME` or the path of the .npz motion.")
    sha256: str = Field(description="Digest of the motion file; apply refuses a file that no longer matches.")
    num_frames: int = Field(description="Frames in the motion.")
    fps: float = Field(description="Its frame rate.")


class InitFromPlan(_P):
    checkpoint: str = Field(
        description="The checkpoint file the run starts from (relative to the working directory of `unilab plan` "
        "when under it); apply refuses a file that no longer has this sha256."
    )
    sha256: str = Field(description="Its digest, as its run recorded it.")
    env_steps: int = Field(description="Env steps its run had trained when it saved it.")
    plan_id: str = Field(description="The plan of the run that wrote it.")


class RunPlan(RunSpec):
    """The spec's `[run]` plus the env steps the run will actually collect."""

    init_from: InitFromPlan | None = Field(  # type: ignore[assignment]
        None, description="The checkpoint whose policy the run starts from (null: a fresh start)."
    )

    effective_env_steps: int = Field(
        description="Env steps an uninterrupted run collects, summed over ranks: each rank's share "
        "`total_env_steps // world_size` rounded up to whole collection units (PPO: a rollout of "
        "`num_steps_per_env` x `num_envs`; the replay learners: one env step of `num_envs`), times the world size."
    )


class _TaskResolved(_P):
    """What the plan adds to the spec's `[task]`. Each task's plan model lists it first among its
    bases, so that its fields follow the spec's keys (and `reward_weights` keeps the spec's place)."""

    reward_weights: dict[str, Annotated[float, Field(ge=-1e6, le=1e6)]] | None = Field(
        None,
        description="Every reward term's weight per second, in the task's order: the task's defaults with the "
        "spec's `task.reward_weights` applied (absent from plans made before the key: the defaults).",
    )
    robot: RobotPlan = Field(description="The robot model the task simulates.")
    control_dt: float = Field(description="sim.timestep * sim.decimation, seconds.")
    max_episode_steps: int = Field(
        description="ceil(episode_length_s / control_dt), a ratio within 1e-9 (relative) of a whole number "
        "taken as that number; at least 1 (unilab.tasks.timing, which the task uses too)."
    )
    reference_motion: MotionPlan | None = Field(
        None, description="The clip the task follows, pinned by digest (a task with a reference motion)."
    )

    @model_validator(mode="after")
    def _every_reward_term(self) -> _TaskResolved:
        """What compile writes, checked again on every plan read: a weight for each of the task's
        reward terms and no other (a plan edited by hand, its plan_id recomputed, must not run
        weights it does not show)."""

        task = cast("TaskSpec", self)  # every task plan model is one of the spec's task models too
        if self.reward_weights is not None:
            terms = list(task_def(task).reward_weights(task))
            if sorted(self.reward_weights) != sorted(terms):
                raise ValueError(f"reward_weights must name each of {task.name}'s reward terms once: {terms}")
        if (self.reference_motion is None) != (task_def(task).motion(task) is None):
            raise ValueError(f"reference_motion is the clip of a task with a motion: {task.name}")
        return self


def _plan_model(d: TaskDef, cls_name: str, doc: str) -> type[_TaskResolved]:
    """A task's plan model: its spec model with what the plan resolves (`_TaskResolved` first, so
    that the spec's keys come first) and the task's own plan-only keys (`TaskDef.plan_fields`)."""
    model = create_model(  # type: ignore[call-overload]
        cls_name, __base__=(_TaskResolved, d.spec), __module__=__name__, __doc__=doc, **d.plan_fields
    )
    return cast("type[_TaskResolved]", model)


# Each built-in task's plan model by its `name` (G1WalkSpec's is G1WalkPlan), a name of this module
# so that a plan pickled to a collector process finds its class.
_BUILTIN_PLANS: dict[str, type[_TaskResolved]] = {
    name: _plan_model(
        d,
        d.spec.__name__.removesuffix("Spec") + "Plan",
        f"The spec's {name} `[task]` plus what the plan resolved from it.",
    )
    for name, d in TASKS.items()
}
globals().update({m.__name__: m for m in _BUILTIN_PLANS.values()})
if TYPE_CHECKING:

    class TaskPlan(_TaskResolved, TaskSpecBase):  # what the type checker knows of any plan's `[task]`
        pass

else:  # the discriminated union of the built-in tasks' plan models: their JSON Schema and messages
    TaskPlan = Annotated[Union[tuple(_BUILTIN_PLANS.values())], Field(discriminator="name")]  # noqa: UP007

# A plugin task's plan model is made from its spec model, as the built-in ones above, under a
# name this module answers (`__getattr__`): a plan pickled to a collector process finds its class.
_PLUGIN_PLAN_PREFIX = "PluginTaskPlan_"


@functools.cache
def plugin_task_plan(name: str) -> type[_TaskResolved] | None:
    """The plan model of the installed plugin task ``name`` (unilab.plugins), or None."""
    d = plugin_task_def(name)
    if d is None:
        return None
    doc = f"The spec's {name} `[task]` (a plugin's) plus what the plan resolved from it."
    return _plan_model(d, _PLUGIN_PLAN_PREFIX + name, doc)


def __getattr__(attr: str) -> Any:
    if attr.startswith(_PLUGIN_PLAN_PREFIX):
        model = plugin_task_plan(attr.removeprefix(_PLUGIN_PLAN_PREFIX))
        if model is not None:
            return model
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


# The plan's `[task]`: a built-in task's plan model or a plugin's, serialized as the model it is.
TaskPlanSection = Annotated[SerializeAsAny[TaskPlan], WrapValidator(chosen_by_name(_BUILTIN_PLANS, plugin_task_plan))]


class SimPlan(SimSpec):
    """The spec's `[sim]` plus the resolved worker count."""

    workers_per_rank: int = Field(description="CPU backend worker processes per rank (1 for mjwarp).")


class TopologyPlan(_P):
    world_size: int = Field(description="Data-parallel ranks.")
    process_group_backend: Literal["gloo", "nccl"] = Field(
        description="torch.distributed backend of the ranks' process group (gloo on CPU, NCCL on GPUs)."
    )
    launcher: Literal["single_process", "elastic"] = Field(
        description="`elastic`: torch.distributed elastic launch of one process per rank."
    )


class RankMps(_P):
    service: str = Field(description="Name of the MPS service (`unilab mps start --name`) the rank is a client of.")
    pipe_directory: str = Field(description="Its CUDA_MPS_PIPE_DIRECTORY, given to the rank's processes.")
    log_directory: str = Field(description="Its CUDA_MPS_LOG_DIRECTORY.")
    daemon_pid: int | None = Field(None, description="Pid of its control daemon when the plan was made.")


class RankPlan(_P):
    rank: int = Field(description="Data-parallel rank.")
    device: Literal["cpu", "cuda"] = Field(description="Where the rank's learner runs.")
    gpu_uuid: str | None = Field(None, description="The rank's GPU, by UUID (null on CPU): the only GPU it sees.")
    gpu_name: str | None = Field(None, description="That GPU's name.")
    seed: int = Field(description="The rank's seed: run.seed + rank.")
    collector_cpu_ids: list[int] = Field(description="CPUs the rank's collector is pinned to.")
    learner_cpu_ids: list[int] = Field(
        default_factory=list,
        description="CPUs the rank's learner process is pinned to: its own, or the whole block with the "
        "collector's (learner.threads_reason says which); empty: not pinned.",
    )
    torch_threads: int = Field(description="torch intra-op threads of the rank's learner.")
    mps: RankMps | None = Field(None, description="The MPS service of the rank's GPU (null: no MPS).")


class SyncPlan(_P):
    env_steps_per_sync: int = Field(description="K: env steps the collector runs per collector/learner sync.")
    inference_slot_capacity: int = Field(description="Action requests the learner serves per sync.")
    action_dependency: Literal["synchronous", "precommitted_sequence"] = Field(
        description="How actions relate to observations: `synchronous` is obs[t] -> action[t] -> step."
    )


class SharingPlan(_P):
    configured: Literal["none", "mps"] = Field(description="CUDA process sharing the spec asked for.")
    effective: Literal["none", "mps"] = Field(description="What the plan runs (`none` on CPU ranks).")


class WirePlan(_P):
    dtype: Literal["float32", "bfloat16"] = Field(description="Gradient dtype on the all-reduce wire.")
    active: bool = Field(description="False with one rank: there is no gradient all-reduce.")
    bf16_min_group_elements: int = Field(
        BF16_MIN_GROUP_ELEMENTS,
        description="With bfloat16: FP32 gradient groups of at least this many elements travel as BF16.",
    )
    reduction: str = Field(description="How packed gradients are reduced and restored.")


class GraphPlan(_P):
    requested: str = Field(
        description="What the spec asked for: `auto`, `on` or `off`; the collector graph: `off` or `update_state`."
    )
    enabled: bool = Field(description="Whether the run uses the graph.")
    disable_reason: str | None = Field(None, description="Why not (null when enabled).")


class GraphsPlan(_P):
    learner: GraphPlan = Field(description="The learner's update cycle, collectives included, as a CUDA graph.")
    physics: GraphPlan = Field(description="MuJoCo Warp's step as a CUDA graph (wp.ScopedCapture).")
    collector: GraphPlan = Field(description="The experimental collector update-state graph.")


class PrecisionPlan(_P):
    requested: Literal["auto", "float32", "bfloat16"] = Field(description="The spec's `algo.precision`.")
    effective: Literal["float32", "bfloat16"] = Field(
        description="What the learner's update computes in: matrix products and activations (parameters, "
        "optimizer state and losses are float32 either way)."
    )
    reason: str = Field(description="Why: the request, or what `auto` read in the host facts.")


class LearnerPlan(_P):
    precision: PrecisionPlan = Field(description="The learner's compute precision.")
    threads_requested: Literal["auto"] | int = Field(description="The spec's `training.torch_threads`.")
    threads_reason: str = Field(
        description="Why the ranks' `torch_threads` and `learner_cpu_ids` are what they are (rank 0's block)."
    )


class EnvVarPlan(_P):
    name: str = Field(description="Environment variable given to the ranks.")
    value: str = Field(description="Its value.")
    source: Literal["plan", "user"] = Field(description="`user`: taken from the environment, which wins.")


class PlanBody(_P):
    plan: PlanHeader = Field(description="Which unilab compiled the plan, from which spec, for which host facts.")
    run: RunPlan = Field(description="The spec's [run], resolved.")
    task: TaskPlanSection = Field(description="The spec's [task], resolved: robot and motion files pinned by digest.")
    sim: SimPlan = Field(description="The spec's [sim], resolved.")
    algo: AlgoSection = Field(description="The spec's [algo] with every default filled in.")
    learner: LearnerPlan | None = Field(
        None,
        description="The learner's precision and thread decisions (absent from plans made before unilab made "
        "them: float32, and the ranks' torch_threads).",
    )
    topology: TopologyPlan = Field(description="Ranks and how they are launched and connected.")
    sync: SyncPlan = Field(description="The collector/learner synchronisation contract.")
    cuda_process_sharing: SharingPlan = Field(description="CUDA process sharing (none or MPS).")
    gradient_wire: WirePlan = Field(description="How gradients travel between ranks.")
    graphs: GraphsPlan = Field(description="CUDA graph boundaries: requested, enabled, and why not.")
    ranks: list[RankPlan] = Field(description="Per rank: device, GPU, seed, CPU sets, threads and MPS service.")
    nccl_env: list[EnvVarPlan] = Field(
        default_factory=list, description="NCCL environment of the ranks (GPU data parallel only)."
    )
    host_facts: dict[str, Any] = Field(description="The host facts the plan depends on, by key path.")


class Plan(PlanBody):
    """A compiled plan. `plan_id` is the sha256 of the canonical JSON of everything else."""

    plan_id: str = Field(description="sha256 of the canonical JSON of everything else: the plan's content address.")

    @model_validator(mode="after")
    def _ranks_fit(self) -> Plan:
        """What compile guarantees, checked again on every plan read: a plan edited by hand (its
        plan_id recomputed) must not reach the executor with ranks it cannot run."""
        n = self.topology.world_size
        if [r.rank for r in self.ranks] != list(range(n)):
            raise ValueError(f"ranks must be numbered 0..{n - 1}, one per rank of topology.world_size {n}")
        affinity = self.host_facts.get("cpu.affinity")
        if isinstance(affinity, list):
            for r in self.ranks:
                outside = sorted(set(r.collector_cpu_ids + r.learner_cpu_ids) - set(affinity))
                if outside or not r.collector_cpu_ids:
                    raise ValueError(
                        f"rank {r.rank}'s CPUs {outside} are outside the host's CPU affinity {affinity}"
                        if outside
                        else f"rank {r.rank} has no collector CPU"
                    )
        return self

    def collector_device(self, rank: int) -> str:
        """The torch device of ``rank``'s collector: its GPU (the only one the rank process sees)
        for a CUDA backend (MuJoCo Warp) on a CUDA rank, else the CPU -- CPU MuJoCo physics stays
        on the CPU when the learner is on a GPU."""
        return "cuda:0" if backend_def(self.sim).cuda and self.ranks[rank].device == "cuda" else "cpu"
