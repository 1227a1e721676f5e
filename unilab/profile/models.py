"""profile.json: the record `unilab profile` writes (schema exported by `unilab schema`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from unilab.manifest.models import Provenance

PROFILE_SCHEMA_VERSION = 1


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Spread(_M):
    """Median and range over an arm's repeats (never pooled across arms)."""

    median: float
    min: float
    max: float
    samples: list[float] = Field(description="One value per repeat, in run order.")


class WindowSample(_M):
    """One run's measured window: differences of the manifest's cumulative timing between the
    end of warm-up (the checkpoint manifest at the warm-up boundary) and the end of the run."""

    syncs: int
    updates: int
    wall_s: float
    collector_phases_us: dict[str, float] = Field(description="Mean microseconds per sync of each collector phase.")
    collector_phases_cpu_us: dict[str, float] = Field(
        default_factory=dict,
        description="Mean microseconds per sync of the collector thread's CPU time in each phase.",
    )
    collector_wait_us: float = Field(description="Collector time waiting for actions, per sync.")
    learner_sample_ms: float = Field(
        0.0, description="Mean wall time of one update's replay sample and normalization (0 if none in the window)."
    )
    learner_sample_us_per_sync: float = 0.0
    learner_update_ms: float = Field(
        description="Mean wall time of one gradient update, the sample excluded (0 if none in the window)."
    )
    learner_update_us_per_sync: float
    learner_grad_sync_us_per_sync: float = Field(
        0.0, description="Data-parallel gradient all-reduce time per sync (part of the update; 0 on one rank)."
    )
    learner_wait_us: float = Field(description="Learner time waiting for the collector, per sync.")
    iteration_us: float = Field(description="Window wall time per sync.")
    collector_phase_sum_us: float
    coverage: float = Field(description="(collector phase sum + collector wait) / iteration time; 1.0 = all accounted.")
    non_physics_share: float = Field(description="Collector busy time outside physics_step / collector busy time.")


class ArmRun(_M):
    repeat: int
    order: int = Field(description="Position in the interleaved schedule (0-based).")
    command: list[str] = Field(description="The exact `unilab apply` command line of this run.")
    run_dir: str
    manifest: str
    exit_code: int
    window: WindowSample


class ArmResult(_M):
    name: str
    overrides: dict[str, str] = Field(description="The arm's spec overrides (KEY -> TOML value).")
    physics_workers: int | None = None
    runs: list[ArmRun]
    collector_phases_us: dict[str, Spread]
    collector_phases_cpu_us: dict[str, Spread] = Field(default_factory=dict)
    collector_wait_us: Spread
    learner_sample_ms: Spread
    learner_sample_us_per_sync: Spread
    learner_update_ms: Spread
    learner_update_us_per_sync: Spread
    learner_grad_sync_us_per_sync: Spread
    learner_wait_us: Spread
    iteration_us: Spread
    collector_phase_sum_us: Spread
    coverage: Spread
    non_physics_share: Spread
    reconciles: bool = Field(description="Every repeat's coverage is within the tolerance of 1.")
    collector_phase_ops: dict[str, dict[str, Spread]] | None = Field(
        None,
        description="Phase -> PhaseOps counter -> spread over the arm's in-process inventory runs (one per repeat); "
        "null when the inventory was skipped.",
    )


class HostSyncRow(_M):
    owner_file: str = Field(description="File of the first caller outside torch and unilab/profile.")
    owner_function: str
    owner_line: int
    unilab_owner: str | None = Field(None, description="`file:function` of the first caller under unilab/.")
    kind: str = Field(description="scalar_read, tolist, numpy, to_host_copy, nonzero, masked_select, ...")
    op: str = Field(description="The torch function or aten op that was seen.")
    calls: int
    calls_per_iteration: float
    shapes: list[str]
    device: str
    phase: str | None = Field(None, description="Collector phase it ran in; null outside the timed step.")
    inside_capture: bool = Field(description="Inside Collector.step's timed phases (the candidate capture boundary).")
    device_sync: bool = Field(description="Whether the read waits for a non-CPU device.")
    disposition: str


class PhaseOps(_M):
    """What one collector phase does per iteration (one step), counted by the inventory's modes."""

    allocations: float = Field(
        description="Tensors allocated: results of aten ops that are not in-place, out= or views."
    )
    allocated_bytes: float
    host_to_device_copies: float = Field(description="aten copies from the CPU to another device.")
    device_to_host_copies: float = Field(description="aten copies from another device to the CPU.")
    host_reads: float = Field(description="Host reads of tensor values (the inventory's rows), any device.")
    device_syncs: float = Field(
        description="Host reads of a non-CPU tensor: each waits for the device (a global sync)."
    )
    cuda_sync_warnings: float = Field(0.0, description="Warnings of CUDA's sync debug mode (0 off CUDA).")
    device_synced_us: float = Field(
        0.0,
        description="CUDA: microseconds of the phase with the device synchronised at every phase boundary, so "
        "its kernels' execution counts in it (a separate pass; 0 off CUDA).",
    )


class HostSyncInventory(_M):
    method: str
    steps: int
    num_envs: int
    device: str
    rows: list[HostSyncRow]
    phase_ops: dict[str, PhaseOps] = Field(
        default_factory=dict, description="Collector phase (or outside_step) -> per-iteration counts."
    )
    cuda_sync_debug: bool = Field(False, description='Whether the run was also under set_sync_debug_mode("warn").')


class ProfileProvenance(_M):
    host: Provenance
    spec: str
    task: str
    algo: str
    physics: str
    num_envs: int
    decimation: int
    env_steps_per_sync: int = Field(description="K: env steps of every env per collector/learner sync.")
    command: list[str] = Field(description="The `unilab profile` command line as given.")
    base_overrides: list[str]
    warmup_env_steps: int
    window_env_steps: int
    warmup_syncs: int
    window_syncs: int
    repeats: int
    schedule: list[str] = Field(description="Arm names in the order they ran (interleaved).")
    manifests: dict[str, list[str]] = Field(description="Arm name -> manifest path of each repeat.")


class Verdict(_M):
    basis_arm: str
    non_physics_share: float
    threshold: float
    go: bool
    line: str


class Profile(_M):
    """profile.json of a profile directory."""

    schema_version: Literal[1] = 1
    profile_id: str
    created_at: str = Field(description="UTC, ISO 8601.")
    coverage_tolerance: float
    provenance: ProfileProvenance
    arms: list[ArmResult]
    host_sync: HostSyncInventory | None = None
    verdict: Verdict
