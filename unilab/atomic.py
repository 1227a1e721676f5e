"""Atomic file replacement: write a temp file in the same directory, fsync it, rename it over the
target, fsync the directory. Readers see the old file or the new one, never half of either."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from unilab.errors import UnilabError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


RUN_FILE_FIX = "free disk space (or choose another run.output_dir) and resume with --resume RUN_DIR"


def write_atomic(path: Path, write: Callable[[IO[bytes]], object], what: str, fix: str = RUN_FILE_FIX) -> None:
    """`fix` is the advice on failure; the default suits files of a run directory."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # A leftover of this pid is removed (a link, not its target), and the temp file is created
        # anew, never through a symbolic link planted at its name.
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        why = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        if fix == RUN_FILE_FIX and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            fix = f"make {path.parent} writable by this user, then resume with --resume RUN_DIR"
        raise UnilabError(
            f"cannot write {what} {path}: {why}",
            detail="the previous version of the file, if any, is unchanged",
            fix=fix,
        ) from exc
    except BaseException:  # e.g. KeyboardInterrupt mid-write: the target is untouched, leave no temp file
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, what: str, fix: str = RUN_FILE_FIX) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")), what, fix)


def check_out_path(out: Path, example: str, flag: str = "--out") -> None:
    """Refuse an output path (``flag``, e.g. --out) that cannot become a file: a directory, or one in a
    missing directory. ``example`` is a file name to suggest in place of a directory."""
    if out.is_symlink():  # replacing it would replace the link, not write through it
        raise UnilabError(
            f"{flag} {out} is a symbolic link; unilab replaces files whole, so it would replace the link",
            fix=f"pass the file it points to ({flag} {out.resolve()}) or another name",
        )
    if out.is_dir():
        raise UnilabError(f"{flag} {out} is a directory", fix=f"pass a file name, e.g. {flag} {out / example}")
    if out.exists() and not out.is_file():
        raise UnilabError(
            f"{flag} {out} is not a regular file (a device, pipe or socket); unilab would replace it with one",
            fix=f"pass a regular file name, e.g. {flag} {example}",
        )
    if out.parent.exists() and not out.parent.is_dir():
        raise UnilabError(
            f"cannot write {out}: {out.parent} is a file, not a directory",
            fix=f"pass a file name in an existing directory, e.g. {flag} {out.parent.parent / example}",
        )
    if not out.parent.is_dir():
        raise UnilabError(
            f"cannot write {out}: directory {out.parent} does not exist", fix=f"create it first (mkdir -p {out.parent})"
        )
