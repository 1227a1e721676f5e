"""The loop every rank runs, whatever its algorithm: start the collector, wait for its first
observation, then advance one unit at a time (a sync of the off-policy learners, a rollout and its
update for PPO) until the rank's share of the budget, logging on the clock, checkpointing on the
env-step cadence, and stopping with the other ranks (data parallel) or on a stop request. The
drivers (`unilab.run.offpolicy`, `unilab.run.onpolicy`) say how a unit runs and what their state
and metrics are; the loop owns everything around it.

With data parallel, every decision that ends the loop is taken by all ranks together: a rank that
left on its own stop flag would miss the others' next collective.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from unilab.collect import channel as ch
from unilab.collect.collector_client import collector_for
from unilab.plan.models import Plan
from unilab.records.checkpoint import check_resume_fits
from unilab.records.progress import Progress
from unilab.run.init_state import check_init_fits


@dataclass
class RankHooks:
    """Callbacks into the run. Rank 0's own the tracker, checkpoints and manifest; other ranks get
    no-ops except `should_stop`."""

    on_started: Callable[[ch.Hello], None]
    on_log: Callable[[Progress, dict[str, float]], None]
    on_checkpoint: Callable[[Progress, dict[str, Any]], object]
    should_stop: Callable[[], bool]


class Cadence:
    """Fires at the first count at or past each multiple of `every`, once however many multiples
    one step passed (a unit larger than the interval checkpoints once, not once per multiple)."""

    def __init__(self, every: int | None, done: int) -> None:
        self.every = every or None
        self.next = self._after(done)

    def _after(self, done: int) -> int | None:
        """The first multiple of `every` past `done`."""
        return (done // self.every + 1) * self.every if self.every else None

    def due(self, done: int) -> bool:
        if self.next is None or done < self.next:
            return False
        self.next = self._after(done)
        return True


class RankLoop(ABC):
    """One rank's loop; a driver subclass fills in `_setup`, `_step`, `_metrics` and `_state`."""

    def __init__(
        self,
        plan: Plan,
        rank: int,
        hooks: RankHooks,
        resume_state: dict[str, Any] | None = None,
        dp: Any = None,  # unilab.run.dp.DpContext, for world size > 1
        init_state: dict[str, Any] | None = None,  # run.init_from's checkpoint state (a new run only)
    ) -> None:
        self.plan, self.rank, self.hooks, self.dp = plan, rank, hooks, dp
        self.rp = plan.ranks[rank]
        self.resume_state = resume_state
        self.init_state = init_state
        self.device = torch.device("cuda" if self.rp.device == "cuda" else "cpu")
        self.collector = collector_for(plan, rank, resume_state)
        self.progress = Progress()
        self.final_state: dict[str, Any] | None = None
        self.interrupted = False  # the loop ended on a stop request (this rank's or, with DP, any rank's)
        self._t_start = 0.0
        self._started_steps = self._started_updates = 0

    def close(self) -> None:
        self.collector.close()

    # ------------------------------------------------------------------------- what a driver gives
    @abstractmethod
    def _total(self) -> int:
        """This rank's env steps to run."""

    def _on_hello(self, hello: ch.Hello) -> None:  # noqa: B027  (an optional hook)
        """After the collector started and the run recorded it, before its first observation."""

    def _setup(self, hello: ch.Hello) -> None:  # noqa: B027  (an optional hook)
        """After the first observation: what the units need."""

    @abstractmethod
    def _step(self) -> bool:
        """One unit; False when a stop request interrupted it (its counters say how far it got)."""

    @abstractmethod
    def _metrics(self) -> dict[str, float]:
        """The driver's scalars at a log point (the loop adds the timing and run counters)."""

    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """The checkpoint state."""

    def _started(self) -> None:  # noqa: B027  (an optional hook)
        """Before the collector starts: threads and allocator of this process."""

    def _collector_started(self) -> None:  # noqa: B027  (an optional hook)
        """Right after the collector process started (it must not inherit what this sets)."""

    # ------------------------------------------------------------------------------------ the loop
    def run(self) -> Progress:
        p, prog = self.plan, self.progress
        torch.set_num_threads(self.rp.torch_threads)
        self._started()
        hello = self.collector.start()
        self._collector_started()
        check_init_fits(self.init_state, hello)  # before the run is recorded
        check_resume_fits(self.resume_state, hello)
        self.hooks.on_started(hello)
        self._on_hello(hello)
        if not self._first_obs():
            self.interrupted = True
            return prog
        self._setup(hello)
        total, world = self._total(), p.topology.world_size
        checkpoints = Cadence(p.run.checkpoint_every_env_steps, prog.env_steps * world)
        self._started_steps, self._started_updates = prog.env_steps, prog.updates
        self._t_start = last_log = time.perf_counter()
        logged_steps = prog.env_steps
        while prog.env_steps < total:
            if not self._step():
                self.interrupted = True
                break
            now = time.perf_counter()
            if now - last_log >= p.run.log_every_seconds or prog.env_steps >= total:
                last_log, logged_steps = now, prog.env_steps
                self._log(now)
            if prog.env_steps < total and checkpoints.due(prog.env_steps * world):
                self._read_collector_stats()
                self.hooks.on_checkpoint(prog, self._state())
            if self._stop_requested():
                self.interrupted = True
                break
        if self.interrupted and prog.env_steps != logged_steps:
            self._log(time.perf_counter())  # the manifest's rates and training time end where the counters do
        self._read_collector_stats()
        self.final_state = self._state()
        return prog

    def _first_obs(self) -> bool:
        """Wait for the collector's first observation; False on a stop request. With data parallel
        every rank waits it out and the ranks then decide together, as after every unit."""
        if self.dp is None:
            return self.collector.wait_obs(self.hooks.should_stop)
        return self.collector.wait_obs(lambda: False) and not self._stop_requested()

    def _stop_requested(self) -> bool:
        local = self.hooks.should_stop()
        return self.dp.any_rank(local) if self.dp is not None else local

    def _log(self, now: float) -> None:
        self._read_collector_stats()
        prog = self.progress
        metrics = self._metrics()
        metrics["elapsed_s"] = now - self._t_start
        metrics["env_steps_run"] = prog.env_steps - self._started_steps
        metrics["updates_run"] = prog.updates - self._started_updates
        self.hooks.on_log(prog, metrics)

    def _read_collector_stats(self) -> None:
        self.progress.fold(self.collector.read_stats())
