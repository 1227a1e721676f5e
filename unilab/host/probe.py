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
from unilab.host.facts import (
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
            affinity=sorted(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else list(range(os.cpu_count() or 1)),
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
            unilab=_version("unilab"),
            torch=_version("torch"),
            warp_lang=_version("warp-lang"),
            mujoco=_version("mujoco"),
            mujoco_warp=_version("mujoco-warp"),
        ),
        nccl_env={k: v for k, v in sorted(env.items()) if k.startswith(_NCCL_PREFIXES)},
    )
