"""Reading a file the user names (spec, plan, host facts, manifest): only a regular file of sane
size. A device (`/dev/zero` grew the process to gigabytes) or a named pipe (blocked for ever) is
refused by name. Standard library only: the planner reads through it."""

from __future__ import annotations

import os
import stat
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
