"""The execution plan: everything `unilab apply` needs, resolved against one host's facts.

Frozen and free of timestamps: the same spec and facts give byte-identical renderings, and
`plan_id` is the sha256 of the canonical body, so a plan is its own content address.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from unilab.spec.models import AlgoSpec, CommandRanges, RunSpec, SimSpec, TaskSpec

PLAN_SCHEMA_VERSION = 1
BF16_MIN_GROUP_ELEMENTS = 1024


class _P(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlanHeader(_P):
    schema_version: Literal[1] = 1
    unilab_version: str
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
    sha256: str
    num_frames: int
    fps: float


class RunPlan(RunSpec):
    """The spec's `[run]` plus the env steps the run will actually collect."""

    effective_env_steps: int = Field(
        description="Env steps an uninterrupted run collects, summed over ranks: each rank's share "
        "`total_env_steps // world_size` rounded up to whole collection units (PPO: a rollout of "
        "`num_steps_per_env` x `num_envs`; sac, flashsac: one env step of `num_envs`), times the world size."
    )


class TaskPlan(TaskSpec):
    """The spec's `[task]` plus what the plan resolved from it."""

    # Only g1_walk draws velocity commands; other tasks' plans leave the ranges out rather than
    # show defaults that do nothing.
    commands: CommandRanges | None = Field(  # type: ignore[assignment]
        None, description="Velocity command ranges (g1_walk; absent for the other tasks)."
    )
    robot: RobotPlan
    reference_motion: MotionPlan | None = None
    control_dt: float = Field(description="sim.timestep * sim.decimation, seconds.")
    max_episode_steps: int = Field(
        description="ceil(episode_length_s / control_dt), a ratio within 1e-9 (relative) of a whole number "
        "taken as that number; at least 1 (unilab.tasks.timing, which the task uses too)."
    )


class SimPlan(SimSpec):
    """The spec's `[sim]` plus the resolved worker count."""

    workers_per_rank: int = Field(description="CPU backend worker processes per rank (1 for mjwarp).")


class TopologyPlan(_P):
    world_size: int
    process_group_backend: Literal["gloo", "nccl"]
    launcher: Literal["single_process", "elastic"] = Field(
        description="`elastic`: torch.distributed elastic launch of one process per rank."
    )


class RankMps(_P):
    service: str
    pipe_directory: str
    log_directory: str
    daemon_pid: int | None = None


class RankPlan(_P):
    rank: int
    device: Literal["cpu", "cuda"]
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    seed: int
    collector_cpu_ids: list[int] = Field(description="CPUs the rank's collector is pinned to.")
    learner_cpu_ids: list[int] = Field(
        default_factory=list,
        description="CPUs reserved for the rank's learner process (empty: not pinned, it shares the collector's).",
    )
    torch_threads: int
    mps: RankMps | None = None


class SyncPlan(_P):
    env_steps_per_sync: int
    inference_slot_capacity: int
    action_dependency: Literal["synchronous", "precommitted_sequence"]


class SharingPlan(_P):
    configured: Literal["none", "mps"]
    effective: Literal["none", "mps"]


class WirePlan(_P):
    dtype: Literal["float32", "bfloat16"]
    active: bool = Field(description="False with one rank: there is no gradient all-reduce.")
    bf16_min_group_elements: int = BF16_MIN_GROUP_ELEMENTS
    reduction: str = Field(description="How packed gradients are reduced and restored.")


class GraphPlan(_P):
    requested: str
    enabled: bool
    disable_reason: str | None = None


class GraphsPlan(_P):
    learner: GraphPlan
    physics: GraphPlan
    collector: GraphPlan


class EnvVarPlan(_P):
    name: str
    value: str
    source: Literal["plan", "user"] = Field(description="`user`: taken from the environment, which wins.")


class PlanBody(_P):
    plan: PlanHeader
    run: RunPlan
    task: TaskPlan
    sim: SimPlan
    algo: AlgoSpec
    topology: TopologyPlan
    sync: SyncPlan
    cuda_process_sharing: SharingPlan
    gradient_wire: WirePlan
    graphs: GraphsPlan
    ranks: list[RankPlan]
    nccl_env: list[EnvVarPlan] = Field(default_factory=list)
    host_facts: dict[str, Any] = Field(description="The host facts the plan depends on, by key path.")


class Plan(PlanBody):
    """A compiled plan. `plan_id` is the sha256 of the canonical JSON of everything else."""

    plan_id: str

    def collector_device(self, rank: int) -> str:
        """The torch device of ``rank``'s collector: its GPU (the only one the rank process sees)
        for MuJoCo Warp on a CUDA rank, else the CPU -- CPU MuJoCo physics stays on the CPU when
        the learner is on a GPU."""
        return "cuda:0" if self.sim.backend == "mjwarp" and self.ranks[rank].device == "cuda" else "cpu"
