"""The run manifest: the record of what actually ran, written at start, at each checkpoint and at
the end, validated against schemas/manifest.v1.json before every write."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_SCHEMA_VERSION = 1
SHA256 = r"^sha256:[0-9a-f]{64}$"
UTC_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(_M):
    os: str
    cpu: str
    python: str
    unilab: str
    git_commit: str | None = Field(
        None, description="Commit of the unilab checkout the run's code came from (null when not run from a checkout)."
    )
    git_dirty: bool | None = Field(
        None,
        description="That checkout's unilab/ package had uncommitted changes (modified or new files): the code "
        "that ran is not exactly git_commit's (null when not run from a checkout).",
    )
    torch: str | None = None
    cuda_runtime: str | None = Field(None, description="CUDA runtime torch was built with (null on CPU builds).")
    warp_lang: str | None = None
    mujoco: str | None = None
    mujoco_warp: str | None = None
    gpu_names: list[str] = Field(default_factory=list)
    driver_version: str | None = None
    working_dir: str | None = Field(
        None,
        description="Working directory of the run's (latest) `unilab apply`: the plan's relative paths resolve there.",
    )


class Topology(_M):
    world_size: int
    process_group_backend: Literal["gloo", "nccl"]
    launcher: str


class RankEvidence(_M):
    rank: int
    device: str
    gpu_uuid: str | None = None
    learner_pid: int
    collector_pid: int | None = None
    collector_cpu_ids_planned: list[int]
    collector_cpu_ids_applied: list[int] = Field(description="Read back with os.sched_getaffinity in the collector.")
    learner_cpu_ids_planned: list[int] = Field(
        default_factory=list, description="CPUs the plan reserved for the learner (empty: not pinned)."
    )
    learner_cpu_ids_applied: list[int] = Field(
        default_factory=list,
        description="Read back with os.sched_getaffinity in the learner (its whole CPU set when not pinned).",
    )
    physics_workers: int
    torch_threads: int = Field(description="torch.get_num_threads() in the learner.")
    param_digest: str | None = Field(
        None, description="sha256 of the learner's parameters at the end of the run (identical across ranks)."
    )
    mps_service: str | None = Field(None, description="The MPS service this rank's processes are clients of.")
    mps_control_pipe: str | None = Field(None, description="CUDA_MPS_PIPE_DIRECTORY given to the rank's processes.")
    mps_daemon_pid: int | None = None
    mps_server_pids: list[int] = Field(default_factory=list, description="MPS servers seen after CUDA initialised.")
    mps_validated: bool | None = Field(None, description="Re-checked before start and attached after CUDA init.")


class GraphEvidence(_M):
    requested: str
    enabled: bool
    disable_reason: str | None = None
    replays: int = 0
    mode: Literal["cuda_graph", "eager_twin"] | None = Field(None, description="How a graph runner ran.")
    state: Literal["warming", "captured", "invalidated", "failed"] | None = Field(
        None, description="A graph runner's state when this manifest was written."
    )
    captures: int = Field(0, description="Captures (learner: one per cycle kind), again after an invalidation.")
    eager_updates: int = Field(0, description="Warm-up updates (or collector steps) run eagerly before capture.")
    invalidations: int = 0
    last_invalidation: str | None = None
    capture_ids: list[str] = Field(
        default_factory=list, description="Identity of each capture (kind and the tensor addresses it holds, hashed)."
    )
    carriers: list[str] = Field(
        default_factory=list, description="Update-state graph: its carriers, `owner.name:shape:dtype`."
    )
    rng_draw_version: str | None = Field(
        None, description="Update-state graph: the task generator's state digest at capture (the body draws none)."
    )
    allocated_bytes: dict[str, int] = Field(
        default_factory=dict, description="Update-state graph (CUDA): allocator readings and growth over replays."
    )


class SharingEvidence(_M):
    configured: Literal["none", "mps"]
    effective: Literal["none", "mps"]


class BackendDiagnostics(_M):
    physics: Literal["mujoco", "mjwarp"]
    physics_graph: GraphEvidence
    learner_graph: GraphEvidence
    collector_graph: GraphEvidence | None = Field(
        None, description="The experimental collector update-state graph (absent in older manifests)."
    )
    physics_warnings: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Rank 0's physics warnings, only kinds seen (read every 64 syncs): MuJoCo's warning counts "
        "summed over worlds (e.g. `bad_qacc`: a world MuJoCo reset itself), or MuJoCo Warp's worlds whose contact "
        "or constraint buffers overflowed since the start (`overflow_<kind>_worlds`; `nefc`: raise sim.njmax, "
        "`broadphase`/`narrowphase`: raise sim.nconmax). Empty: none.",
    )


class DataParallelEvidence(_M):
    world_size: int
    process_group_backend: Literal["gloo", "nccl"]
    wire_dtype: Literal["float32", "bfloat16"]
    grad_syncs: int = Field(0, description="Packed gradient all-reduces per rank (one per optimizer step).")
    grad_sync_ms_per_update: float = Field(0.0, description="Mean all-reduce wall time per update cycle.")
    wire_bytes_per_sync: dict[str, int] = Field(default_factory=dict, description="Bytes on the wire per optimizer.")
    obs_gather_s: float = Field(0.0, description="Time spent merging normalizer statistics across ranks.")
    params_identical: bool | None = Field(None, description="Whether every rank's final parameter digest matches.")


class Counters(_M):
    env_steps: int = Field(
        0, ge=0, description="Env steps of all envs of all ranks, since the run began (resumes included)."
    )
    syncs: int = Field(
        0, ge=0, description="Collector/learner synchronisations per rank (K env steps of every env each)."
    )
    updates: int = Field(0, ge=0, description="Update cycles per rank (every rank takes the same ones).")
    episodes: int = Field(0, ge=0)
    nonfinite_resets: int = Field(0, ge=0)
    skipped_updates: int = Field(0, ge=0, description="Optimizer steps skipped because a loss was non-finite.")
    # The transition counts audit one process's replay buffer, which a resume starts afresh.
    transitions_produced: int = Field(
        0, ge=0, description="Transitions the collectors produced in this session (a resumed run: since its resume)."
    )
    transitions_stored: int = Field(0, ge=0, description="Transitions stored in the replay buffers in this session.")
    dropped_transitions: int = Field(
        0, description="Produced but neither stored nor non-finite, this session; the runtime's invariant is 0."
    )


class Timing(_M):
    # A resumed run's timing is its last session's, as its transition counters are.
    wall_s: float = Field(0.0, description="Wall time of this session (a resumed run: since the resume).")
    train_s: float = Field(
        0.0, description="Time in the training loop of this session (wall_s less start-up); the rates are over it."
    )
    env_steps_per_s: float = Field(0.0, description="Env steps per second of training in this session, all ranks.")
    updates_per_s: float = Field(0.0, description="Update cycles per second of training in this session, per rank.")
    collector_phases_us: dict[str, float] = Field(
        default_factory=dict, description="Mean microseconds per sync of each collector lifecycle phase."
    )
    collector_phases_cpu_us: dict[str, float] = Field(
        default_factory=dict,
        description="Mean microseconds per sync of the collector thread's CPU time in each lifecycle phase "
        "(physics worker processes and device work are not in it).",
    )
    learner_sample_ms: float = Field(
        0.0, description="Mean wall time of one update's replay sample and batch normalization (off-policy)."
    )
    learner_update_ms: float = Field(
        0.0, description="Mean wall time of one gradient update (the sample excluded; a data-parallel sync included)."
    )
    learner_grad_sync_ms: float = Field(
        0.0,
        description="Mean wall time of one update's data-parallel gradient all-reduces (part of the update); 0 "
        "under the learner graph, where they run inside the replay.",
    )
    learner_wait_s: float = Field(0.0, description="Learner time spent waiting for the collector.")
    collector_wait_s: float = Field(0.0, description="Collector time spent waiting for actions.")


class Metrics(_M):
    episode_return_mean: float | None = None
    episode_length_mean: float | None = None


class CheckpointRecord(_M):
    path: str
    env_steps: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Of the checkpoint file's bytes.")


class FirstError(_M):
    where: str = Field(description="Process that failed first, e.g. `rank0.collector`.")
    message: str


class Manifest(_M):
    """manifest.json of a run directory."""

    schema_version: Literal[1] = 1
    run_id: str
    plan_id: str = Field(pattern=SHA256, description="The plan's content address.")
    spec_digest: str = Field(pattern=SHA256)
    task: str
    algo: str
    status: Literal["running", "succeeded", "failed", "interrupted"]
    started_at: str = Field(pattern=UTC_TIME, description="UTC, ISO 8601.")
    updated_at: str = Field(pattern=UTC_TIME)
    finished_at: str | None = Field(None, pattern=UTC_TIME)
    resumed_from: str | None = Field(None, description="Checkpoint this run continued from.")
    provenance: Provenance
    topology: Topology
    ranks: list[RankEvidence] = Field(default_factory=list)
    backend: BackendDiagnostics
    cuda_process_sharing: SharingEvidence
    data_parallel: DataParallelEvidence | None = None
    counters: Counters = Field(default_factory=Counters)
    timing: Timing = Field(default_factory=Timing)
    metrics: Metrics = Field(default_factory=Metrics)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    first_error: FirstError | None = None
