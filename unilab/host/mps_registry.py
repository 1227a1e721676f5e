"""The registry of MPS services that `unilab mps` starts: one JSON file in unilab's state
directory. Planning reads it to find, per GPU UUID, the pipe directory and daemon of a service;
training never starts or stops daemons."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from unilab.atomic import write_text_atomic
from unilab.errors import UnilabError
from unilab.host.facts import MpsServiceFacts

PID_FILE_NAME = "nvidia-cuda-mps-control.pid"
CONTROL_BINARY = "nvidia-cuda-mps-control"
CONTROL_TIMEOUT_S = 30.0  # one run of the control binary (`-d`, or a client command such as `quit`)


_PID_MAX = 4_194_304  # Linux's largest pid_max (2**22)


class RegistryEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    gpu_uuid: str
    pipe_directory: str
    log_directory: str
    daemon_pid: Annotated[int, Field(gt=0, le=_PID_MAX)] | None = None

    @field_validator("pipe_directory", "log_directory")
    @classmethod
    def _no_nul_byte(cls, v: str) -> str:
        # No path can hold one (it was edited in): every later use of the path would fail. A
        # relative path, which unilab wrote for a relative UNILAB_STATE_DIR before it made the
        # state directory absolute, stays readable (and its service stoppable).
        if "\0" in v:
            raise ValueError(f"a path cannot hold a NUL byte: {v!r}")
        return v


class Registry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    services: list[RegistryEntry] = []


def state_directory() -> Path:
    """unilab's MPS state directory: $UNILAB_STATE_DIR/mps, else $XDG_STATE_HOME/unilab/mps."""
    # Absolute: the registry records these paths, and a daemon and its clients started from other
    # working directories must find the same pipe directory.
    root = os.environ.get("UNILAB_STATE_DIR")
    if root:
        return Path(os.path.abspath(root)) / "mps"
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(os.path.abspath(xdg)) / "unilab" / "mps"


MAX_REGISTRY_BYTES = 1 << 20  # one entry per GPU service: a few hundred bytes each


def registry_path(state_dir: Path | None = None) -> Path:
    return (state_dir or state_directory()) / "services.json"


def read_registry(state_dir: Path | None = None) -> Registry:
    path = registry_path(state_dir)
    if not path.exists() and not path.is_symlink():
        return Registry()
    if path.is_symlink():  # written only as a plain file (write_registry); a link was planted
        raise UnilabError(
            f"the MPS service registry {path} is a symbolic link; unilab reads it only as a plain file",
            fix=f"remove {path}, then `unilab mps start` the services again",
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            text = f.read(MAX_REGISTRY_BYTES + 1).decode("utf-8")
        if len(text) > MAX_REGISTRY_BYTES:
            raise ValueError(f"larger than {MAX_REGISTRY_BYTES // 1024} KiB")
        return Registry.model_validate(json.loads(text))
    except (OSError, ValueError, ValidationError) as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the top level"
            why = f"{where}: {first['msg']}"
        else:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnilabError(
            f"the MPS service registry {path} cannot be read ({why})",
            fix=f"inspect or remove {path} (it lists the services `unilab mps start` registered; a daemon it "
            "named keeps running and can be stopped with nvidia-cuda-mps-control's `quit`)",
        ) from exc


def find_entry(name: str, state_dir: Path | None = None) -> RegistryEntry | None:
    """The registered service called ``name``, if any."""
    return next((e for e in read_registry(state_dir).services if e.name == name), None)


def _pid_alive(pid: int) -> bool:
    if not 0 < pid <= _PID_MAX:  # kill(0) and kill(-1) address process groups, not a daemon
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:  # a zombie (exited, not yet reaped) is not a running daemon
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _read_pid(pipe_dir: Path, fallback: int | None) -> int | None:
    try:
        pid = int((pipe_dir / PID_FILE_NAME).read_text().strip())
    except (OSError, ValueError):
        return fallback
    return pid if 0 < pid <= _PID_MAX else fallback


def probe_service(entry: RegistryEntry) -> MpsServiceFacts:
    """What is true now of one registered service: socket, pid file, daemon liveness, ownership."""
    pipe = Path(entry.pipe_directory)
    control = pipe / "control"
    try:
        sock = stat.S_ISSOCK(control.stat().st_mode)
    except OSError:
        sock = False
    try:
        st = pipe.stat()
        owner, mode = st.st_uid, f"{stat.S_IMODE(st.st_mode):04o}"
    except OSError:
        owner, mode = None, None
    pid = _read_pid(pipe, entry.daemon_pid)
    return MpsServiceFacts(
        name=entry.name,
        gpu_uuid=entry.gpu_uuid,
        pipe_directory=entry.pipe_directory,
        log_directory=entry.log_directory,
        control_socket_exists=sock,
        daemon_pid=pid,
        daemon_alive=pid is not None and _pid_alive(pid),
        pipe_directory_owner_uid=owner,
        pipe_directory_mode=mode,
    )


def write_registry(registry: Registry, state_dir: Path | None = None) -> None:
    """Replace the registry atomically so a crash never leaves half a file; a failed write is a
    UnilabError and leaves the previous registry as it was."""
    path = registry_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_text_atomic(
        path,
        registry.model_dump_json(indent=2) + "\n",
        "the MPS service registry",
        fix=f"free disk space or fix the permissions of {path.parent}, then run `unilab mps status`",
    )
