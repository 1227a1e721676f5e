"""One rank of an off-policy run (SAC, FlashSAC): the learner loop in this process, the collector
in a child process, exchanging data through `unilab.run.channel`.

Per sync (K = 1): read obs[t], act, post the action, run this sync's gradient updates while the
collector steps the physics, then wait for the transition and store it. The learner owns the
replay buffer and the observation normalizer; the collector never sees the policy.
"""

from __future__ import annotations

import math
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as tmp

from unilab.collect.timing import PHASES
from unilab.errors import UnilabError
from unilab.learn.normalizer import ObsNormalizer
from unilab.learn.replay import ReplayBuffer
from unilab.plan.models import Plan
from unilab.run import channel as ch
from unilab.run.collector_proc import CollectorConfig, collector_main
from unilab.run.learners import make_offpolicy_learner, replay_n_step

HELLO_TIMEOUT_S = 600.0  # building a MuJoCo Warp collector compiles kernels on first use
WAIT_SLICE_S = 0.2


class RunFailed(UnilabError):
    """A process of the run failed; `where` names it (e.g. rank0.collector)."""

    def __init__(self, where: str, message: str, detail: str = "") -> None:
        super().__init__(
            f"{where} failed: {message}",
            detail=detail,
            fix="read the error above and events.jsonl in the run directory; resume with --resume RUN_DIR",
        )
        self.where = where
        self.message = message


@dataclass
class Progress:
    """What the runner has done so far: counters, timing sums and the latest metrics."""

    env_steps: int = 0
    syncs: int = 0
    updates: int = 0
    episodes: int = 0
    transitions_produced: int = 0
    transitions_stored: int = 0
    transitions_nonfinite: int = 0
    nonfinite_resets: int = 0
    update_s: float = 0.0
    wait_s: float = 0.0
    collector_wait_s: float = 0.0
    return_sum: float = 0.0
    length_sum: float = 0.0
    last_return: float | None = None
    last_length: float | None = None
    phase_s: dict[str, float] = field(default_factory=dict)
    physics_replays: int = 0

    def counters_state(self) -> dict[str, int]:
        return {"env_steps": self.env_steps, "syncs": self.syncs, "updates": self.updates, "episodes": self.episodes}


@dataclass
class RankHooks:
    """Callbacks into the run (rank 0 owns the tracker, checkpoints and manifest)."""

    on_started: Callable[[ch.Hello], None]
    on_log: Callable[[Progress, dict[str, float]], None]
    on_checkpoint: Callable[[Progress, dict[str, Any]], None]
    should_stop: Callable[[], bool]


class OffPolicyRank:
    def __init__(
        self, plan: Plan, rank: int, spec_dir: Path, hooks: RankHooks, resume_state: dict[str, Any] | None = None
    ) -> None:
        self.plan = plan
        self.rank = rank
        self.rp = plan.ranks[rank]
        self.spec_dir = spec_dir
        self.hooks = hooks
        self.resume_state = resume_state
        self.device = torch.device("cuda" if self.rp.device == "cuda" else "cpu")
        self.where = f"rank{rank}.collector"
        self.ctx = tmp.get_context("spawn")
        self.proc: Any = None
        self.progress = Progress()
        self._seen = (0, 0.0, 0.0)  # collector's cumulative (episodes, return sum, length sum) at the last read
        self._episodes_base = 0

    # ------------------------------------------------------------------ collector process
    def _start_collector(self) -> ch.Hello:
        p = self.plan
        cfg = CollectorConfig(
            rank=self.rank,
            task=p.task,
            sim=p.sim,
            spec_dir=str(self.spec_dir),
            num_envs=p.task.num_envs,
            workers=p.sim.workers_per_rank,
            cpu_ids=list(self.rp.collector_cpu_ids),
            device="cuda:0" if self.rp.device == "cuda" else "cpu",
            physics_graph=p.graphs.physics.enabled,
            seed=self.rp.seed + 7919 * (self.resume_state or {}).get("counters", {}).get("syncs", 0),
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
        self.proc.start()
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while True:
            self._check_collector()
            try:
                return self.hello_q.get(timeout=WAIT_SLICE_S)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RunFailed(self.where, f"did not start within {HELLO_TIMEOUT_S:.0f} s") from None

    def _check_collector(self) -> None:
        """Raise the collector's own first error if it reported one, else its exit status."""
        try:
            where, msg, tb = self.err_q.get_nowait()
            raise RunFailed(where, msg, detail=tb.strip().splitlines()[-1] if tb else "")
        except queue.Empty:
            pass
        if self.proc is not None and not self.proc.is_alive():
            try:  # an error message may arrive just after the process ends
                where, msg, tb = self.err_q.get(timeout=0.5)
                raise RunFailed(where, msg)
            except queue.Empty:
                pass
            code = self.proc.exitcode
            import signal

            how = f"was killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with code {code}"
            raise RunFailed(self.where, f"the collector process (pid {self.proc.pid}) {how}")

    def _wait_obs(self) -> bool:
        """Wait for the collector's next observation; False if the run is asked to stop meanwhile."""
        while not self.obs_ready.acquire(timeout=WAIT_SLICE_S):
            self._check_collector()
            if self.hooks.should_stop():
                return False
        return True

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

    # ------------------------------------------------------------------ learner loop
    def run(self) -> Progress:
        p, algo = self.plan, self.plan.algo
        torch.set_num_threads(self.rp.torch_threads)
        torch.manual_seed(self.rp.seed)
        hello = self._start_collector()
        self.hooks.on_started(hello)
        bufs, n = hello.buffers, hello.num_envs
        learner = make_offpolicy_learner(algo, hello.obs_dim, hello.act_dim, n, self.device, self.rp.seed)
        normalizer = ObsNormalizer(hello.obs_dim, self.device)
        replay = ReplayBuffer(
            algo.buffer_size,
            hello.obs_dim,
            hello.act_dim,
            n,
            n_step=replay_n_step(algo),
            gamma=algo.gamma,
            device=self.device,
        )
        prog = self.progress
        if self.resume_state is not None:
            learner.load_state_dict(self.resume_state["learner"])
            normalizer.load_state_dict(self.resume_state["normalizer"])
            c = self.resume_state["counters"]
            prog.env_steps, prog.syncs, prog.updates, prog.episodes = (
                c["env_steps"],
                c["syncs"],
                c["updates"],
                c["episodes"],
            )
            self._episodes_base = c["episodes"]
        gen = torch.Generator(device=self.device).manual_seed(self.rp.seed + 104729)
        action_gen = torch.Generator().manual_seed(self.rp.seed + 15485863)

        total = p.run.total_env_steps // p.topology.world_size
        warmup = 0 if self.resume_state is not None else algo.warmup_env_steps
        ckpt_every = p.run.checkpoint_every_env_steps
        next_ckpt = (prog.env_steps // ckpt_every + 1) * ckpt_every if ckpt_every else None
        updates_owed = 0.0
        skipped = torch.zeros((), dtype=torch.int64, device=self.device)
        last_metrics: dict[str, torch.Tensor] = {}
        started_steps = prog.env_steps
        if not self._wait_obs():
            return prog
        t_start = time.perf_counter()
        last_log = t_start
        action = torch.empty(n, hello.act_dim)
        t = 0  # this session's syncs: the collector's obs slot index
        while prog.env_steps < total:
            obs = bufs.obs[t % 2]
            if algo.normalize_observations:
                normalizer.update(obs)
            if prog.env_steps - started_steps < warmup:
                torch.rand(action.shape, generator=action_gen, out=action).mul_(2).sub_(1)
            else:
                obs_in = normalizer.normalize(obs) if algo.normalize_observations else obs
                action.copy_(learner.act(obs_in.to(self.device)).cpu())
            bufs.action.copy_(action)
            self.act_ready.release()

            # Gradient updates overlap the physics step the collector is running now.
            if len(replay) >= max(algo.batch_size, 1) and prog.env_steps - started_steps >= warmup:
                updates_owed += algo.updates_per_step
                t0 = time.perf_counter()
                while updates_owed >= 1.0:
                    batch = replay.sample(algo.batch_size, gen)
                    if algo.normalize_observations:
                        batch = batch.normalized(normalizer)
                    last_metrics = learner.update(batch)
                    skipped += (~last_metrics["critic_finite"]).to(torch.int64)
                    updates_owed -= 1.0
                    prog.updates += 1
                prog.update_s += time.perf_counter() - t0

            t0 = time.perf_counter()
            if not self._wait_obs():
                break
            prog.wait_s += time.perf_counter() - t0
            self._store(replay, learner, bufs, obs, action)
            prog.syncs += 1
            prog.env_steps += n
            prog.transitions_produced += n
            t += 1

            now = time.perf_counter()
            if now - last_log >= p.run.log_every_seconds or prog.env_steps >= total:
                last_log = now
                self._read_collector_stats(bufs)
                metrics = {k: float(v) for k, v in last_metrics.items() if v.dim() == 0}
                metrics["skipped_updates"] = float(skipped)
                metrics["elapsed_s"] = now - t_start
                metrics["env_steps_run"] = prog.env_steps - started_steps
                self.hooks.on_log(prog, metrics)
            if next_ckpt is not None and prog.env_steps >= next_ckpt and prog.env_steps < total:
                next_ckpt += ckpt_every
                self._read_collector_stats(bufs)
                self.hooks.on_checkpoint(prog, self._state(learner, normalizer, prog))
            if self.hooks.should_stop():
                break
        self._read_collector_stats(bufs)
        self.skipped_updates = int(skipped)
        self.final_state = self._state(learner, normalizer, prog)
        self.learner = learner
        self.normalizer = normalizer
        return prog

    def _store(
        self, replay: ReplayBuffer, learner: Any, bufs: ch.SharedBuffers, obs: torch.Tensor, action: torch.Tensor
    ) -> None:
        """Store this sync's transitions. Worlds flagged non-finite are counted and left out."""
        dev = self.device
        reward, terminated, truncated = bufs.reward.to(dev), bufs.terminated.to(dev), bufs.truncated.to(dev)
        learner.observe_rewards(reward, terminated, truncated)
        bad = bufs.nonfinite
        nbad = int(bad.sum()) if bool(bad.any()) else 0
        keep = None if nbad == 0 else (~bad).to(dev)
        extra = {} if keep is None else {"keep": keep}
        replay.add_batch(obs.to(dev), action.to(dev), reward, bufs.next_obs.to(dev), terminated, truncated, **extra)
        self.progress.transitions_nonfinite += nbad
        # Every transition handed to the replay is in storage or in its n-step window.
        self.progress.transitions_stored = replay.total_added + replay.pending * replay.num_envs

    def _read_collector_stats(self, bufs: ch.SharedBuffers) -> None:
        """Fold the collector's cumulative counters into the progress; the mean return and length
        are over the episodes completed since the previous read."""
        s = bufs.stats.tolist()
        prog = self.progress
        episodes, ret_sum, len_sum = int(s[ch.STAT_EPISODES]), s[ch.STAT_RETURN_SUM], s[ch.STAT_LENGTH_SUM]
        new = episodes - self._seen[0]
        if new > 0:
            prog.last_return = (ret_sum - self._seen[1]) / new
            prog.last_length = (len_sum - self._seen[2]) / new
        self._seen = (episodes, ret_sum, len_sum)
        prog.episodes = self._episodes_base + episodes
        prog.nonfinite_resets = int(s[ch.STAT_NONFINITE])
        prog.collector_wait_s = s[ch.STAT_WAIT_S]
        prog.phase_s = {ph: float(v) for ph, v in zip(PHASES, bufs.phase_s.tolist(), strict=True)}
        prog.physics_replays = int(bufs.physics_replays[0])

    def _state(self, learner: Any, normalizer: ObsNormalizer, prog: Progress) -> dict[str, Any]:
        return {
            "learner": learner.state_dict(),
            "normalizer": normalizer.state_dict(),
            "counters": prog.counters_state(),
            "torch_rng": torch.get_rng_state(),
            "obs_dim": int(normalizer.dim),
            "act_dim": int(learner.act_dim),
        }


def steps_per_second(steps: int, seconds: float) -> float:
    return steps / seconds if seconds > 0 else math.nan
