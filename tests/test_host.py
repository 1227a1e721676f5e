"""Host probing through narrow fakes at the NVML boundary and a real MPS registry on disk."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest

from unilab.errors import UnilabError
from unilab.host.facts import LEARNER_CPU_FLAGS, CpuFacts, GpuFacts
from unilab.host.mps_registry import PID_FILE_NAME, read_registry, registry_path
from unilab.host.nvml import read_nvidia
from unilab.host.probe import _cpu_cores, _cpu_features, map_visible_devices, parse_cpu_list, probe_host

Mem = namedtuple("Mem", "total free used")


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """The subset of pynvml that unilab calls, with two GPUs; GPU 1 has MIG on."""

    def __init__(self, fail_init: bool = False, mig_unsupported: bool = False, lost: int | None = None) -> None:
        self.fail_init, self.mig_unsupported, self.shutdown = fail_init, mig_unsupported, False
        self.lost = lost  # index of a GPU whose queries fail (fallen off the bus)

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.95.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        if h == self.lost:
            raise FakeNVMLError("GPU is lost")
        return f"GPU-aaaa{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Mem:
        return Mem(150_754_820_096, 0, 0)

    def nvmlDeviceGetComputeMode(self, h: int) -> int:
        return 3 if h == 1 else 0

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        if self.mig_unsupported:
            raise FakeNVMLError("Not Supported")
        return (1, 1) if h == 1 else (0, 0)


def test_nvml_reads_gpus_by_uuid() -> None:
    fake = FakeNvml()
    nv = read_nvidia(fake)
    assert nv.driver_present and nv.driver_version == "580.95.05" and nv.cuda_driver_version == "13.0"
    assert [(g.index, g.uuid, g.mig_mode, g.compute_mode) for g in nv.gpus] == [
        (0, "GPU-aaaa0", "disabled", "default"),
        (1, "GPU-aaaa1", "enabled", "exclusive_process"),
    ]
    assert nv.gpus[0].memory_total_mib == 143771
    assert fake.shutdown


def test_no_driver_is_a_fact_not_an_error() -> None:
    nv = read_nvidia(FakeNvml(fail_init=True))
    assert not nv.driver_present and "Driver Not Loaded" in (nv.nvml_error or "")
    assert not read_nvidia(None).driver_present


def test_one_unreadable_gpu_leaves_the_others_and_is_named() -> None:
    nv = read_nvidia(FakeNvml(lost=0))
    assert nv.driver_present and [g.uuid for g in nv.gpus] == ["GPU-aaaa1"]
    assert nv.nvml_error == "GPU 0 could not be read: GPU is lost"


def test_mig_unsupported() -> None:
    assert {g.mig_mode for g in read_nvidia(FakeNvml(mig_unsupported=True)).gpus} == {"unsupported"}


GPUS = [
    GpuFacts(index=0, uuid="GPU-0a1b", name="x", memory_total_mib=1, compute_mode="default", mig_mode="disabled"),
    GpuFacts(index=1, uuid="GPU-7f00", name="x", memory_total_mib=1, compute_mode="default", mig_mode="disabled"),
]


@pytest.mark.parametrize(
    ("raw", "uuids", "error"),
    [
        (None, ["GPU-0a1b", "GPU-7f00"], None),
        ("1,0", ["GPU-7f00", "GPU-0a1b"], None),
        ("GPU-7f00", ["GPU-7f00"], None),
        ("7f", ["GPU-7f00"], None),  # CUDA accepts UUID prefixes without "GPU-"
        ("", [], None),
        ("0,5", ["GPU-0a1b"], "entry '5' matches no GPU"),
    ],
)
def test_cuda_visible_devices_mapping(raw: str | None, uuids: list[str], error: str | None) -> None:
    v = map_visible_devices(raw, GPUS)
    assert v.uuids == uuids and v.error == error


def _exited_pid() -> int:
    """The pid of a process that has exited and been reaped (the kernel reuses pids only later)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _registry(state: Path, pipe: Path, pid: int | None) -> None:
    state.mkdir(parents=True, exist_ok=True)
    entry = {"name": "train-gpu0", "gpu_uuid": "GPU-0a1b", "pipe_directory": str(pipe), "log_directory": str(pipe)}
    if pid is not None:
        entry["daemon_pid"] = pid
    registry_path(state).write_text(json.dumps({"schema_version": 1, "services": [entry]}))


def test_mps_service_with_live_socket_and_pid(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    pipe.mkdir(mode=0o700)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(pipe / "control"))
    (pipe / PID_FILE_NAME).write_text(f"{os.getpid()}\n")
    try:
        _registry(tmp_path / "state", pipe, None)
        facts = probe_host(env={}, nvml=None, state_dir=tmp_path / "state")
    finally:
        sock.close()
    (svc,) = facts.mps.services
    assert svc.control_socket_exists and svc.daemon_pid == os.getpid() and svc.daemon_alive
    assert svc.pipe_directory_mode == "0700" and svc.pipe_directory_owner_uid == os.getuid()


def test_mps_service_without_socket_or_daemon(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "control").write_text("not a socket")
    _registry(tmp_path / "state", pipe, _exited_pid())  # a pid that is not running
    (svc,) = probe_host(env={}, nvml=None, state_dir=tmp_path / "state").mps.services
    assert not svc.control_socket_exists and not svc.daemon_alive


def test_corrupt_registry_is_a_clear_error(tmp_path: Path) -> None:
    registry_path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
    registry_path(tmp_path).write_text("{not json")
    with pytest.raises(UnilabError, match="registry"):
        read_registry(tmp_path)


def test_probe_reads_versions_from_metadata_and_nccl_env(tmp_path: Path) -> None:
    facts = probe_host(env={"NCCL_DEBUG": "INFO", "PATH": "/bin"}, nvml=FakeNvml(), state_dir=tmp_path)
    assert facts.packages.torch and facts.packages.mujoco
    assert facts.nccl_env == {"NCCL_DEBUG": "INFO"}
    assert facts.cpu.affinity == sorted(os.sched_getaffinity(0))
    assert facts.cuda_visible_devices.uuids == ["GPU-aaaa0", "GPU-aaaa1"]


def test_an_environment_variable_that_is_not_utf8_is_recorded_readably(tmp_path: Path) -> None:
    """os.environ keeps undecodable bytes as surrogates, which JSON text cannot hold."""
    bad = b"a\xffb".decode("utf-8", "surrogateescape")
    facts = probe_host(env={"CUDA_VISIBLE_DEVICES": bad, "NCCL_DEBUG": bad}, nvml=None, state_dir=tmp_path)
    assert facts.cuda_visible_devices.raw == "a\ufffdb" and facts.nccl_env == {"NCCL_DEBUG": "a\ufffdb"}
    json.loads(facts.model_dump_json())


@pytest.mark.parametrize("pid", ["99999999999999999999", "0", "-1"])
def test_a_registry_pid_that_no_process_can_have_is_refused(tmp_path: Path, pid: str) -> None:
    path = registry_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = f'{{"name":"a","gpu_uuid":"GPU-1","pipe_directory":"/x","log_directory":"/x","daemon_pid":{pid}}}'
    path.write_text(f'{{"schema_version":1,"services":[{entry}]}}')
    with pytest.raises(UnilabError, match=r"MPS service registry .* cannot be read"):
        read_registry(tmp_path)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda f: f["cpu"].update(affinity=[0, 1, 2], logical_count=2), "the affinity lists 3 CPUs"),
        (lambda f: f["cpu"].update(logical_count=10**30), "less than or equal to 8192"),
        (lambda f: f["cpu"].update(affinity=list(range(9000))), "cpu.affinity: List should have at most 8192 items"),
        (
            lambda f: f["nvidia"].update(
                gpus=[dict(f["nvidia"]["gpus"][0], index=i, uuid=f"GPU-{i}") for i in range(300)]
            ),
            "nvidia.gpus: List should have at most 256 items",
        ),
        (lambda f: f["nvidia"]["gpus"].append(dict(f["nvidia"]["gpus"][0], index=7)), "GPU UUIDs repeat"),
        (lambda f: f["nvidia"].update(driver_present=False), "GPUs are listed, but the driver is not present"),
        (
            lambda f: f["cpu"].update(features=["avx2", "avx512"]),
            "unknown CPU feature(s) ['avx512']; the recorded ones are avx2, avx512f, avx512_bf16",
        ),
        (lambda f: f["cpu"].update(features=["avx2", "avx2"]), "CPU features repeat: ['avx2']"),
        (lambda f: f["cpu"]["cores"][1].append(0), "cores lists CPU(s) [0] more than once"),
        (lambda f: f["cpu"]["cores"].append([16]), "cores lists CPU(s) [16], which are not in the affinity"),
        (lambda f: f["cpu"]["cores"].pop(), "cores leaves out affinity CPU(s) [7, 15]"),
        (lambda f: f["cpu"]["cores"].append([]), "cores lists an empty core"),
    ],
)
def test_host_facts_that_no_host_can_have_are_refused(tmp_path: Path, change, says: str) -> None:
    """A hand-made or corrupted --host-facts file: planning against it would pin CPUs or GPUs that
    do not exist, or blame the spec for the file's duplicates."""
    from unilab.host.record import read_host_facts

    facts = json.loads((Path(__file__).parent / "fixtures" / "hosts" / "one_h200.json").read_text())
    change(facts)
    path = tmp_path / "node.json"
    path.write_text(json.dumps(facts))
    with pytest.raises(UnilabError) as info:
        read_host_facts(path)
    assert says in info.value.render(), info.value.render()


def test_an_unreadable_mps_registry_is_a_fact_not_an_error(tmp_path: Path) -> None:
    """CPU plans do not need the registry: a corrupt one is recorded for the MPS rules to refuse on."""
    (tmp_path / "services.json").write_text('{"services": [{"name": 3}]}')
    facts = probe_host(env={}, nvml=None, state_dir=tmp_path)
    assert facts.mps.services == []
    assert "services.json cannot be read (services.0.name: Input should be a valid string)" in (
        facts.mps.registry_error or ""
    )


@pytest.mark.parametrize("pipe", ["/tmp/a\u0000b"])
def test_a_registry_path_no_daemon_was_started_with_is_a_fact_not_a_crash(tmp_path: Path, pipe: str) -> None:
    """No path holds a NUL byte: such an entry was edited in, and every use of it would fail."""
    entry = {"name": "x", "gpu_uuid": "GPU-1", "pipe_directory": pipe, "log_directory": "/tmp/log"}
    (tmp_path / "services.json").write_text(json.dumps({"services": [entry]}))
    facts = probe_host(env={}, nvml=None, state_dir=tmp_path)
    assert facts.mps.services == []
    assert "services.0.pipe_directory" in (facts.mps.registry_error or "")


def test_a_relative_state_directory_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry records the pipe directory; a daemon and its clients started elsewhere must
    find the same one, so `UNILAB_STATE_DIR=state` means ./state from where it was given."""
    from unilab.host.mps_registry import state_directory

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("UNILAB_STATE_DIR", "state")
    assert state_directory() == tmp_path / "state" / "mps"


def test_a_registry_entry_with_a_relative_path_stays_readable(tmp_path: Path) -> None:
    """An older unilab registered relative directories for a relative UNILAB_STATE_DIR: such an
    entry must not make the registry, and every other service in it, unusable."""
    entries = [
        {"name": "old", "gpu_uuid": "GPU-1", "pipe_directory": "state/mps/old/pipe", "log_directory": "state/l"},
        {"name": "new", "gpu_uuid": "GPU-2", "pipe_directory": "/tmp/p", "log_directory": "/tmp/l"},
    ]
    (tmp_path / "services.json").write_text(json.dumps({"services": entries}))
    assert [e.name for e in read_registry(tmp_path).services] == ["old", "new"]


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx_vnni avx512_bf16 amx_bf16 avx512_fp16 amx_tile amx_int8

processor\t: 1
flags\t\t: fpu sse2
"""


@pytest.mark.parametrize(
    ("text", "features"),
    [
        # the first CPU's flags, in LEARNER_CPU_FLAGS order, not cpuinfo's
        (CPUINFO, ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "avx_vnni"]),
        ("processor\t: 0\nflags\t\t: fpu sse2 avx\n", []),  # read, none present
        ("processor\t: 0\nFeatures\t: fp asimd\n", None),  # no flags line (aarch64): not recorded
        (None, None),  # unreadable
    ],
)
def test_cpu_features_from_cpuinfo(text: str | None, features: list[str] | None) -> None:
    assert _cpu_features(text) == features


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11\n", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("5", [5]),
        ("0,2", [0, 2]),
        ("", None),
        ("0-", None),
        ("3-1", None),
        ("a", None),
        ("-1", None),
        ("1,,2", None),
        ("0 - 3", None),
        ("\u0663", None),  # a digit, but not one the kernel writes
        ("0-99999999999", None),
    ],
)
def test_kernel_cpu_list_parsing(text: str, cpus: list[int] | None) -> None:
    assert parse_cpu_list(text) == cpus


def _topology(root: Path, siblings: dict[int, str], name: str = "core_cpus_list") -> Path:
    for cpu, text in siblings.items():
        (root / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (root / f"cpu{cpu}" / "topology" / name).write_text(text + "\n")
    return root


def test_cpu_cores_group_smt_siblings(tmp_path: Path) -> None:
    root = _topology(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert _cpu_cores([0, 1, 2, 3], root) == [[0, 2], [1, 3]]
    assert _cpu_cores([1, 2, 3], root) == [[1, 3], [2]]  # only the affinity's CPUs


def test_cpu_cores_fall_back_to_thread_siblings_list(tmp_path: Path) -> None:
    root = _topology(tmp_path, {0: "0-1", 1: "0-1"}, name="thread_siblings_list")
    assert _cpu_cores([0, 1], root) == [[0, 1]]


@pytest.mark.parametrize(
    "siblings",
    [
        {0: "0"},  # CPU 1 has no topology directory
        {0: "0", 1: "garbage"},
        {0: "0", 1: "0"},  # a list without the CPU itself
        {0: "0-1", 1: "1"},  # lists that disagree
    ],
)
def test_unreadable_cpu_topology_is_not_recorded(tmp_path: Path, siblings: dict[int, str]) -> None:
    assert _cpu_cores([0, 1], _topology(tmp_path, siblings)) is None


def test_cpu_helpers_tell_absent_from_not_recorded() -> None:
    old = CpuFacts(model="x", logical_count=2, affinity=[0, 1])
    assert old.has("avx2") is None and old.bf16_matmul() is None and old.physical_cores() is None
    zen3 = CpuFacts(model="x", logical_count=2, affinity=[0, 1], features=["avx2"], cores=[[0, 1]])
    assert zen3.has("avx2") and zen3.has("amx_bf16") is False and zen3.bf16_matmul() is False
    assert zen3.physical_cores() == 1
    assert CpuFacts(model="x", logical_count=1, affinity=[0], features=["avx512_bf16"]).bf16_matmul() is True
    with pytest.raises(ValueError, match="'avx512' is not a recorded CPU feature"):
        zen3.has("avx512")


def test_facts_recorded_before_features_and_cores_still_load(tmp_path: Path) -> None:
    from unilab.host.record import read_host_facts

    facts = json.loads((Path(__file__).parent / "fixtures" / "hosts" / "one_h200.json").read_text())
    del facts["cpu"]["features"], facts["cpu"]["cores"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(facts))
    cpu = read_host_facts(path).cpu
    assert cpu.features is None and cpu.cores is None and cpu.affinity == list(range(16))


def test_probe_records_this_machines_cpu_features_and_cores(tmp_path: Path) -> None:
    cpu = probe_host(env={}, nvml=None, state_dir=tmp_path).cpu
    assert isinstance(cpu.features, list) and set(cpu.features) <= set(LEARNER_CPU_FLAGS)
    assert cpu.features == [f for f in LEARNER_CPU_FLAGS if f in cpu.features]
    assert cpu.cores is not None and sorted(c for core in cpu.cores for c in core) == cpu.affinity


def test_host_command_shows_features_and_smt_siblings(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import unilab.host.probe
    from tests.conftest import host
    from unilab.cli.main import main

    monkeypatch.setattr(unilab.host.probe, "probe_host", lambda *a, **k: host("cpu_smt4"))
    assert main(["host"]) == 0
    out = capsys.readouterr().out
    assert "  features avx2 avx512f avx512_bf16 amx_bf16 amx_tile avx512_fp16 avx_vnni\n" in out
    assert "  cores    2 physical, SMT siblings: [0, 2], [1, 3]\n" in out
