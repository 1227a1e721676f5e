"""The run manifest: the record of what actually ran. v1 starts with identity, provenance,
per-rank evidence, counters and the final status; later runtime work extends it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_SCHEMA_VERSION = 1


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Provenance(_M):
    os: str
    cpu: str
    python: str
    unilab: str
    git_commit: str | None = None
    torch: str | None = None
    cuda_runtime: str | None = None
    warp_lang: str | None = None
    mujoco: str | None = None
    mujoco_warp: str | None = None
    gpu_name: str | None = None
    driver_version: str | None = None


class RankEvidence(_M):
    rank: int
    device: str
    gpu_uuid: str | None = None
    collector_cpu_ids_applied: list[int] = Field(description="As read back with os.sched_getaffinity.")
    torch_threads: int


class Counters(_M):
    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    nonfinite_resets: int = 0
    skipped_updates: int = 0
    dropped_transitions: int = 0


class FirstError(_M):
    where: str = Field(description="Process that failed first, e.g. `rank0.collector`.")
    message: str


class Manifest(_M):
    """manifest.json of a run directory, validated against schemas/manifest.v1.json before writing."""

    schema_version: Literal[1] = 1
    run_id: str
    plan_id: str
    spec_digest: str
    status: Literal["running", "succeeded", "failed", "interrupted"]
    started_at: str = Field(description="UTC, ISO 8601.")
    finished_at: str | None = None
    provenance: Provenance
    ranks: list[RankEvidence] = Field(default_factory=list)
    counters: Counters = Field(default_factory=Counters)
    first_error: FirstError | None = None
