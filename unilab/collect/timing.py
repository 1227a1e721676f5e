"""Per-phase wall-clock and CPU-time accumulation for the collector loop, cheap enough to leave on.

Each phase boundary costs one ``perf_counter_ns`` call, one ``thread_time_ns`` call and a few
list updates (about 1-2 microseconds; ``thread_time_ns`` is a syscall on some kernels). CPU time
is the collector thread's own (``CLOCK_THREAD_CPUTIME_ID``): work done by physics worker
processes or a device is not in it, so wall minus CPU is time this thread spent waiting. On CUDA
the figures are host (enqueue) time unless ``cuda_sync`` is set, which synchronizes the device
at every boundary so the time of each phase is attributed to it (for profiling only: it
serializes the host and the device).
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns

import torch

PHASES: tuple[str, ...] = (
    "action_apply",
    "physics_step",
    "state_read",
    "termination",
    "reward",
    "events_commands",
    "observation",
    "finite_check",
    "reset_mask",
    "publication",
    "metrics",
    "packed_reset",
    "post_reset_observation",
    # With the update-state graph, state read .. metrics run as one replay (unilab.collect.update_graph).
    "update_state",
)


@dataclass(frozen=True)
class PhaseTiming:
    phase: str
    total_s: float
    calls: int
    cpu_s: float = 0.0  # the collector thread's CPU time in the phase

    @property
    def mean_us(self) -> float:
        return 1e6 * self.total_s / self.calls if self.calls else 0.0


class PhaseTimer:
    """Accumulates wall and thread-CPU nanoseconds per phase; ``lap(i)`` closes phase ``i`` and
    opens the next."""

    def __init__(self, phases: tuple[str, ...] = PHASES, *, enabled: bool = True, cuda_sync: bool = False) -> None:
        self.phases = phases
        self.index = {p: i for i, p in enumerate(phases)}
        self.enabled = enabled
        self.cuda_sync = cuda_sync and torch.cuda.is_available()
        self._total = [0] * len(phases)
        self._cpu = [0] * len(phases)
        self._calls = [0] * len(phases)
        self._t = 0
        self._c = 0

    def start(self) -> None:
        if self.enabled:
            if self.cuda_sync:
                torch.cuda.synchronize()
            self._t = perf_counter_ns()
            self._c = thread_time_ns()

    def lap(self, i: int) -> None:
        if not self.enabled:
            return
        if self.cuda_sync:
            torch.cuda.synchronize()
        now, cpu = perf_counter_ns(), thread_time_ns()
        self._total[i] += now - self._t
        self._cpu[i] += cpu - self._c
        self._calls[i] += 1
        self._t, self._c = now, cpu

    def skip(self) -> None:
        """Restart the clocks without charging any phase (time spent outside the loop)."""
        if self.enabled:
            self._t = perf_counter_ns()
            self._c = thread_time_ns()

    def reset(self) -> None:
        self._total = [0] * len(self.phases)
        self._cpu = [0] * len(self.phases)
        self._calls = [0] * len(self.phases)

    def wall_seconds(self) -> list[float]:
        """Cumulative wall seconds per phase, in ``phases`` order (cheaper than ``snapshot``)."""
        return [t * 1e-9 for t in self._total]

    def cpu_seconds(self) -> list[float]:
        """Cumulative thread-CPU seconds per phase, in ``phases`` order."""
        return [t * 1e-9 for t in self._cpu]

    def snapshot(self) -> dict[str, PhaseTiming]:
        return {
            p: PhaseTiming(p, self._total[i] * 1e-9, self._calls[i], self._cpu[i] * 1e-9)
            for i, p in enumerate(self.phases)
        }
