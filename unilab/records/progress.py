"""The live progress line: one line rewritten in place on a terminal, one line per interval
otherwise (so CI logs and `tee` stay readable)."""

from __future__ import annotations

import sys
from typing import TextIO


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = int(seconds)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


class ProgressLine:
    def __init__(self, total_env_steps: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total_env_steps
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self._width = 0

    def note(self, text: str) -> None:
        """A line of its own above the progress line (the run's layout at start)."""
        if not self.enabled:
            return
        self.stream.write(text + "\n")
        self.stream.flush()

    def update(self, env_steps: int, sps: float, ups: float, mean_return: float | None, elapsed: float) -> None:
        if not self.enabled:
            return
        frac = min(1.0, env_steps / self.total)
        eta = (self.total - env_steps) / sps if sps > 0 else float("inf")
        ret = f"{mean_return:8.2f}" if mean_return is not None else "      --"
        line = (
            f"{frac * 100:5.1f}%  env steps {env_steps:>11,}/{self.total:,}  {sps:8,.0f} steps/s  "
            f"{ups:7,.1f} updates/s  return {ret}  elapsed {_fmt_eta(elapsed)}  ETA {_fmt_eta(eta)}"
        )
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


def cpu_ranges(ids: list[int]) -> str:
    """CPU ids as ranges: [0, 1, 2, 5] -> 0-2,5."""
    runs: list[list[int]] = []
    for c in sorted(ids):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
