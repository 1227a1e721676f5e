"""The learner's side of a rank's collector: start the collector process, wait for observations,
post actions, read its published counters, notice its death at once, and stop it."""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.multiprocessing as tmp

from unilab.collect.timing import PHASES
from unilab.errors import RUN_FAILED_FIX, UnilabError
from unilab.plan.inputs import planned_task
from unilab.plan.models import Plan
from unilab.run import channel as ch
from unilab.run.collector_proc import CollectorConfig, collector_main
from unilab.run.stop import signals_ignored

HELLO_TIMEOUT_S = 600.0  # building a MuJoCo Warp collector compiles kernels on first use
WAIT_SLICE_S = 0.2


class RunFailed(UnilabError):
    """A process of the run failed; `where` names it (e.g. rank0.collector)."""

    def __init__(self, where: str, message: str, detail: str = "", fix: str = "") -> None:
        super().__init__(
            f"{where} failed: {message}",
            detail=detail,
            fix=fix or RUN_FAILED_FIX,
        )
        self.where = where
        self.message = message


@dataclass
class CollectorStats:
    """The collector's cumulative counters since it started."""

    syncs: int = 0
    env_steps: int = 0
    episodes: int = 0
    return_sum: float = 0.0
    length_sum: float = 0.0
    nonfinite: int = 0
    wait_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)
    phase_cpu_s: dict[str, float] = field(default_factory=dict)
    physics_replays: int = 0
    collector_graph: dict[str, Any] | None = None  # the update-state graph's evidence, when it runs
    physics_warnings: dict[str, int] = field(default_factory=dict)  # peak count per kind seen
    terminated: float = 0.0  # completed episodes that terminated (not truncated)
    reward_term_sums: dict[str, float] = field(default_factory=dict)  # per term, over completed episodes


def collector_for(plan: Plan, rank: int, resume_state: dict[str, Any] | None) -> CollectorClient:
    """The rank's collector client. A resumed run's environments continue on a fresh random
    stream (offset by the syncs already done), not a replay of the first session's."""
    resumed_syncs = (resume_state or {}).get("counters", {}).get("syncs", 0)
    return CollectorClient(plan, rank, seed=plan.ranks[rank].seed + 7919 * resumed_syncs)


class CollectorClient:
    def __init__(self, plan: Plan, rank: int, seed: int) -> None:
        self.plan, self.rank, self.seed = plan, rank, seed
        self.rp = plan.ranks[rank]
        self.where = f"rank{rank}.collector"
        self.ctx = tmp.get_context("spawn")
        self.proc: Any = None
        self.hello: ch.Hello | None = None

    def start(self) -> ch.Hello:
        p, rp = self.plan, self.rp
        cfg = CollectorConfig(
            rank=self.rank,
            task=planned_task(p.task),
            sim=p.sim,
            spec_dir=str(Path.cwd()),  # the plan's input paths are relative to it (see planned_task)
            num_envs=p.task.num_envs,
            workers=p.sim.workers_per_rank,
            cpu_ids=list(rp.collector_cpu_ids),
            device="cuda:0" if rp.device == "cuda" else "cpu",
            physics_graph=p.graphs.physics.enabled,
            update_graph=p.graphs.collector.enabled,
            seed=self.seed,
            parent_pid=os.getpid(),
        )
        self.hello_q, self.err_q = self.ctx.Queue(), self.ctx.Queue()
        self.obs_ready, self.act_ready, self.stop = self.ctx.Semaphore(0), self.ctx.Semaphore(0), self.ctx.Event()
        self.proc = self.ctx.Process(
            target=collector_main,
            name=self.where,
            # Not a daemon: it starts physics worker processes of its own. It dies with this process
            # (PR_SET_PDEATHSIG) and `close` joins it.
            args=(cfg, self.hello_q, self.err_q, self.obs_ready, self.act_ready, self.stop),
            daemon=False,
        )
        # Born with SIGINT ignored (kept across exec): a Ctrl-C during its imports is the learner's to
        # handle, not a traceback from a child that dies before it can report.
        with signals_ignored(signal.SIGINT):
            self.proc.start()
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while True:
            self.check()
            try:
                self.hello = self.hello_q.get(timeout=WAIT_SLICE_S)
                return self.hello
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RunFailed(self.where, f"did not start within {HELLO_TIMEOUT_S:.0f} s") from None

    @property
    def buffers(self) -> ch.SharedBuffers:
        if self.hello is None:
            raise UnilabError("internal: the collector has not started")
        return self.hello.buffers

    def check(self) -> None:
        """Raise the collector's own first error if it reported one, else its exit status."""
        try:
            raise RunFailed(*self.err_q.get_nowait())
        except queue.Empty:
            pass
        if self.proc is not None and not self.proc.is_alive():
            try:  # an error message may arrive just after the process ends
                raise RunFailed(*self.err_q.get(timeout=0.5))
            except queue.Empty:
                pass
            code = self.proc.exitcode
            how = f"was killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with code {code}"
            raise RunFailed(self.where, f"the collector process (pid {self.proc.pid}) {how}")

    def wait_obs(self, should_stop: Any) -> bool:
        """Wait for the collector's next observation; False if `should_stop()` turns true meanwhile."""
        while not self.obs_ready.acquire(timeout=WAIT_SLICE_S):
            self.check()
            if should_stop():
                return False
        return True

    def post_action(self) -> None:
        """The action buffer is filled: let the collector step."""
        self.act_ready.release()

    def read_stats(self) -> CollectorStats:
        b = self.buffers
        s, terms = ch.read_counters(b)
        return CollectorStats(
            syncs=int(s[ch.STAT_SYNCS]),
            env_steps=int(s[ch.STAT_ENV_STEPS]),
            episodes=int(s[ch.STAT_EPISODES]),
            return_sum=s[ch.STAT_RETURN_SUM],
            length_sum=s[ch.STAT_LENGTH_SUM],
            nonfinite=int(s[ch.STAT_NONFINITE]),
            wait_s=s[ch.STAT_WAIT_S],
            phase_s={ph: float(v) for ph, v in zip(PHASES, b.phase_s.tolist(), strict=True)},
            phase_cpu_s={ph: float(v) for ph, v in zip(PHASES, b.phase_cpu_s.tolist(), strict=True)},
            physics_replays=int(b.physics_replays[0]),
            collector_graph=ch.read_evidence(b.collector_graph),
            physics_warnings=ch.read_evidence(b.physics_warnings) or {},
            terminated=terms[0],
            reward_term_sums=dict(zip(self.hello.reward_names, terms[1:], strict=True)) if self.hello else {},
        )

    def close(self) -> None:
        if self.proc is None:
            return
        self.stop.set()
        self.act_ready.release()
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.proc = None
