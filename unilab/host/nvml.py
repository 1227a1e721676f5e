"""The NVML boundary: the only place unilab talks to the NVIDIA driver while planning.

`read_nvidia(nvml)` takes the `pynvml` module (from nvidia-ml-py) or a test fake with the same
functions, so every branch is testable on a machine without a GPU.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from unilab.host.facts import GpuFacts, NvidiaFacts

_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _cuda_version(v: int) -> str:
    # NVML encodes CUDA 12.4 as 12040.
    return f"{v // 1000}.{(v % 1000) // 10}"


def load_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _read_gpu(nvml: Any, i: int) -> GpuFacts:
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(h)
        mig = "enabled" if int(current) == 1 else "disabled"
    except Exception:  # NVML_ERROR_NOT_SUPPORTED on GPUs without MIG
        mig = "unsupported"
    try:
        mode = _COMPUTE_MODES.get(int(nvml.nvmlDeviceGetComputeMode(h)), "unknown")
    except Exception:
        mode = "unknown"
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    return GpuFacts(
        index=i,
        uuid=_text(nvml.nvmlDeviceGetUUID(h)),
        name=_text(nvml.nvmlDeviceGetName(h)),
        memory_total_mib=int(mem.total) // (1024 * 1024),
        compute_mode=mode,
        mig_mode=mig,
    )


def read_nvidia(nvml: Any | None) -> NvidiaFacts:
    """Probe the driver and GPUs. No driver is a fact (driver_present=false), never an error."""
    if nvml is None:
        return NvidiaFacts(driver_present=False, nvml_error="nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NvidiaFacts(driver_present=False, nvml_error=f"NVML init failed: {exc}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
        gpus, unreadable = [], []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            try:
                gpus.append(_read_gpu(nvml, i))
            except Exception as exc:  # e.g. a GPU fallen off the bus: the others are still usable
                unreadable.append(f"GPU {i} could not be read: {exc}")
        return NvidiaFacts(
            driver_present=True,
            driver_version=driver,
            cuda_driver_version=cuda,
            gpus=gpus,
            nvml_error="; ".join(unreadable) or None,
        )
    except Exception as exc:
        return NvidiaFacts(driver_present=False, nvml_error=f"NVML query failed: {exc}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
