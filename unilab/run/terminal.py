"""A training run's terminal output is a courtesy, not part of the run: a closed pipe
(`unilab apply ... | head`), a reader that quit, or a hung-up terminal silences it instead of ending
the run. The run's record (manifest, events.jsonl, tensorboard, checkpoints) is written to files."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class LenientStream:
    """A text stream that, once a write fails, drops every further write (and points its file
    descriptor at /dev/null, so that the exit-time flush and child processes sharing it are quiet)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._inner.write(text)
            except Exception as exc:  # narrowed in _lose: only a lost terminal is ours to absorb
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._inner.flush()
            except Exception as exc:
                self._lose(exc)

    def _lose(self, exc: Exception) -> None:
        # The CLI's stdout guard wraps an OSError in its own error type (with the OSError as `cause`).
        if not isinstance(exc, OSError) and not isinstance(getattr(exc, "cause", None), OSError):
            raise exc
        self.lost = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._inner.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextmanager
def terminal_may_go() -> Iterator[None]:
    """Within the block, sys.stdout and sys.stderr survive the loss of the terminal or pipe."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = LenientStream(out), LenientStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
