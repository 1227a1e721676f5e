"""`unilab mps` and the run's MPS check when the control binary hangs: a clear MpsError (or
UnilabError) with a fix, never an internal error; a daemon that started but could not be registered
is stopped, not orphaned; the registry is written atomically."""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import host
from tests.test_mps import FAKE_BIN
from unilab.errors import UnilabError
from unilab.host import mps_registry
from unilab.host.mps_registry import Registry, RegistryEntry, probe_service, read_registry, write_registry
from unilab.mps import service
from unilab.mps.service import MpsError
from unilab.run import mps_attach

FAKE = FAKE_BIN / "nvidia-cuda-mps-control"
HANG_TIMEOUT_S = 3.0


@pytest.fixture
def hanging_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A control binary that hangs (exec sleep: no child keeps its pipes open) where FAKE_MPS_HANG
    names the call (`daemon`: `-d`; `client`: stdin commands), and is the fake otherwise."""
    d = tmp_path / "bin"
    d.mkdir()
    wrapper = d / "nvidia-cuda-mps-control"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$FAKE_MPS_HANG" = daemon ] && [ "$1" = "-d" ]; then exec sleep 60; fi\n'
        'if [ "$FAKE_MPS_HANG" = client ] && [ "$1" != "-d" ]; then exec sleep 60; fi\n'
        f'exec {sys.executable} {FAKE} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    # Short enough for a quick test, long enough for the fake's start (a shell and a Python) on a
    # loaded machine: the calls that do not hang must not time out.
    monkeypatch.setattr(service, "CONTROL_TIMEOUT_S", HANG_TIMEOUT_S)
    monkeypatch.setattr(service, "KILL_WAIT_S", 2.0)
    return d


@pytest.fixture
def state(tmp_path: Path):
    yield tmp_path / "state"
    for e in read_registry(tmp_path / "state").services:  # never leave a fake daemon behind
        live = probe_service(e)
        if live.daemon_alive and live.daemon_pid:
            os.kill(live.daemon_pid, 9)


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not mps_registry._pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_hanging_daemon_start_is_a_clear_error(
    hanging_bin: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_HANG", "daemon")
    t0 = time.monotonic()
    with pytest.raises(MpsError, match=r"`nvidia-cuda-mps-control -d` for GPU 0 did not finish within 3 s") as info:
        service.start(host("one_h200"), "0", "g0", state)
    assert time.monotonic() - t0 < 10
    assert "daemon log" in info.value.fix
    assert read_registry(state).services == []


def test_a_hanging_quit_is_a_clear_error(hanging_bin: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = service.start(host("one_h200"), "0", "g0", state)
    monkeypatch.setenv("FAKE_MPS_HANG", "client")
    with pytest.raises(MpsError, match=r"`quit` to MPS service 'g0' .* did not finish within 3 s") as info:
        service.stop("g0", state)
    assert f"kill {svc.daemon_pid}" in info.value.fix
    assert [e.name for e in read_registry(state).services] == ["g0"]  # still registered: it still runs


def test_a_daemon_that_cannot_be_registered_is_stopped(
    hanging_bin: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []

    def refuse(registry: Registry, state_dir: Path | None = None) -> None:
        (entry,) = [e for e in registry.services if e.name == "g0"]
        assert entry.daemon_pid is not None
        started.append(entry.daemon_pid)
        raise UnilabError("cannot write the MPS service registry: the disk is full")

    monkeypatch.setattr(service, "write_registry", refuse)
    with pytest.raises(UnilabError, match="disk is full"):
        service.start(host("one_h200"), "0", "g0", state)
    assert started and _gone(started[0]), "the unregistered daemon was left running"


def test_a_stuck_unregistered_daemon_is_killed(hanging_bin: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registration fails and the daemon ignores `quit` (the client hangs): it is signalled."""
    started: list[int] = []

    def refuse(registry: Registry, state_dir: Path | None = None) -> None:
        started.append(registry.services[-1].daemon_pid or 0)
        monkeypatch.setenv("FAKE_MPS_HANG", "client")
        raise UnilabError("cannot write the MPS service registry")

    monkeypatch.setattr(service, "write_registry", refuse)
    with pytest.raises(UnilabError) as info:
        service.start(host("one_h200"), "0", "g0", state)
    assert started and _gone(started[0])
    assert "could not be stopped" not in info.value.detail


def test_a_hanging_get_server_list_is_a_clear_error(hanging_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MPS_HANG", "client")
    monkeypatch.setattr(mps_attach, "CONTROL_TIMEOUT_S", 0.5)
    with pytest.raises(UnilabError, match=r"did not answer within 0\.5 s") as info:
        mps_attach.server_pids("/nonexistent/pipe")
    assert "unilab mps" in info.value.fix


def test_a_failed_registry_write_is_a_clear_error_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    entry = RegistryEntry(name="g0", gpu_uuid="GPU-0", pipe_directory="/p", log_directory="/l")
    write_registry(Registry(services=[entry]), state)

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(UnilabError, match=r"cannot write the MPS service registry .*: the disk is full") as info:
        write_registry(Registry(), state)
    monkeypatch.undo()
    assert "mps status" in info.value.fix
    assert read_registry(state).services == [entry]
    assert [p.name for p in state.iterdir()] == ["services.json"]
