"""Who runs a run directory: the exclusive lock an apply holds on it for as long as it runs, and
what a `running` manifest means when nobody holds that lock any more.

An apply that is killed without a word (kill -9, the OOM killer, a lost machine) cannot record
its end, so its manifest keeps saying `running`. The lock is released by the kernel when the
process dies, whatever killed it: a `running` manifest of a directory whose lock is free, on the
host that ran it, names an apply that was killed. Nothing here changes a run's files.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from unilab.errors import UnilabError
from unilab.manifest.models import ApplySession, Manifest
from unilab.records.run_dir import RunDir


def lock_run_dir(run_dir: Path) -> int | None:
    """An exclusive lock on the run directory for as long as this process runs it (the returned
    descriptor; closing it, or the process ending, releases it): two applies on one directory would
    interleave its events and checkpoints. None when the directory does not exist (yet)."""
    if not run_dir.is_dir():
        return None
    try:  # the lock is on the directory itself: nothing is added to the run's files
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UnilabError(f"cannot open run directory {run_dir}: {exc.strerror}", fix="check its permissions") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UnilabError(
            f"run directory {run_dir} is in use by another unilab apply",
            fix="wait for that run to finish, or stop it (Ctrl-C), then resume it once",
        ) from None
    return fd


def killed_session(run_dir: Path, manifest: Manifest) -> ApplySession | None:
    """The apply a `running` manifest names when no process runs the directory any more: it was
    killed. None when the manifest says otherwise, when an apply holds the lock, or when the apply
    ran on another host (its lock may live in that host's kernel, not this one's)."""
    if manifest.status != "running" or RunDir(run_dir).held_by_an_apply() is not False:
        return None
    last = manifest.recorded_sessions()[-1]
    if last.hostname is not None and last.hostname != socket.gethostname():
        return None
    return last


def describe_killed(run_dir: Path, session: ApplySession) -> str:
    """One sentence naming a killed apply."""
    who = f"pid {session.pid} on {session.hostname}" if session.pid is not None else "its process"
    return (
        f"{run_dir}/manifest.json says `running`, but no process runs the run any more: its apply "
        f"({who}, started {session.started_at}) was killed without a word (kill -9, the OOM killer, a lost "
        "machine)"
    )


def killed_note(run_dir: Path) -> str | None:
    """`describe_killed` of the run directory's manifest when its apply was killed; None otherwise,
    and when the manifest cannot be read."""
    manifest = RunDir(run_dir).read_manifest()
    session = None if manifest is None else killed_session(run_dir, manifest)
    return None if session is None else describe_killed(run_dir, session)


def killed_before_resume(run_dir: Path) -> str | None:
    """Called by a resume holding the run directory's lock: a manifest that still says `running`
    names an apply that was killed (the sentence for it), else None."""
    manifest = RunDir(run_dir).read_manifest()
    if manifest is None or manifest.status != "running":
        return None
    return describe_killed(run_dir, manifest.recorded_sessions()[-1])


RESUME_KILLED_FIX = "resume it from its newest checkpoint: unilab apply --resume {run_dir}"
