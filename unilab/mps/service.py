"""`unilab mps`: start, stop and inspect one NVIDIA MPS control daemon per GPU.

Each service has its own pipe and log directories under unilab's state directory and serves
exactly one GPU, selected by UUID through CUDA_VISIBLE_DEVICES. The registry records name, GPU
UUID, directories and daemon pid; `unilab plan` reads it. Training never starts or stops daemons.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from unilab.errors import UnilabError
from unilab.host.facts import GpuFacts, HostFacts, MpsServiceFacts
from unilab.host.mps_registry import (
    CONTROL_BINARY,
    CONTROL_TIMEOUT_S,
    PID_FILE_NAME,
    Registry,
    RegistryEntry,
    find_entry,
    probe_service,
    read_registry,
    registry_path,
    write_registry,
)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 15.0
KILL_WAIT_S = 5.0  # after a signal to a daemon that start() could not register


class MpsError(UnilabError):
    """An `unilab mps` request that cannot be carried out."""


@dataclass(frozen=True)
class ServiceDirs:
    pipe: Path
    log: Path


def service_dirs(state_dir: Path, name: str) -> ServiceDirs:
    return ServiceDirs(pipe=state_dir / name / "pipe", log=state_dir / name / "log")


def control_binary() -> str:
    path = shutil.which(CONTROL_BINARY)
    if path is None:
        raise MpsError(
            f"{CONTROL_BINARY} is not on PATH: the NVIDIA MPS tools are not installed here",
            fix="install the NVIDIA driver's MPS tools (e.g. the nvidia-utils package) on this GPU host",
        )
    return path


def _resolve_gpu(facts: HostFacts, gpu: str) -> GpuFacts:
    if not facts.nvidia.driver_present:
        raise MpsError(
            f"no NVIDIA driver: {facts.nvidia.nvml_error}", fix="run `unilab mps` on a host with NVIDIA GPUs"
        )
    matches = [g for g in facts.nvidia.gpus if (gpu.isdigit() and g.index == int(gpu)) or g.uuid == gpu]
    if not matches:
        known = ", ".join(f"{g.index}={g.uuid}" for g in facts.nvidia.gpus) or "none"
        raise MpsError(f"unknown GPU {gpu!r} (GPUs: {known})", fix="pass an NVML index or UUID from `unilab host`")
    g = matches[0]
    if g.mig_mode == "enabled":
        raise MpsError(
            f"GPU {g.index} ({g.uuid}) has MIG enabled; unilab does not run MPS on MIG devices",
            fix="choose a GPU without MIG",
        )
    return g


def _check_dir(path: Path, owner_fix: str | None = None) -> None:
    """Refuse a directory owned by another user or writable by others: an MPS pipe directory is
    how clients reach the daemon, and the state directory holds the registry that names them, so
    each must be ours alone. ``owner_fix``: the advice for a directory owned by someone else."""
    st = path.stat()
    if st.st_uid != os.getuid():
        raise MpsError(
            f"{path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            fix=owner_fix
            or f"remove it or choose another --name (unilab keeps its directories under {path.parent.parent})",
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise MpsError(
            f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})", fix=f"chmod 700 {path}"
        )


def _make_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    _check_dir(path)


def check_state_dir(state_dir: Path) -> None:
    """The state directory, once it exists, must be ours and writable by us alone: whoever can
    write in it can plant the registry (which daemon a run attaches to) or a symbolic link where
    unilab writes."""
    if state_dir.is_dir():
        _check_dir(
            state_dir,
            owner_fix=f"point UNILAB_STATE_DIR (or XDG_STATE_HOME) at a directory of your own, or remove {state_dir}",
        )


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialize registry updates between concurrent `unilab mps` commands. The lock file is
    opened without following a symbolic link and never truncated."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_state_dir(state_dir)
    path = state_dir / ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MpsError(
                f"{path} is a symbolic link; unilab opens its lock file only as a plain file", fix=f"remove {path}"
            ) from None
        raise MpsError(
            f"cannot open {path}: {exc.strerror or exc}", fix=f"fix the permissions of {state_dir}"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def service_env(entry: RegistryEntry, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["CUDA_VISIBLE_DEVICES"] = entry.gpu_uuid
    env["CUDA_MPS_PIPE_DIRECTORY"] = entry.pipe_directory
    env["CUDA_MPS_LOG_DIRECTORY"] = entry.log_directory
    return env


def _wait_for(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def _timed_out(what: str, fix: str) -> MpsError:
    return MpsError(f"{what} did not finish within {CONTROL_TIMEOUT_S:g} s; it was killed", fix=fix)


def _send_quit(binary: str, entry: RegistryEntry) -> subprocess.CompletedProcess[str]:
    """`quit` on the daemon's control pipe; raises TimeoutExpired after CONTROL_TIMEOUT_S."""
    return subprocess.run(
        [binary], input="quit\n", env=service_env(entry), capture_output=True, text=True, timeout=CONTROL_TIMEOUT_S
    )


def _stop_unregistered(binary: str, entry: RegistryEntry) -> str:
    """A daemon that start() launched but could not register would be orphaned: no `unilab mps`
    command could find it. Stop it; return "" once it is gone, else a line naming the leftover."""
    if not probe_service(entry).daemon_alive:
        return ""
    try:
        _send_quit(binary, entry)
    except (OSError, subprocess.TimeoutExpired):
        pass  # the signals below stop it instead
    if _wait_for(lambda: not probe_service(entry).daemon_alive, KILL_WAIT_S):
        return ""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pid = probe_service(entry).daemon_pid
        if pid is None:
            break
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return ""
        except PermissionError:
            break
        if _wait_for(lambda: not probe_service(entry).daemon_alive, KILL_WAIT_S):
            return ""
    live = probe_service(entry)
    return (
        f"the daemon it started (pid {live.daemon_pid}) could not be stopped and is not registered: "
        f"kill {live.daemon_pid} and remove {entry.pipe_directory}"
    )


def start(facts: HostFacts, gpu: str, name: str, state_dir: Path) -> MpsServiceFacts:
    """Start one daemon for one GPU and register it. Refuses instead of guessing."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise MpsError(
            f"service name {name!r} is not a plain name", fix="use letters, digits, '-', '_', e.g. train-gpu0"
        )
    binary = control_binary()
    g = _resolve_gpu(facts, gpu)
    dirs = service_dirs(state_dir, name)
    with _locked(state_dir):
        reg = read_registry(state_dir)
        for e in reg.services:
            live = probe_service(e)
            if e.name == name and live.daemon_alive:
                raise MpsError(
                    f"MPS service {name!r} is already running (pid {live.daemon_pid}, GPU {e.gpu_uuid})",
                    fix=f"use it as is, or `unilab mps stop --name {name}` first",
                )
            if e.name != name and e.gpu_uuid == g.uuid and live.daemon_alive:
                raise MpsError(
                    f"GPU {g.index} ({g.uuid}) is already served by MPS service {e.name!r}",
                    fix=f"use --name {e.name}, or `unilab mps stop --name {e.name}` first",
                )
        for d in (dirs.pipe, dirs.log):
            if d.exists():
                _check_dir(d)
        _make_private_dir(dirs.pipe)
        _make_private_dir(dirs.log)
        entry = RegistryEntry(name=name, gpu_uuid=g.uuid, pipe_directory=str(dirs.pipe), log_directory=str(dirs.log))
        # Output goes to a file, not a pipe: the daemon inherits our descriptors, and a pipe it
        # keeps open would make us wait for it forever.
        out_path = dirs.log / "control-start.out"
        try:
            with open(out_path, "w") as out:
                r = subprocess.run(
                    [binary, "-d"],
                    env=service_env(entry),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=CONTROL_TIMEOUT_S,
                )
        except subprocess.TimeoutExpired:
            err = _timed_out(
                f"`{CONTROL_BINARY} -d` for GPU {g.index}", f"read the daemon log in {dirs.log}, then retry"
            )
            _note_leftover(err, _stop_unregistered(binary, entry))  # it may have daemonized before hanging
            raise err from None
        if r.returncode != 0:
            said = out_path.read_text(errors="replace").strip()[:300]
            raise MpsError(
                f"{CONTROL_BINARY} -d failed for GPU {g.index} (exit {r.returncode}): {said}",
                fix=f"read the daemon log in {dirs.log}",
            )
        try:
            # Ready once both its control socket and its pid file exist: the daemon writes them one
            # after the other, and an entry registered without its pid could not be stopped by pid.
            def ready() -> bool:
                facts = probe_service(entry)
                return facts.control_socket_exists and facts.daemon_pid is not None

            if not _wait_for(ready, START_TIMEOUT_S):
                raise MpsError(
                    f"the MPS daemon for GPU {g.index} did not create {dirs.pipe}/control and its pid file "
                    f"within {START_TIMEOUT_S:.0f} s",
                    fix=f"read the daemon log in {dirs.log}",
                )
            pid = probe_service(entry).daemon_pid
            registered = entry.model_copy(update={"daemon_pid": pid})
            others = [e for e in reg.services if e.name != name]
            write_registry(Registry(services=[*others, registered]), state_dir)
        except BaseException as exc:  # started but not registered: stop it rather than orphan it
            leftover = _stop_unregistered(binary, entry)
            if isinstance(exc, UnilabError):
                _note_leftover(exc, leftover)
            elif leftover:
                print(f"warning: {leftover}", file=sys.stderr)
            raise
        return probe_service(registered)


def _note_leftover(exc: UnilabError, note: str) -> None:
    if note:
        exc.detail = f"{exc.detail}; {note}" if exc.detail else note


def stop(name: str, state_dir: Path) -> MpsServiceFacts:
    """Send `quit` to the named daemon, wait for it to exit, and unregister it."""
    with _locked(state_dir):
        reg = read_registry(state_dir)
        entry = next((e for e in reg.services if e.name == name), None)
        if entry is None:
            known = ", ".join(e.name for e in reg.services) or "none"
            raise MpsError(f"no MPS service named {name!r} (registered: {known})", fix="see `unilab mps status`")
        live = probe_service(entry)
        if live.daemon_alive:
            binary = control_binary()
            try:
                r = _send_quit(binary, entry)
            except subprocess.TimeoutExpired:
                raise _timed_out(
                    f"`quit` to MPS service {name!r} (pid {live.daemon_pid})",
                    f"read the daemon log in {entry.log_directory}; if the daemon is stuck, kill {live.daemon_pid} "
                    f"and run `unilab mps stop --name {name}` again",
                ) from None
            if r.returncode != 0:
                raise MpsError(
                    f"`quit` to MPS service {name!r} failed (exit {r.returncode}): "
                    f"{(r.stderr or r.stdout).strip()[:300]}",
                    fix=f"read the daemon log in {entry.log_directory}",
                )
            if not _wait_for(lambda: not probe_service(entry).daemon_alive, STOP_TIMEOUT_S):
                raise MpsError(
                    f"MPS service {name!r} (pid {live.daemon_pid}) did not exit within "
                    f"{STOP_TIMEOUT_S:.0f} s of `quit` (clients may still be attached)",
                    fix=f"stop the clients, or kill {live.daemon_pid}",
                )
        write_registry(Registry(services=[e for e in reg.services if e.name != name]), state_dir)
        return live


def status(state_dir: Path) -> list[MpsServiceFacts]:
    check_state_dir(state_dir)
    return [probe_service(e) for e in read_registry(state_dir).services]


def find(name: str, state_dir: Path) -> RegistryEntry:
    entry = find_entry(name, state_dir)
    if entry is None:
        raise MpsError(f"no MPS service named {name!r}", fix="see `unilab mps status`")
    return entry


__all__ = ["PID_FILE_NAME", "MpsError", "find", "registry_path", "service_env", "start", "status", "stop"]
