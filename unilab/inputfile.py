"""Reading a file the user names (spec, plan, host facts, manifest): only a regular file of sane
size. A device (`/dev/zero` grew the process to gigabytes) or a named pipe (blocked for ever) is
refused by name; an OS, decoding or nesting error while reading is one clear paragraph (`file_error`,
`reading`). Standard library only: the planner reads through it."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from unilab.errors import UnilabError

MAX_INPUT_BYTES = 64 * 2**20  # far above any spec, plan, host facts or manifest


def read_input(path: Path, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them: a missing file, a directory or a
    permission problem raises the OSError for the caller's own wording; a non-regular or oversized
    file raises UnilabError naming ``what`` (e.g. "spec file")."""
    _check_regular(path, what)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnilabError(
            f"{what} {path} is larger than {limit // 2**20} MiB: not a {what.removesuffix(' file')}",
            fix=f"pass the {what} itself",
        )
    return data


def read_input_head(path: Path, what: str, size: int) -> bytes:
    """The first ``size`` bytes of ``path`` (same checks as ``read_input``, without the size cap)."""
    _check_regular(path, what)
    with open(path, "rb") as f:
        return f.read(size)


def _check_regular(path: Path, what: str) -> None:
    mode = os.stat(path).st_mode  # follows links; a missing file raises FileNotFoundError here
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # a directory: open() names it
        raise UnilabError(
            f"{what} {path} is not a regular file (a device, pipe or socket)",
            fix=f"pass a regular {what}",
        )


_OS_FIX = {
    errno.EACCES: "give this user access to it (check the file's and its directories' permissions)",
    errno.EPERM: "give this user access to it (check the file's and its directories' permissions)",
    errno.ENOSPC: "free disk space, or write somewhere else",
    errno.EDQUOT: "free disk space (quota exceeded), or write somewhere else",
    errno.EROFS: "write to a writable file system",
    errno.EISDIR: "pass a file, not a directory",
    errno.ENOTDIR: "check the path: one of its parents is a file, not a directory",
    errno.ENOENT: "check the path",
    errno.EEXIST: "choose a path that does not exist yet, or remove the existing one",
}


def file_error(exc: BaseException, path: Path | str | None = None, what: str = "file") -> UnilabError | None:
    """The one-paragraph error for an OS error, a non-UTF-8 file or a too deeply nested document;
    None for any other exception. `path` is used when the exception does not name one."""
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else path
        why = exc.strerror or type(exc).__name__
        summary = f"cannot access {what} {where}: {why}" if where is not None else f"a file operation failed: {why}"
        return UnilabError(summary, fix=_OS_FIX.get(exc.errno or 0, "check the path and its permissions"))
    if isinstance(exc, UnicodeDecodeError):
        where = f" {path}" if path is not None else ""
        return UnilabError(
            f"{what}{where} is not UTF-8 text (byte {exc.start}: {exc.reason})",
            fix="pass a UTF-8 text file (a spec or a plan written by `unilab plan`), not a binary file",
        )
    if isinstance(exc, RecursionError):
        where = f" {path}" if path is not None else ""
        return UnilabError(
            f"{what}{where} is nested too deeply to read",
            fix=f"a unilab {what.removesuffix(' file')} nests a few levels at most: check the file for runaway [ or {{",
        )
    return None


@contextmanager
def reading(path: Path, what: str) -> Iterator[None]:
    """Turn OS, decoding and nesting errors while reading `path` into one clear paragraph."""
    try:
        yield
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        err = file_error(exc, path, what)
        if err is None:  # file_error covers every class caught above; never silence one it does not
            raise
        raise err from None
