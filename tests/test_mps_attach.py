"""MPS in a run: the planned service is re-checked before anything starts, the rank's processes get
its environment, and after CUDA initialises the daemon must run a server for them (a fake control
daemon stands in for NVIDIA's; the GPU side runs in tools/gpu_check.sh)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, host
from tests.test_mps import FAKE_BIN
from unilab.errors import UnilabError
from unilab.host.mps_registry import probe_service, read_registry
from unilab.host.probe import probe_host
from unilab.mps import service
from unilab.plan.compile import compile_plan
from unilab.run import mps_attach
from unilab.spec.load import load_spec


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("UNILAB_STATE_DIR", str(tmp_path))
    # apply_env writes these into os.environ: set then delete, so monkeypatch records each one's
    # original value (or absence) and restores it after the test (a delenv of an absent key records nothing).
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    svc = service.start(host("one_h200"), "0", "train-gpu0", tmp_path / "mps")
    facts = host("one_h200").model_copy(update={"mps": probe_host(env={}, nvml=None, state_dir=tmp_path / "mps").mps})
    loaded = load_spec(
        ROOT / "specs/g1_dp2_cuda_mps.toml", ["training.devices=[0]", 'training.dp_gradient_wire_dtype="float32"']
    )
    plan = compile_plan(loaded.spec, facts, loaded.spec_dir)
    yield plan, svc, tmp_path / "mps"
    for e in read_registry(tmp_path / "mps").services:
        live = probe_service(e)
        if live.daemon_alive and live.daemon_pid:
            os.kill(live.daemon_pid, 9)


def test_revalidate_env_and_attach(started) -> None:
    plan, svc, _ = started
    att = mps_attach.revalidate(plan, 0)
    assert att is not None and att.service == "train-gpu0" and att.daemon_pid == svc.daemon_pid
    mps_attach.apply_env(att, svc.log_directory)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == plan.ranks[0].gpu_uuid
    assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == svc.pipe_directory
    # No client has attached: the daemon runs no server, and the run must not go on without MPS.
    with pytest.raises(UnilabError, match="runs no server"):
        mps_attach.confirm_attached(att)
    (Path(svc.pipe_directory) / "servers").write_text("51234\n")
    # A server runs, but for other processes only (say, the rank's collector): this one made its
    # CUDA context without MPS.
    (Path(svc.pipe_directory) / "clients-51234").write_text("51240\n")
    with pytest.raises(UnilabError, match=f"learner \\(pid {os.getpid()}\\) is not a client"):
        mps_attach.confirm_attached(att)
    (Path(svc.pipe_directory) / "clients-51234").write_text(f"51240\n{os.getpid()}\n")
    done = mps_attach.confirm_attached(att)
    assert done.server_pids == (51234,) and done.validated


def test_stopped_service_is_refused_before_start(started) -> None:
    plan, _, state = started
    service.stop("train-gpu0", state)
    with pytest.raises(UnilabError) as e:
        mps_attach.revalidate(plan, 0)
    assert "no longer registered" in e.value.summary and "unilab mps start --gpus" in e.value.fix


def test_dead_daemon_is_refused(started) -> None:
    plan, svc, _ = started
    os.kill(svc.daemon_pid, 9)
    deadline = time.monotonic() + 30.0  # until the kernel has taken it down (or it is a zombie)
    while _running(svc.daemon_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _running(svc.daemon_pid)
    with pytest.raises(UnilabError, match="is not running"):
        mps_attach.revalidate(plan, 0)


def test_no_mps_plan_needs_nothing() -> None:
    loaded = load_spec(ROOT / "specs/g1.toml")
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    assert mps_attach.revalidate(plan, 0) is None
