"""`unilab mps`: every refusal, and a full start/stop cycle against a fake control binary that
really daemonizes and serves a unix control socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, host
from unilab.errors import UnilabError
from unilab.host.mps_registry import probe_service, read_registry
from unilab.mps import service
from unilab.mps.service import MpsError

FAKE_BIN = FIXTURES / "fake_mps"


@pytest.fixture
def fake_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture
def state(tmp_path: Path):
    yield tmp_path / "state"
    # Never leave a fake daemon behind.
    for e in read_registry(tmp_path / "state").services:
        live = probe_service(e)
        if live.daemon_alive and live.daemon_pid:
            os.kill(live.daemon_pid, 9)


def test_start_status_env_stop(fake_path: None, state: Path) -> None:
    svc = service.start(host("one_h200"), "0", "train-gpu0", state)
    uuid = host("one_h200").nvidia.gpus[0].uuid
    assert svc.control_socket_exists and svc.daemon_alive and svc.gpu_uuid == uuid
    assert svc.pipe_directory_mode == "0700"
    env = json.loads((Path(svc.log_directory) / "env.json").read_text())
    assert env == {
        "CUDA_VISIBLE_DEVICES": uuid,
        "CUDA_MPS_PIPE_DIRECTORY": svc.pipe_directory,
        "CUDA_MPS_LOG_DIRECTORY": svc.log_directory,
    }
    (entry,) = read_registry(state).services
    assert entry.daemon_pid == svc.daemon_pid
    assert [s.name for s in service.status(state)] == ["train-gpu0"]
    with pytest.raises(MpsError, match="already running"):
        service.start(host("one_h200"), "0", "train-gpu0", state)
    with pytest.raises(MpsError, match="already served by MPS service 'train-gpu0'"):
        service.start(host("one_h200"), "0", "other", state)
    stopped = service.stop("train-gpu0", state)
    assert stopped.daemon_pid == svc.daemon_pid
    assert read_registry(state).services == []
    assert not probe_service(entry).daemon_alive


def test_start_registers_the_pid_of_a_daemon_that_writes_it_after_its_socket(
    fake_path: None, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's control socket and pid file appear one after the other; `start` waits for both,
    so the registry can always name the process `unilab mps stop` must reach."""
    monkeypatch.setenv("FAKE_MPS_PID_LATE_S", "0.5")
    svc = service.start(host("one_h200"), "0", "g0", state)
    (entry,) = read_registry(state).services
    assert entry.daemon_pid is not None and entry.daemon_pid == svc.daemon_pid
    assert service.stop("g0", state).daemon_pid == entry.daemon_pid


def test_plan_uses_a_started_service(fake_path: None, state: Path) -> None:
    from unilab.host.probe import probe_host
    from unilab.plan.compile import compile_plan
    from unilab.spec.load import load_spec

    svc = service.start(host("one_h200"), "0", "train-gpu0", state)
    facts = host("one_h200").model_copy(update={"mps": probe_host(env={}, nvml=None, state_dir=state).mps})
    loaded = load_spec(
        ROOT / "specs/g1_dp2_cuda_mps.toml", ["training.devices=[0]", 'training.dp_gradient_wire_dtype="float32"']
    )
    plan = compile_plan(loaded.spec, facts, loaded.spec_dir)
    assert plan.cuda_process_sharing.effective == "mps"
    assert plan.ranks[0].mps is not None and plan.ranks[0].mps.daemon_pid == svc.daemon_pid
    service.stop("train-gpu0", state)


def test_refuses_without_binary(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MpsError, match="not on PATH"):
        service.start(host("one_h200"), "0", "g0", state)


def test_refuses_unknown_gpu_mig_and_no_driver(fake_path: None, state: Path) -> None:
    with pytest.raises(MpsError, match="unknown GPU '3'"):
        service.start(host("one_h200"), "3", "g3", state)
    with pytest.raises(MpsError, match="MIG enabled"):
        service.start(host("mig_gpu"), "0", "g0", state)
    with pytest.raises(MpsError, match="no NVIDIA driver"):
        service.start(host("cpu_laptop"), "0", "g0", state)


def test_refuses_bad_name(fake_path: None, state: Path) -> None:
    with pytest.raises(MpsError, match="not a plain name"):
        service.start(host("one_h200"), "0", "../etc", state)


def test_refuses_pipe_dir_writable_by_others(fake_path: None, state: Path) -> None:
    pipe = service.service_dirs(state, "g0").pipe
    pipe.mkdir(parents=True)
    pipe.chmod(0o777)
    with pytest.raises(MpsError, match="writable by other users"):
        service.start(host("one_h200"), "0", "g0", state)


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_refuses_pipe_dir_owned_by_another_user(fake_path: None, state: Path) -> None:
    pipe = service.service_dirs(state, "g0").pipe
    pipe.mkdir(parents=True, mode=0o700)
    os.chown(pipe, 12345, 12345)
    with pytest.raises(MpsError, match="owned by uid 12345"):
        service.start(host("one_h200"), "0", "g0", state)


def test_refuses_a_state_dir_writable_by_others(fake_path: None, state: Path) -> None:
    """The state directory holds the registry that tells a run which daemon to attach to: like a
    pipe directory, it must not be writable by other users."""
    state.mkdir(parents=True)
    state.chmod(0o777)
    for attempt in (lambda: service.start(host("one_h200"), "0", "g0", state), lambda: service.stop("g0", state)):
        with pytest.raises(MpsError, match="writable by other users"):
            attempt()
    with pytest.raises(MpsError, match="writable by other users"):
        service.status(state)
    assert not (state / ".lock").exists() and not (state / "g0").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_refuses_a_state_dir_owned_by_another_user(fake_path: None, state: Path) -> None:
    state.mkdir(parents=True, mode=0o700)
    os.chown(state, 12345, 12345)
    with pytest.raises(MpsError, match="owned by uid 12345") as err:
        service.start(host("one_h200"), "0", "g0", state)
    assert "UNILAB_STATE_DIR" in err.value.fix


def test_symbolic_links_in_the_state_dir_are_never_followed(fake_path: None, state: Path, tmp_path: Path) -> None:
    """A link planted at the lock file, the registry or the registry's temp file is refused or
    replaced, and its target is neither truncated nor written."""
    target = tmp_path / "precious"
    target.write_text("keep me")
    state.mkdir(parents=True, mode=0o700)
    (state / ".lock").symlink_to(target)
    with pytest.raises(MpsError, match="is a symbolic link"):
        service.start(host("one_h200"), "0", "g0", state)
    assert target.read_text() == "keep me"
    (state / ".lock").unlink()
    (state / "services.json").symlink_to(target)
    with pytest.raises(UnilabError, match="is a symbolic link"):
        service.start(host("one_h200"), "0", "g0", state)
    with pytest.raises(UnilabError, match="is a symbolic link"):
        read_registry(state)
    assert target.read_text() == "keep me"
    (state / "services.json").unlink()
    (state / f".services.json.{os.getpid()}.tmp").symlink_to(target)
    service.start(host("one_h200"), "0", "g0", state)
    assert target.read_text() == "keep me"
    assert [e.name for e in read_registry(state).services] == ["g0"]
    assert not (state / "services.json").is_symlink()
    service.stop("g0", state)


def test_daemon_start_failure_is_reported(fake_path: None, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(MpsError, match="already running"):
        service.start(host("one_h200"), "0", "g0", state)
    assert read_registry(state).services == []


def test_stop_unknown_name(state: Path) -> None:
    with pytest.raises(MpsError, match="no MPS service named 'nope'"):
        service.stop("nope", state)


def test_status_without_nvidia_tools_is_an_error_with_a_fix(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": os.path.dirname(sys.executable), "UNILAB_STATE_DIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "mps", "status"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and "nvidia-cuda-mps-control is not on PATH" in lines[0]
    assert lines[1].startswith("fix: install the NVIDIA driver's MPS tools")


def test_status_and_env_through_the_cli(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}", "UNILAB_STATE_DIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "mps", "status"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and "no MPS services registered" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "mps", "env", "--name", "x"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert r.returncode == 1 and r.stderr.startswith("error: no MPS service named 'x'")


def test_a_registered_service_whose_daemon_died_is_not_handed_out_or_called_stopped(
    fake_path: None, tmp_path: Path
) -> None:
    import time

    state = tmp_path / "mps"  # the CLI's state directory under UNILAB_STATE_DIR=tmp_path
    svc = service.start(host("one_h200"), "0", "gone", state)
    os.kill(svc.daemon_pid, 9)
    deadline = time.monotonic() + 10
    while probe_service(read_registry(state).services[0]).daemon_alive and time.monotonic() < deadline:
        time.sleep(0.02)
    env = {**os.environ, "UNILAB_STATE_DIR": str(tmp_path)}
    mps = [sys.executable, "-m", "unilab", "mps"]
    r = subprocess.run([*mps, "env", "--name", "gone"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "registered but not running" in r.stderr and "export" not in r.stdout
    r = subprocess.run([*mps, "stop", "--name", "gone"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "was not running" in r.stdout and "unregistered" in r.stdout, r.stdout + r.stderr
    assert read_registry(state).services == []
