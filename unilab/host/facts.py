"""Host facts: what `unilab plan` compiles against. A pydantic model, so facts can be recorded
on one machine (`unilab host --json > node.json`) and planned against on another."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HOST_FACTS_SCHEMA_VERSION = 1
# Bounds a facts file is read within (a hand-made file of 100k GPUs must be refused, not planned
# against for minutes): far above any node's 8-16 GPUs and Linux's CPU count limit (CONFIG_NR_CPUS).
MAX_GPUS = 256
MAX_CPUS = 8192

# The CPU flags that decide a CPU learner's speed and precision, as /proc/cpuinfo spells them.
# CpuFacts.features records them in this tuple's order (not alphabetical, not cpuinfo's): a fixed
# order makes facts recorded on two machines compare and diff flag by flag.
LEARNER_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "amx_fp16", "avx_vnni")


class _Facts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OsFacts(_Facts):
    system: str = Field(description="platform.system(), e.g. Linux.")
    release: str = Field(description="Kernel release.")
    machine: str = Field(description="CPU architecture, e.g. x86_64.")
    hostname: str = Field(description="Host name (provenance only; not part of the plan's fingerprint).")
    python: str = Field(description="Python version of the probing interpreter.")


class CpuFacts(_Facts):
    model: str = Field(description="CPU model name.")
    logical_count: int = Field(ge=1, le=MAX_CPUS, description="Logical CPUs in the machine.")
    affinity: list[Annotated[int, Field(ge=0, lt=MAX_CPUS)]] = Field(
        max_length=MAX_CPUS, description="CPUs this process may run on (os.sched_getaffinity), sorted."
    )
    features: list[str] | None = Field(
        None,
        description="The CPU flags that decide a CPU learner's speed and precision (bf16 matmuls on AMX or "
        "AVX512_BF16, AVX-512, AVX2), as the first `flags` line of /proc/cpuinfo lists them, keeping only "
        f"{', '.join(LEARNER_CPU_FLAGS)}, in that order (not alphabetical). An empty list: read, none present; "
        "null: not recorded (facts recorded before unilab read them, a host without /proc/cpuinfo, or one "
        "that could not be read).",
    )
    cores: list[list[Annotated[int, Field(ge=0, lt=MAX_CPUS)]]] | None = Field(
        None,
        max_length=MAX_CPUS,
        description="The affinity's CPUs grouped by physical core (SMT siblings together, from sysfs "
        "topology core_cpus_list, else thread_siblings_list): each group sorted, groups sorted by their first "
        "CPU, every affinity CPU in exactly one group. Two threads of one core share its execution units, so "
        "a learner gains little from the second. Null: not recorded or not readable.",
    )

    @field_validator("affinity")
    @classmethod
    def _no_repeats(cls, v: list[int]) -> list[int]:
        # A hand-edited facts file with a CPU twice would plan blocks that share a CPU.
        if len(set(v)) != len(v):
            raise ValueError(f"CPU ids repeat: {sorted(c for c, n in Counter(v).items() if n > 1)}")
        return v

    @field_validator("features")
    @classmethod
    def _known_flags(cls, v: list[str] | None) -> list[str] | None:
        # Only the flags unilab reads are recorded: an unknown one (a typo in a hand-edited file)
        # would never be looked up, and a lookup of the intended flag would say it is absent.
        if v is None:
            return v
        unknown = [f for f in v if f not in LEARNER_CPU_FLAGS]
        if unknown:
            raise ValueError(f"unknown CPU feature(s) {unknown}; the recorded ones are {', '.join(LEARNER_CPU_FLAGS)}")
        if len(set(v)) != len(v):
            raise ValueError(f"CPU features repeat: {sorted(f for f in set(v) if v.count(f) > 1)}")
        return v

    @model_validator(mode="after")
    def _affinity_fits(self) -> CpuFacts:
        if len(self.affinity) > self.logical_count:
            raise ValueError(f"the affinity lists {len(self.affinity)} CPUs, the machine has {self.logical_count}")
        if self.cores is not None:
            # Cores partition the affinity: a CPU in two cores, or one the process may not run on,
            # would count physical cores the learner cannot have.
            if any(not group for group in self.cores):
                raise ValueError("cores lists an empty core (each core has at least one CPU)")
            listed = [c for group in self.cores for c in group]
            repeated = sorted({c for c in listed if listed.count(c) > 1})
            if repeated:
                raise ValueError(f"cores lists CPU(s) {repeated} more than once (each CPU is in one core)")
            outside = sorted(set(listed) - set(self.affinity))
            if outside:
                raise ValueError(f"cores lists CPU(s) {outside}, which are not in the affinity")
            missing = sorted(set(self.affinity) - set(listed))
            if missing:
                raise ValueError(f"cores leaves out affinity CPU(s) {missing} (each affinity CPU is in one core)")
        return self

    def has(self, flag: str) -> bool | None:
        """Whether the CPU has `flag` (one of LEARNER_CPU_FLAGS); None when features were not recorded,
        so a caller tells "absent" from "unknown"."""
        if flag not in LEARNER_CPU_FLAGS:
            raise ValueError(
                f"{flag!r} is not a recorded CPU feature; the recorded ones are {', '.join(LEARNER_CPU_FLAGS)}"
            )
        return None if self.features is None else flag in self.features

    def bf16_matmul(self) -> bool | None:
        """Whether bf16 matmuls run natively (AMX or AVX512_BF16) rather than emulated, slower than fp32;
        None when features were not recorded."""
        if self.features is None:
            return None
        return "amx_bf16" in self.features or "avx512_bf16" in self.features

    def physical_cores(self) -> int | None:
        """Physical cores in the affinity (what bounds a learner's useful threads); None when not recorded."""
        return None if self.cores is None else len(self.cores)


class GpuFacts(_Facts):
    index: int = Field(ge=0, description="NVML index (physical order, not CUDA_VISIBLE_DEVICES order).")
    uuid: str = Field(description="GPU UUID, e.g. GPU-8c1f...; unilab's identity for a GPU.")
    name: str
    memory_total_mib: int = Field(ge=0)
    compute_mode: Literal["default", "exclusive_thread", "prohibited", "exclusive_process", "unknown"]
    mig_mode: Literal["enabled", "disabled", "unsupported"]


class NvidiaFacts(_Facts):
    driver_present: bool = Field(description="Whether NVML could be initialised.")
    nvml_error: str | None = Field(
        None,
        description="Why NVML is unavailable, when it is; with a driver present, the GPUs that could not be read "
        "(they are left out of `gpus`).",
    )
    driver_version: str | None = None
    cuda_driver_version: str | None = Field(None, description="CUDA version the driver supports, e.g. 13.0.")
    gpus: list[GpuFacts] = Field(
        default_factory=list, max_length=MAX_GPUS, description=f"The GPUs NVML reports (at most {MAX_GPUS})."
    )

    @model_validator(mode="after")
    def _gpus_consistent(self) -> NvidiaFacts:
        if self.gpus and not self.driver_present:
            raise ValueError("GPUs are listed, but the driver is not present (NVML could not be initialised)")
        for what, values in (("UUID", [g.uuid for g in self.gpus]), ("index", [g.index for g in self.gpus])):
            repeated = sorted(str(v) for v, n in Counter(values).items() if n > 1)
            if repeated:
                raise ValueError(f"GPU {what}s repeat: {', '.join(repeated)} (each GPU is listed once)")
        return self


class VisibleDevicesFacts(_Facts):
    raw: str | None = Field(description="CUDA_VISIBLE_DEVICES as set, or null when unset.")
    uuids: list[str] = Field(
        max_length=MAX_GPUS, description="UUIDs of the visible GPUs in CUDA order (index i -> uuids[i])."
    )
    error: str | None = Field(None, description="Why an entry could not be mapped to a GPU.")


class MpsServiceFacts(_Facts):
    name: str = Field(description="Service name given to `unilab mps start --name`.")
    gpu_uuid: str
    pipe_directory: str
    log_directory: str
    control_socket_exists: bool = Field(description="Whether <pipe_directory>/control exists as a socket.")
    daemon_pid: int | None = Field(description="pid from the daemon's pid file, if readable.")
    daemon_alive: bool = Field(description="Whether that pid is a live process.")
    pipe_directory_owner_uid: int | None = None
    pipe_directory_mode: str | None = Field(None, description="Octal permission bits, e.g. 0700.")


class MpsFacts(_Facts):
    control_binary: str | None = Field(description="Path of nvidia-cuda-mps-control, if on PATH.")
    state_directory: str = Field(description="unilab's MPS state directory (the service registry lives here).")
    services: list[MpsServiceFacts] = Field(default_factory=list, max_length=MAX_GPUS)
    registry_error: str | None = Field(
        None, description="Why the service registry could not be read (then `services` is empty); absent when it was."
    )


class PackageFacts(_Facts):
    unilab: str | None = None
    torch: str | None = None
    warp_lang: str | None = None
    mujoco: str | None = None
    mujoco_warp: str | None = None
    wandb: str | None = Field(None, description="The `wandb` extra, for `[run.wandb]` (null: not installed).")


class HostFacts(_Facts):
    """Everything unilab knows about a host, as probed by `unilab host`."""

    schema_version: Literal[1] = 1
    os: OsFacts
    cpu: CpuFacts
    nvidia: NvidiaFacts
    cuda_visible_devices: VisibleDevicesFacts
    mps: MpsFacts
    packages: PackageFacts
    nccl_env: dict[str, str] = Field(
        default_factory=dict, description="NCCL_* and TORCH_NCCL_* variables set in the probing environment."
    )

    def gpu_by_uuid(self, uuid: str) -> GpuFacts | None:
        return next((g for g in self.nvidia.gpus if g.uuid == uuid), None)

    def mps_services_for(self, uuid: str) -> list[MpsServiceFacts]:
        return [s for s in self.mps.services if s.gpu_uuid == uuid]
