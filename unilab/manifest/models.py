"""The run manifest: the record of what actually ran, written at start, at each checkpoint and at
the end, validated against schemas/manifest.v1.json before every write."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from unilab.sim.backends import BACKEND_NAMES, BACKEND_TITLES

if TYPE_CHECKING:
    BackendName = str
else:  # each registered backend's name (unilab.sim.backends)
    BackendName = Literal[BACKEND_NAMES]

MANIFEST_SCHEMA_VERSION = 1
SHA256 = r"^sha256:[0-9a-f]{64}$"
UTC_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(_M):
    os: str = Field(description="Operating system, release and machine of the host rank 0 ran on.")
    cpu: str = Field(description="CPU model, as the host probe read it.")
    python: str = Field(description="Python version of the run's processes.")
    unilab: str = Field(description="unilab version that ran.")
    git_commit: str | None = Field(
        None, description="Commit of the unilab checkout the run's code came from (null when not run from a checkout)."
    )
    git_dirty: bool | None = Field(
        None,
        description="That checkout's unilab/ package had uncommitted changes (modified or new files): the code "
        "that ran is not exactly git_commit's (null when not run from a checkout).",
    )
    git_diff: str | None = Field(
        None,
        description="With git_dirty: the file in the run directory (code/<session start>.patch) holding that "
        "checkout's uncommitted changes to unilab/ as a patch on git_commit (tracked files, then new ones); null "
        "when clean, not a checkout, or git could not say.",
    )
    git_diff_sha256: str | None = Field(None, description="sha256 of the git_diff file as written.")
    git_diff_truncated: bool | None = Field(
        None, description="The patch was cut at 1 MiB: git_diff holds its beginning only (null: no patch)."
    )
    torch: str | None = Field(None, description="torch version the learner imported.")
    cuda_runtime: str | None = Field(None, description="CUDA runtime torch was built with (null on CPU builds).")
    warp_lang: str | None = Field(None, description="warp-lang version installed (null: not installed).")
    mujoco: str | None = Field(None, description="MuJoCo version installed.")
    mujoco_warp: str | None = Field(None, description="MuJoCo Warp version installed (null: not installed).")
    gpu_names: list[str] = Field(default_factory=list, description="Names of the host's NVIDIA GPUs (empty: none).")
    driver_version: str | None = Field(None, description="NVIDIA driver version (null: no driver).")
    working_dir: str | None = Field(
        None,
        description="Working directory of the run's (latest) `unilab apply`: the plan's relative paths resolve there.",
    )


class Topology(_M):
    world_size: int = Field(description="Data-parallel ranks of the run.")
    process_group_backend: Literal["gloo", "nccl"] = Field(
        description="torch.distributed backend of the ranks' process group (gloo on CPU, NCCL on GPUs)."
    )
    launcher: str = Field(
        description="`single_process`: one rank in the `unilab apply` process; `elastic`: one process per rank "
        "through torch.distributed's elastic launcher (or torchrun)."
    )


class RankEvidence(_M):
    rank: int = Field(description="Data-parallel rank; rank 0 records the run.")
    device: str = Field(description="The rank's learner device, `cpu` or `cuda`.")
    gpu_uuid: str | None = Field(None, description="UUID of the GPU the rank ran on (null on CPU).")
    learner_pid: int = Field(description="Process id of the rank's learner.")
    collector_pid: int | None = Field(None, description="Process id of the rank's collector process.")
    collector_cpu_ids_planned: list[int] = Field(description="CPUs the plan pinned the rank's collector to.")
    collector_cpu_ids_applied: list[int] = Field(description="Read back with os.sched_getaffinity in the collector.")
    learner_cpu_ids_planned: list[int] = Field(
        default_factory=list, description="CPUs the plan reserved for the learner (empty: not pinned)."
    )
    learner_cpu_ids_applied: list[int] = Field(
        default_factory=list,
        description="Read back with os.sched_getaffinity in the learner (its whole CPU set when not pinned).",
    )
    physics_workers: int = Field(
        description="CPU MuJoCo worker processes stepping the rank's worlds (1 for MuJoCo Warp: the device steps them)."
    )
    torch_threads: int = Field(description="torch.get_num_threads() in the learner.")
    learner_precision: Literal["float32", "bfloat16"] | None = Field(
        None,
        description="What the learner's update computed in (the plan's learner.precision.effective; null: PPO, "
        "or a manifest written before unilab recorded it).",
    )
    learner_allocator: str | None = Field(
        None,
        description="How the learner process's allocator was set (unilab.run.cpu_tuning): `glibc heap kept "
        "(mallopt)` or why it kept its defaults; null: PPO, or a manifest written before unilab recorded it.",
    )
    param_digest: str | None = Field(
        None, description="sha256 of the learner's parameters at the end of the run (identical across ranks)."
    )
    mps_service: str | None = Field(None, description="The MPS service this rank's processes are clients of.")
    mps_control_pipe: str | None = Field(None, description="CUDA_MPS_PIPE_DIRECTORY given to the rank's processes.")
    mps_daemon_pid: int | None = Field(None, description="Pid of that MPS service's control daemon.")
    mps_server_pids: list[int] = Field(default_factory=list, description="MPS servers seen after CUDA initialised.")
    mps_validated: bool | None = Field(None, description="Re-checked before start and attached after CUDA init.")


class GraphEvidence(_M):
    requested: str = Field(
        description="What the spec asked for (the plan's `requested`): `auto`, `on` or `off`; the "
        "collector graph: `off` or `update_state`."
    )
    enabled: bool = Field(description="Whether the graph was in effect (the plan's decision, then what ran).")
    disable_reason: str | None = Field(None, description="Why it was not enabled (null when enabled).")
    replays: int = Field(0, description="Graph replays: the steps or update cycles that ran through the graph.")
    mode: Literal["cuda_graph", "eager_twin"] | None = Field(None, description="How a graph runner ran.")
    state: Literal["warming", "captured", "invalidated", "failed"] | None = Field(
        None, description="A graph runner's state when this manifest was written."
    )
    captures: int = Field(0, description="Captures (learner: one per cycle kind), again after an invalidation.")
    eager_updates: int = Field(0, description="Warm-up updates (or collector steps) run eagerly before capture.")
    invalidations: int = Field(0, description="Times a captured graph was dropped and captured again.")
    last_invalidation: str | None = Field(None, description="Why the last invalidation happened.")
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
    configured: Literal["none", "mps"] = Field(description="CUDA process sharing the plan configured.")
    effective: Literal["none", "mps"] = Field(
        description="What ran: `mps` only if every rank's processes were confirmed clients of their MPS service."
    )


class BackendDiagnostics(_M):
    physics: BackendName = Field(description=f"Physics backend: {BACKEND_TITLES}.")
    physics_graph: GraphEvidence = Field(description="MuJoCo Warp's step captured as a CUDA graph.")
    learner_graph: GraphEvidence = Field(description="The learner's update cycle captured as a CUDA graph.")
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
    world_size: int = Field(description="Ranks whose gradients were all-reduced.")
    process_group_backend: Literal["gloo", "nccl"] = Field(description="Backend the all-reduces ran on.")
    wire_dtype: Literal["float32", "bfloat16"] = Field(description="Gradient dtype on the all-reduce wire.")
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
    episodes: int = Field(0, ge=0, description="Episodes ended on rank 0's envs since the run began.")
    nonfinite_resets: int = Field(
        0, ge=0, description="Worlds rank 0's collector reset because their state went non-finite."
    )
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
    learner_updates_on_shared_cpus: float = Field(
        0.0,
        description="Share of this session's updates the learner ran on all its planned threads, the collector's "
        "CPUs included, because the collector was waiting for its next action (0 when the plan gives the learner "
        "CPUs of its own; unilab.run.offpolicy.LearnerThreads).",
    )
    learner_wait_s: float = Field(0.0, description="Learner time spent waiting for the collector.")
    collector_wait_s: float = Field(0.0, description="Collector time spent waiting for actions.")


class Metrics(_M):
    episode_return_mean: float | None = Field(
        None,
        description="Mean return of the episodes that ended on rank 0 in the last log interval in which any ended "
        "(null: none has ended yet).",
    )
    episode_length_mean: float | None = Field(
        None, description="Their mean length, in env steps (null: no episode has ended yet)."
    )


class CheckpointRecord(_M):
    path: str = Field(description="Relative to the run directory, e.g. `checkpoints/ckpt-0000000050000.pt`.")
    env_steps: int = Field(ge=0, description="Env steps of all ranks when it was written.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Of the checkpoint file's bytes.")


class FirstError(_M):
    where: str = Field(description="Process that failed first, e.g. `rank0.collector`.")
    message: str = Field(description="The error, in one line.")


class ApplySession(_M):
    """One `unilab apply` of a run: the first, then each `--resume`."""

    started_at: str = Field(pattern=UTC_TIME, description="When this apply started (UTC, ISO 8601).")
    plan_id: str = Field(pattern=SHA256, description="The plan this apply ran.")
    host_fingerprint: str | None = Field(
        None, description="sha256 of the host facts that plan was compiled against (null: not recorded)."
    )
    hostname: str | None = Field(None, description="Host the apply ran on (null: not recorded).")
    pid: int | None = Field(None, description="Process id of the apply (null: not recorded).")
    resumed_from: str | None = Field(None, description="Checkpoint this apply continued from (null: the first).")
    ended: Literal["running", "succeeded", "failed", "interrupted", "killed"] = Field(
        description="How it ended: the manifest's status at its end, or `killed`: it died without a word "
        "(kill -9, the OOM killer, a lost machine) and left the manifest saying `running`, which the next "
        "resume found."
    )


class Manifest(_M):
    """manifest.json of a run directory."""

    schema_version: Literal[1] = Field(1, description="Version of this schema (schemas/manifest.v1.json).")
    run_id: str = Field(description="The run directory's name, `<run.name>-<UTC start time>`.")
    plan_id: str = Field(pattern=SHA256, description="The plan's content address.")
    spec_digest: str = Field(pattern=SHA256, description="sha256 of the validated spec's canonical JSON.")
    task: str = Field(description="Task name (`task.name`).")
    algo: str = Field(description="Learner algorithm (`algo.name`).")
    status: Literal["running", "succeeded", "failed", "interrupted"] = Field(
        description="`running` while the run goes on (or when it died without a word: kill -9); then "
        "`succeeded`, `failed` (see first_error) or `interrupted` (a stop request; resumable)."
    )
    started_at: str = Field(pattern=UTC_TIME, description="UTC, ISO 8601.")
    updated_at: str = Field(pattern=UTC_TIME, description="When this manifest was last written (UTC).")
    finished_at: str | None = Field(None, pattern=UTC_TIME, description="When the run ended (null while running).")
    resumed_from: str | None = Field(None, description="Checkpoint this run continued from.")
    provenance: Provenance = Field(description="The software and host that ran it.")
    topology: Topology = Field(description="Ranks and how they were launched and connected.")
    ranks: list[RankEvidence] = Field(
        default_factory=list, description="Per rank: its device, processes and CPU sets as planned and as applied."
    )
    backend: BackendDiagnostics = Field(description="Physics backend, graphs and physics warnings.")
    cuda_process_sharing: SharingEvidence = Field(description="CUDA process sharing (none or MPS), planned and real.")
    data_parallel: DataParallelEvidence | None = Field(
        None, description="Gradient all-reduce evidence (null with one rank)."
    )
    counters: Counters = Field(default_factory=Counters, description="Work done.")
    timing: Timing = Field(default_factory=Timing, description="Where the time went.")
    metrics: Metrics = Field(default_factory=Metrics, description="Training progress at the last log line.")
    checkpoints: list[CheckpointRecord] = Field(
        default_factory=list, description="Checkpoints the run keeps, oldest first, each with its sha256."
    )
    first_error: FirstError | None = Field(None, description="The first failure of a failed run (null otherwise).")
    sessions: list[ApplySession] = Field(
        default_factory=list,
        description="Every apply of this run, oldest first; the last is this one (empty in manifests written "
        "before sessions were recorded).",
    )

    def recorded_sessions(self) -> list[ApplySession]:
        """The sessions, or for a manifest written before they were recorded the one its own fields
        describe (pid and host unknown)."""
        return list(self.sessions) or [
            ApplySession(
                started_at=self.started_at, plan_id=self.plan_id, resumed_from=self.resumed_from, ended=self.status
            )
        ]
