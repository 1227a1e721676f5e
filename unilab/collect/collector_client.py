"""The learner's side of a rank's collector: start the collector process, wait for observations,
post actions, read its published counters, notice its death at once, and stop it."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, NoReturn

import torch.multiprocessing as tmp

from unilab.collect import channel as ch
from unilab.collect.collector_proc import CollectorConfig, collector_main
from unilab.collect.timing import PHASES
from unilab.errors import EXIT_UNGUARDED_MAIN, RUN_FAILED_FIX, UNGUARDED_MAIN_FIX, UnilabError
from unilab.plan.inputs import planned_task
from unilab.plan.models import Plan
from unilab.stop import STOP_SIGNALS, signals_blocked

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
    # Learning-health sums (unilab.collect.channel.SharedBuffers.health) and the env steps they cover.
    health_env_steps: float = 0.0
    health_sums: dict[str, float] = field(default_factory=dict)


def collector_for(plan: Plan, rank: int, resume_state: dict[str, Any] | None) -> CollectorClient:
    """The rank's collector client. A resumed run's environments continue on a fresh random
    stream (offset by the syncs already done), not a replay of the first session's."""
    counters = (resume_state or {}).get("counters", {})
    resumed_syncs, resumed_steps = counters.get("syncs", 0), counters.get("env_steps", 0)
    return CollectorClient(
        plan,
        rank,
        seed=plan.ranks[rank].seed + 7919 * resumed_syncs,
        env_steps_start=resumed_steps * plan.topology.world_size,  # the counters are this rank's
    )


class CollectorClient:
    def __init__(self, plan: Plan, rank: int, seed: int, env_steps_start: int = 0) -> None:
        self.plan, self.rank, self.seed = plan, rank, seed
        self.env_steps_start = env_steps_start
        self.rp = plan.ranks[rank]
        self.where = f"rank{rank}.collector"
        self.ctx = tmp.get_context("spawn")
        self.proc: Any = None
        self.hello: ch.Hello | None = None
        self._messages_closed = False
        # This side's ends of the message pipe and the two token pipes (unilab.collect.channel).
        self._messages: Any = None
        self._obs: Any = None
        self._act: Any = None
        self._obs_wait: ch.TokenWait | None = None

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
            device=p.collector_device(self.rank),
            physics_graph=p.graphs.physics.enabled,
            update_graph=p.graphs.collector.enabled,
            seed=self.seed,
            parent_pid=os.getpid(),
            env_steps_start=self.env_steps_start,
            env_steps_per_step=p.task.num_envs * p.topology.world_size,
        )
        msg_r, msg_w = self.ctx.Pipe(duplex=False)
        obs_r, obs_w = self.ctx.Pipe(duplex=False)
        act_r, act_w = self.ctx.Pipe(duplex=False)
        self._messages, self._obs, self._act = msg_r, obs_r, act_w  # closed by `close`
        proc = self.ctx.Process(
            target=collector_main,
            name=self.where,
            # Not a daemon: it starts physics worker processes of its own. It dies with this process
            # (PR_SET_PDEATHSIG) and `close` joins it.
            args=(cfg, msg_w, obs_w, act_r),
            daemon=False,
        )
        try:
            # Born with the stop signals blocked (the mask is kept across exec): a Ctrl-C or SIGTERM
            # during its imports waits, and is dropped when it ignores them (collector_main), rather
            # than killing a child before it can report. Here they wait too, then reach the
            # learner's StopFlag: none is lost during the spawn.
            with signals_blocked(*STOP_SIGNALS):
                proc.start()
        finally:
            # Keep only this side's ends: the other side's death then reads as end of file.
            for conn in (msg_w, obs_w, act_r):
                conn.close()
        self.proc = proc  # only a started process: `close` joins it
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while self.hello is None:
            self.check()
            if not self._receive(WAIT_SLICE_S) and time.monotonic() > deadline:
                raise RunFailed(self.where, f"did not start within {HELLO_TIMEOUT_S:.0f} s")
        return self.hello

    @property
    def buffers(self) -> ch.SharedBuffers:
        if self.hello is None:
            raise UnilabError("internal: the collector has not started")
        return self.hello.buffers

    def _receive(self, timeout_s: float) -> bool:
        """Take the collector's messages (its Hello; its first error, raised), waiting up to
        ``timeout_s`` for the first. False when none came."""
        if self._messages_closed:
            time.sleep(timeout_s)
            return False
        got = False
        while self._messages.poll(timeout_s):
            try:
                raw = self._messages.recv_bytes()
            except (EOFError, OSError):  # the collector's end is closed: it has exited or is exiting
                self._messages_closed = True
                return got
            try:
                # Unpickling a Hello fetches its shared buffers from the collector: a collector that
                # failed just after sending it makes this fail, its error message still to come.
                kind, body = ForkingPickler.loads(raw)
            except Exception as exc:
                if self.proc is not None:
                    self.proc.join(timeout=2.0)
                self._receive_error_only()
                raise RunFailed(
                    self.where, f"its start-up message could not be read: {type(exc).__name__}: {exc}"
                ) from None
            if kind == "error":
                raise RunFailed(*body)
            self.hello, got, timeout_s = body, True, 0.0
        return got

    def _receive_error_only(self) -> None:
        """Raise the collector's error report if one is in the pipe; skip anything else."""
        while not self._messages_closed and self._messages.poll(0.5):
            try:
                kind, body = ForkingPickler.loads(self._messages.recv_bytes())
            except (EOFError, OSError):
                self._messages_closed = True
                return
            except Exception:
                continue
            if kind == "error":
                raise RunFailed(*body)

    def check(self) -> None:
        """Raise the collector's own first error if it reported one, else its exit status."""
        self._receive(0.0)
        if self.proc is not None and not self.proc.is_alive():
            self._receive(0.5)  # an error message may arrive just after the process ends
            code = self.proc.exitcode
            if code == EXIT_UNGUARDED_MAIN:
                raise RunFailed(
                    self.where,
                    "the collector process stopped as it started: importing the script that called unilab.apply "
                    'ran that call again, outside an `if __name__ == "__main__":` guard',
                    fix=UNGUARDED_MAIN_FIX,
                )
            how = f"was killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with code {code}"
            raise RunFailed(self.where, f"the collector process (pid {self.proc.pid}) {how}")

    def obs_ready(self) -> bool:
        """Whether the collector has finished its step (its observation is in place), without waiting."""
        if self._obs_wait is None:
            self._obs_wait = ch.TokenWait(self._obs.fileno())
        return self._obs_wait.ready(0.0)

    def wait_obs(self, should_stop: Any) -> bool:
        """Wait for the collector's next observation; False if `should_stop()` turns true meanwhile."""
        if self._obs_wait is None:
            self._obs_wait = ch.TokenWait(self._obs.fileno())
        fd = self._obs_wait.fd
        while not self._obs_wait.ready(WAIT_SLICE_S):
            self.check()
            if should_stop():
                return False
        if os.read(fd, 1) == ch.TOKEN_OBS:
            return True
        self._gone("closed its channel")

    def post_action(self) -> None:
        """The action buffer is filled: let the collector step."""
        try:
            os.write(self._act.fileno(), ch.TOKEN_STEP)
        except BrokenPipeError:
            self._gone("closed its channel before taking an action")

    def _gone(self, what: str) -> NoReturn:
        """The collector's end of the channel closed: report how its process ended."""
        if self.proc is not None:
            self.proc.join(timeout=5.0)
        self.check()
        raise RunFailed(self.where, f"the collector process {what} but did not exit")

    def read_stats(self) -> CollectorStats:
        b = self.buffers
        s, terms = ch.read_counters(b)
        health_steps, *health = ch.read_health(b)
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
            health_env_steps=health_steps,
            health_sums=dict(zip(self.hello.health_names, health, strict=True)) if self.hello else {},
        )

    def close(self) -> None:
        if self.proc is not None:
            if self._act is not None:
                try:
                    os.write(self._act.fileno(), ch.TOKEN_QUIT)
                except OSError:
                    pass  # it has exited already
            self.proc.join(timeout=10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=5)
            self.proc = None
        for conn in (self._messages, self._obs, self._act):
            if conn is not None:
                conn.close()
        self._messages = self._obs = self._act = None
        self._obs_wait = None
