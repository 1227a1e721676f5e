"""Graceful stop on the first SIGINT/SIGTERM: the rank loop polls the flag and ends the run with a
final checkpoint. A second signal falls through to the default handler (stop at once)."""

from __future__ import annotations

import signal
from typing import Any


class StopFlag:
    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = signum
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def __call__(self) -> bool:
        return self.signal is not None
