"""One status line on a terminal's stderr, rewritten at most every half second and cleared at the
end; nothing when stderr is not a terminal (a log file gets the report, not the redraws)."""

from __future__ import annotations

import sys
import time


class StatusLine:
    def __init__(self, enabled: bool) -> None:
        self.on = enabled and sys.stderr.isatty()
        self._last = 0.0
        self._shown = False

    def update(self, text: str) -> None:
        now = time.monotonic()
        if not self.on or now - self._last < 0.5:
            return
        self._last, self._shown = now, True
        sys.stderr.write(f"\r{text}")
        sys.stderr.flush()

    def close(self) -> None:
        if self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
