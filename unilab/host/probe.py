"""Probe the host: CPU affinity, NVML, CUDA_VISIBLE_DEVICES, MPS services, package versions.

Package versions come from installed metadata, never by importing torch, warp or mujoco, so
probing (and planning) stays instant.
"""

from __future__ import annotations

import os
import platform
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from unilab.errors import UnilabError
from unilab.extras import DISTRIBUTION
from unilab.host.facts import (
    LEARNER_CPU_FLAGS,
    CpuFacts,
    GpuFacts,
    HostFacts,
    MpsFacts,
    NvidiaFacts,
    OsFacts,
    PackageFacts,
    VisibleDevicesFacts,
)
from unilab.host.mps_registry import CONTROL_BINARY, probe_service, read_registry, state_directory
from unilab.host.nvml import load_pynvml, read_nvidia

_NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_features(cpuinfo_text: str | None) -> list[str] | None:
    """The LEARNER_CPU_FLAGS the first `flags` line of /proc/cpuinfo lists, in that tuple's order;
    None without cpuinfo text or a `flags` line (not x86, or not Linux): not recorded, which is not
    the same as "none present". The first line suffices: the CPUs of one machine report the same flags."""
    if cpuinfo_text is None:
        return None
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            present = set(value.split())
            return [f for f in LEARNER_CPU_FLAGS if f in present]
    return None


_MAX_CPUS = 1_048_576  # CpuFacts.logical_count's bound: a range past it is garbage, not a machine


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # no sign, no blanks, not empty, no other scripts' digits


def parse_cpu_list(text: str) -> list[int] | None:
    """The kernel's CPU list format ("0-3,8-11", "5"), sorted without repeats; None when malformed
    (a list the kernel would not write), so a caller records "not readable" rather than a guess."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        lo, sep, hi = part.partition("-")
        if not _is_number(lo) or (sep and not _is_number(hi)):
            return None
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last >= _MAX_CPUS:
            return None
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def _cpu_cores(affinity: list[int], sys_root: Path = Path("/sys/devices/system/cpu")) -> list[list[int]] | None:
    """The affinity's CPUs grouped by physical core: each CPU's SMT siblings (core_cpus_list where the
    kernel has it, else the older thread_siblings_list) restricted to the affinity, each group sorted,
    groups sorted by their first CPU. None when any CPU's siblings cannot be read or parsed: a partial
    grouping would undercount the cores."""
    allowed = set(affinity)
    groups: set[tuple[int, ...]] = set()
    for cpu in affinity:
        topology = sys_root / f"cpu{cpu}" / "topology"
        siblings = None
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                siblings = parse_cpu_list((topology / name).read_text())
            except (OSError, UnicodeDecodeError):
                continue
            break
        if siblings is None or cpu not in siblings:
            return None
        groups.add(tuple(c for c in siblings if c in allowed))
    cores = sorted(list(g) for g in groups)
    listed = [c for g in cores for c in g]
    if len(listed) != len(set(listed)):  # sibling lists that disagree with each other
        return None
    return cores


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def map_visible_devices(raw: str | None, gpus: list[GpuFacts]) -> VisibleDevicesFacts:
    """Map CUDA_VISIBLE_DEVICES (indices, UUIDs or UUID prefixes, as CUDA accepts) to UUIDs."""
    if raw is None:
        return VisibleDevicesFacts(raw=None, uuids=[g.uuid for g in gpus])
    uuids: list[str] = []
    for token in (t.strip() for t in raw.split(",")):
        if not token:
            continue
        if token.isdigit():
            match = [g for g in gpus if g.index == int(token)]
        else:
            match = [
                g for g in gpus if g.uuid.startswith(token if token.startswith(("GPU-", "MIG-")) else "GPU-" + token)
            ]
        if len(match) != 1:
            # CUDA stops at the first entry it cannot resolve; so do we.
            why = "matches no GPU" if not match else "matches more than one GPU"
            return VisibleDevicesFacts(raw=raw, uuids=uuids, error=f"entry {token!r} {why}")
        uuids.append(match[0].uuid)
    return VisibleDevicesFacts(raw=raw, uuids=uuids)


def _text(value: str) -> str:
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def probe_host(env: dict[str, str] | None = None, nvml: Any = "auto", state_dir: Path | None = None) -> HostFacts:
    # Host facts are recorded as JSON text: a variable that is not valid UTF-8 (os.environ keeps
    # its bytes as surrogates) is recorded with U+FFFD in their place.
    env = {_text(k): _text(v) for k, v in (os.environ if env is None else env).items()}
    nvidia: NvidiaFacts = read_nvidia(load_pynvml() if nvml == "auto" else nvml)
    sdir = state_dir or state_directory()
    try:
        services, registry_error = [probe_service(e) for e in read_registry(sdir).services], None
    except UnilabError as exc:  # a fact for MPS plans to refuse on; CPU plans do not need the registry
        services, registry_error = [], exc.summary
    uname = platform.uname()
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return HostFacts(
        os=OsFacts(
            system=uname.system,
            release=uname.release,
            machine=uname.machine,
            hostname=uname.node,
            python=platform.python_version(),
        ),
        cpu=CpuFacts(
            model=_cpu_model(),
            logical_count=os.cpu_count() or 1,
            affinity=affinity,
            features=_cpu_features(_read_text(Path("/proc/cpuinfo"))),
            cores=_cpu_cores(affinity),
        ),
        nvidia=nvidia,
        cuda_visible_devices=map_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), nvidia.gpus),
        mps=MpsFacts(
            control_binary=shutil.which(CONTROL_BINARY),
            state_directory=str(sdir),
            services=services,
            registry_error=registry_error,
        ),
        packages=PackageFacts(
            unilab=_version(DISTRIBUTION),
            torch=_version("torch"),
            warp_lang=_version("warp-lang"),
            mujoco=_version("mujoco"),
            mujoco_warp=_version("mujoco-warp"),
            wandb=_version("wandb"),
        ),
        nccl_env={k: v for k, v in sorted(env.items()) if k.startswith(_NCCL_PREFIXES)},
    )
