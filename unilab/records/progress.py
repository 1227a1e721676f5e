"""A rank's progress record (`Progress`: what the rank loop counts and the recorder reports in the
events and the manifest) and the live progress line: one line rewritten in place on a terminal,
one line per interval otherwise (so CI logs and `tee` stay readable)."""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from unilab.collect.collector_client import CollectorStats


@dataclass
class Progress:
    """What the rank has done so far: counters, timing sums and the latest episode metrics."""

    env_steps: int = 0
    syncs: int = 0
    updates: int = 0
    episodes: int = 0
    transitions_produced: int = 0
    transitions_stored: int = 0
    transitions_nonfinite: int = 0
    nonfinite_resets: int = 0
    update_s: float = 0.0  # gradient updates (with data parallel, their gradient all-reduces too)
    sample_s: float = 0.0  # replay sampling and batch normalization for those updates
    grad_sync_s: float = 0.0  # data-parallel gradient all-reduces, inside update_s (DpContext.sync_s)
    updates_on_shared_cpus: int = 0  # this session's updates on all planned threads (LearnerThreads)
    wait_s: float = 0.0
    dp_sync_s: float = 0.0
    collector_wait_s: float = 0.0
    last_return: float | None = None
    last_length: float | None = None
    # Over the episodes completed between the last two folds: the share that terminated (not
    # truncated) and each reward term's mean per episode (the terms of last_return).
    last_terminated_fraction: float | None = None
    last_reward_terms: dict[str, float] = field(default_factory=dict)
    # Learning-health figures (the collector's action saturation and its task's diagnostics), each a
    # mean per env step over the env steps published between the last two folds that saw new ones;
    # `health_env_steps` counts the env steps published so far (a log reports a fresh window only).
    last_health: dict[str, float] = field(default_factory=dict)
    health_env_steps: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)
    phase_cpu_s: dict[str, float] = field(default_factory=dict)
    physics_replays: int = 0
    learner_graph: Any = None  # unilab.learn.graph.GraphStats when the plan enabled the learner graph
    collector_graph: dict[str, Any] | None = None  # the collector update-state graph's evidence
    physics_warnings: dict[str, int] = field(default_factory=dict)
    episodes_base: int = 0  # episodes before this session (a resumed run's)
    # The collector's cumulative (episodes, return sum, length sum) at the previous fold.
    _seen: tuple[int, float, float] = (0, 0.0, 0.0)
    # (episodes, return sum, length sum) of each recent fold that saw episodes end, for a mean over
    # enough episodes to stand for the policy (the last fold of a run may hold one fall).
    _recent: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=4096))
    _seen_terms: tuple[float, dict[str, float]] = (0.0, {})
    _seen_health: dict[str, float] = field(default_factory=dict)

    def counters_state(self) -> dict[str, int]:
        return {"env_steps": self.env_steps, "syncs": self.syncs, "updates": self.updates, "episodes": self.episodes}

    def restore_counters(self, c: dict[str, int]) -> None:
        """A resumed run's counters, as `counters_state` saved them."""
        self.env_steps, self.syncs, self.updates = c["env_steps"], c["syncs"], c["updates"]
        self.episodes = self.episodes_base = c["episodes"]

    def recent_episodes(self, at_least: int) -> tuple[int, float, float] | None:
        """(episodes, mean return, mean length) over the newest folds that together hold at least
        ``at_least`` episodes of this session (all of them when fewer ended); None before any."""
        n, ret, length = 0, 0.0, 0.0
        for k, r, ln in reversed(self._recent):
            n, ret, length = n + k, ret + r, length + ln
            if n >= at_least:
                break
        return None if n == 0 else (n, ret / n, length / n)

    def fold(self, s: CollectorStats) -> None:
        """Take in the collector's cumulative counters; the mean return and length are over the
        episodes completed since the previous fold."""
        new = s.episodes - self._seen[0]
        if new > 0:
            returns, lengths = s.return_sum - self._seen[1], s.length_sum - self._seen[2]
            self.last_return, self.last_length = returns / new, lengths / new
            self._recent.append((new, returns, lengths))
            terminated, sums = self._seen_terms
            self.last_terminated_fraction = (s.terminated - terminated) / new
            self.last_reward_terms = {k: (v - sums.get(k, 0.0)) / new for k, v in s.reward_term_sums.items()}
        self._seen = (s.episodes, s.return_sum, s.length_sum)
        self._seen_terms = (s.terminated, s.reward_term_sums)
        steps = s.health_env_steps - self.health_env_steps
        if steps > 0:
            seen = self._seen_health
            self.last_health = {k: (v - seen.get(k, 0.0)) / steps for k, v in s.health_sums.items()}
            self.health_env_steps, self._seen_health = s.health_env_steps, s.health_sums
        self.episodes = self.episodes_base + s.episodes
        self.nonfinite_resets = s.nonfinite
        self.collector_wait_s = s.wait_s
        self.phase_s = s.phase_s
        self.phase_cpu_s = s.phase_cpu_s
        self.physics_replays = s.physics_replays
        self.collector_graph = s.collector_graph
        self.physics_warnings = s.physics_warnings


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
