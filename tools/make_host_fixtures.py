"""Write the recorded host-fact fixtures the plan tests and golden plans compile against.

Regenerate with `python tools/make_host_fixtures.py` (only needed when HostFacts changes).
The facts are synthetic but shaped exactly like `unilab host --json` output on such machines.
"""

from __future__ import annotations

from pathlib import Path

from unilab.host.facts import (
    CpuFacts,
    GpuFacts,
    HostFacts,
    MpsFacts,
    MpsServiceFacts,
    NvidiaFacts,
    OsFacts,
    PackageFacts,
    VisibleDevicesFacts,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hosts"
CPU_PKGS = PackageFacts(unilab="0.1.0", torch="2.13.0+cpu", warp_lang="1.19.0", mujoco="4.0.0", mujoco_warp="4.0.0")
CUDA_PKGS = PackageFacts(unilab="0.1.0", torch="2.13.0", warp_lang="1.19.0", mujoco="4.0.0", mujoco_warp="4.0.0")
# /proc/cpuinfo flags (of LEARNER_CPU_FLAGS) by CPU generation: Intel Sapphire Rapids (AMX, no
# amx_fp16: that is Granite Rapids), AMD Zen 4 (AVX-512 with bf16, no AMX), AMD Zen 2/3 (AVX2 only).
SAPPHIRE_RAPIDS = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "avx_vnni"]
ZEN4 = ["avx2", "avx512f", "avx512_bf16"]
ZEN3 = ["avx2"]


def _os(host: str) -> OsFacts:
    return OsFacts(system="Linux", release="6.8.0", machine="x86_64", hostname=host, python="3.11.7")


def _gpu(i: int, name: str = "NVIDIA H200", mig: str = "disabled", mem: int = 143771) -> GpuFacts:
    return GpuFacts(
        index=i,
        uuid=f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}",
        name=name,
        memory_total_mib=mem,
        compute_mode="default",
        mig_mode=mig,
    )  # type: ignore[arg-type]


def _smt_pairs(n: int) -> list[list[int]]:
    """Cores of an n-CPU host with two threads per core, numbered as Linux does on x86: the first
    thread of every core, then the second ([i, i + n/2])."""
    return [[i, i + n // 2] for i in range(n // 2)]


def _no_mps(state: str = "/home/user/.local/state/unilab/mps") -> MpsFacts:
    return MpsFacts(control_binary=None, state_directory=state, services=[])


def _cpu_only(host: str, cpu: CpuFacts) -> HostFacts:
    """A host without an NVIDIA driver: only its CPU differs between the CPU fixtures."""
    return HostFacts(
        os=_os(host),
        cpu=cpu,
        nvidia=NvidiaFacts(driver_present=False, nvml_error="NVML init failed: NVML Shared Library Not Found"),
        cuda_visible_devices=VisibleDevicesFacts(raw=None, uuids=[]),
        mps=_no_mps(),
        packages=CPU_PKGS,
    )


def cpu_laptop() -> HostFacts:
    return _cpu_only(
        "laptop", CpuFacts(model="AMD EPYC", logical_count=2, affinity=[0, 1], features=ZEN3, cores=[[0], [1]])
    )


def cpu_zen4() -> HostFacts:
    """A 2-vCPU AMD EPYC (Zen 4) cloud instance: AVX-512 with AVX512-BF16, no AMX tiles."""
    return _cpu_only(
        "zen4-vm",
        CpuFacts(model="AMD EPYC", logical_count=2, affinity=[0, 1], features=ZEN4, cores=[[0], [1]]),
    )


def cpu_amx() -> HostFacts:
    """A 2-vCPU Sapphire Rapids cloud instance: bf16 matmuls on AMX, no SMT siblings visible."""
    return _cpu_only(
        "amx-vm",
        CpuFacts(
            model="Intel(R) Xeon(R) Processor",
            logical_count=2,
            affinity=[0, 1],
            features=SAPPHIRE_RAPIDS,
            cores=[[0], [1]],
        ),
    )


def cpu_smt4() -> HostFacts:
    """4 logical CPUs on 2 physical cores (AMX): two learner threads on one core's siblings share it."""
    return _cpu_only(
        "smt4",
        CpuFacts(
            model="Intel(R) Xeon(R) Processor",
            logical_count=4,
            affinity=[0, 1, 2, 3],
            features=SAPPHIRE_RAPIDS,
            cores=_smt_pairs(4),
        ),
    )


def one_h200() -> HostFacts:
    gpus = [_gpu(0)]
    return HostFacts(
        os=_os("h200-box"),
        cpu=CpuFacts(
            model="Intel Xeon Platinum 8480+",
            logical_count=16,
            affinity=list(range(16)),
            features=SAPPHIRE_RAPIDS,
            cores=_smt_pairs(16),
        ),
        nvidia=NvidiaFacts(driver_present=True, driver_version="580.95.05", cuda_driver_version="13.0", gpus=gpus),
        cuda_visible_devices=VisibleDevicesFacts(raw=None, uuids=[g.uuid for g in gpus]),
        mps=MpsFacts(
            control_binary="/usr/bin/nvidia-cuda-mps-control",
            state_directory="/root/.local/state/unilab/mps",
            services=[],
        ),
        packages=CUDA_PKGS,
    )


def node_8gpu_mps() -> HostFacts:
    gpus = [_gpu(i, name="NVIDIA H100 80GB HBM3", mem=81559) for i in range(8)]
    state = "/home/train/.local/state/unilab/mps"
    services = [
        MpsServiceFacts(
            name=f"train-gpu{i}",
            gpu_uuid=gpus[i].uuid,
            pipe_directory=f"{state}/train-gpu{i}/pipe",
            log_directory=f"{state}/train-gpu{i}/log",
            control_socket_exists=True,
            daemon_pid=41000 + i,
            daemon_alive=True,
            pipe_directory_owner_uid=1000,
            pipe_directory_mode="0700",
        )
        for i in range(8)
    ]
    return HostFacts(
        os=_os("node-07"),
        cpu=CpuFacts(
            model="AMD EPYC 9654 96-Core Processor",
            logical_count=192,
            affinity=list(range(192)),
            features=ZEN4,
            cores=_smt_pairs(192),
        ),
        nvidia=NvidiaFacts(driver_present=True, driver_version="580.95.05", cuda_driver_version="13.0", gpus=gpus),
        cuda_visible_devices=VisibleDevicesFacts(raw=None, uuids=[g.uuid for g in gpus]),
        mps=MpsFacts(control_binary="/usr/bin/nvidia-cuda-mps-control", state_directory=state, services=services),
        packages=CUDA_PKGS,
        nccl_env={"NCCL_DEBUG": "WARN"},
    )


def mig_gpu() -> HostFacts:
    gpus = [
        _gpu(0, name="NVIDIA A100-SXM4-80GB", mig="enabled", mem=81920),
        _gpu(1, name="NVIDIA A100-SXM4-80GB", mem=81920),
    ]
    return HostFacts(
        os=_os("a100-mig"),
        cpu=CpuFacts(
            model="AMD EPYC 7763 64-Core Processor",
            logical_count=32,
            affinity=list(range(32)),
            features=ZEN3,
            cores=_smt_pairs(32),
        ),
        nvidia=NvidiaFacts(driver_present=True, driver_version="570.86.15", cuda_driver_version="12.8", gpus=gpus),
        cuda_visible_devices=VisibleDevicesFacts(raw=None, uuids=[g.uuid for g in gpus]),
        mps=MpsFacts(
            control_binary="/usr/bin/nvidia-cuda-mps-control",
            state_directory="/root/.local/state/unilab/mps",
            services=[],
        ),
        packages=CUDA_PKGS,
    )


FIXTURES = {
    "cpu_laptop": cpu_laptop,
    "cpu_amx": cpu_amx,
    "cpu_zen4": cpu_zen4,
    "cpu_smt4": cpu_smt4,
    "one_h200": one_h200,
    "node_8gpu_mps": node_8gpu_mps,
    "mig_gpu": mig_gpu,
}

if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help, and no stray arguments
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make in FIXTURES.items():
        (OUT / f"{name}.json").write_text(make().model_dump_json(indent=2) + "\n")
        print(f"wrote {OUT / name}.json")
