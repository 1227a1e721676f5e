"""One rank of an off-policy run (SAC, FlashSAC): the learner loop in this process, the collector
in a child process (`unilab.run.collector_client`), exchanging data through `unilab.run.channel`.

Per sync (K = 1): read obs[t], act, post the action, run this sync's gradient updates while the
collector steps the physics, then wait for the transition and store it. The learner owns the
replay buffer and the observation normalizer; the collector never sees the policy.

With data parallel (`dp` given), every rank runs this loop in lockstep: parameters are broadcast
from rank 0 at start, gradients are averaged before every optimizer step (`unilab.dist`), the
observation normalizer merges every rank's observations, and a stop request on any rank stops
all ranks after the same sync.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from unilab.algos.common import make_learner, planned_precision, replay_n_step
from unilab.dist import param_digest
from unilab.errors import UnilabError
from unilab.learn.normalizer import ObsNormalizer
from unilab.learn.replay import ReplayBuffer
from unilab.plan.models import Plan
from unilab.run import channel as ch
from unilab.run.checkpoint import check_resume_fits
from unilab.run.collector_client import CollectorStats, RunFailed, collector_for  # noqa: F401  (re-export)
from unilab.run.cpu_tuning import keep_freed_memory
from unilab.run.init_state import check_init_fits, loading_init


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
    phase_s: dict[str, float] = field(default_factory=dict)
    phase_cpu_s: dict[str, float] = field(default_factory=dict)
    physics_replays: int = 0
    learner_graph: Any = None  # unilab.learn.graph.GraphStats when the plan enabled the learner graph
    collector_graph: dict[str, Any] | None = None  # the collector update-state graph's evidence
    physics_warnings: dict[str, int] = field(default_factory=dict)
    episodes_base: int = 0  # episodes before this session (a resumed run's)
    # The collector's cumulative (episodes, return sum, length sum) at the previous fold.
    _seen: tuple[int, float, float] = (0, 0.0, 0.0)
    _seen_terms: tuple[float, dict[str, float]] = (0.0, {})

    def counters_state(self) -> dict[str, int]:
        return {"env_steps": self.env_steps, "syncs": self.syncs, "updates": self.updates, "episodes": self.episodes}

    def restore_counters(self, c: dict[str, int]) -> None:
        """A resumed run's counters, as `counters_state` saved them."""
        self.env_steps, self.syncs, self.updates = c["env_steps"], c["syncs"], c["updates"]
        self.episodes = self.episodes_base = c["episodes"]

    def fold(self, s: CollectorStats) -> None:
        """Take in the collector's cumulative counters; the mean return and length are over the
        episodes completed since the previous fold."""
        new = s.episodes - self._seen[0]
        if new > 0:
            self.last_return = (s.return_sum - self._seen[1]) / new
            self.last_length = (s.length_sum - self._seen[2]) / new
            terminated, sums = self._seen_terms
            self.last_terminated_fraction = (s.terminated - terminated) / new
            self.last_reward_terms = {k: (v - sums.get(k, 0.0)) / new for k, v in s.reward_term_sums.items()}
        self._seen = (s.episodes, s.return_sum, s.length_sum)
        self._seen_terms = (s.terminated, s.reward_term_sums)
        self.episodes = self.episodes_base + s.episodes
        self.nonfinite_resets = s.nonfinite
        self.collector_wait_s = s.wait_s
        self.phase_s = s.phase_s
        self.phase_cpu_s = s.phase_cpu_s
        self.physics_replays = s.physics_replays
        self.collector_graph = s.collector_graph
        self.physics_warnings = s.physics_warnings


@dataclass
class RankHooks:
    """Callbacks into the run. Rank 0's own the tracker, checkpoints and manifest; other ranks get
    no-ops except `should_stop`."""

    on_started: Callable[[ch.Hello], None]
    on_log: Callable[[Progress, dict[str, float]], None]
    on_checkpoint: Callable[[Progress, dict[str, Any]], None]
    should_stop: Callable[[], bool]


class LearnerThreads:
    """The learner's intra-op threads where the plan lets it run on the collector's CPUs too: all of
    them while the collector waits for its next action, only those of its own while the collector
    steps the physics. A learner-bound run (the collector waits most of the time) then gets the whole
    block, and a collector-bound one never slows the physics it waits for (the main job's SAC
    collected at a third of its rate with two threads held throughout; docs/performance.md)."""

    def __init__(self, planned: int, learner_cpus: list[int], collector_cpus: list[int]) -> None:
        own = len(set(learner_cpus) - set(collector_cpus))
        self.shared = planned > 1 and bool(set(learner_cpus) & set(collector_cpus))
        self.all, self.own = planned, max(1, min(own, planned))
        self.now = planned

    def set(self, collector_waiting: bool, prog: Progress) -> None:
        n = self.all if collector_waiting else self.own
        if n != self.now:
            torch.set_num_threads(n)
            self.now = n
        if collector_waiting:
            prog.updates_on_shared_cpus += 1


class OffPolicyRank:
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
        self.allocator: str | None = None  # unilab.run.cpu_tuning, set when the rank starts
        self.final_state: dict[str, Any] | None = None
        self.learner: Any = None
        self.skipped_updates = 0
        self.interrupted = False  # the loop ended on a stop request (this rank's or, with DP, any rank's)

    def close(self) -> None:
        self.collector.close()

    def _first_obs(self) -> bool:
        """Wait for the collector's first observation; False on a stop request. With data parallel
        every rank waits it out and the ranks then decide together, as after every sync: a rank
        that left on its own stop flag would miss the others' next collective."""
        if self.dp is None:
            return self.collector.wait_obs(self.hooks.should_stop)
        return self.collector.wait_obs(lambda: False) and not self._stop_requested()

    def _stop_requested(self) -> bool:
        local = self.hooks.should_stop()
        return self.dp.any_rank(local) if self.dp is not None else local

    def run(self) -> Progress:
        p, algo, prog = self.plan, self.plan.algo, self.progress
        torch.set_num_threads(self.rp.torch_threads)
        self.allocator = keep_freed_memory() if self.device.type == "cpu" else "default (CUDA learner)"
        torch.manual_seed(self.rp.seed)
        hello = self.collector.start()
        if self.rp.learner_cpu_ids:  # after the collector started: it must not inherit the learner's CPUs
            os.sched_setaffinity(0, self.rp.learner_cpu_ids)
        check_init_fits(self.init_state, hello)  # before the run is recorded
        check_resume_fits(self.resume_state, hello)
        self.hooks.on_started(hello)
        bufs, n = hello.buffers, hello.num_envs
        # Same seed on every rank: with data parallel the replicas must start identical anyway
        # (rank 0's parameters are broadcast), and their exploration differs through the envs.
        learner = make_learner(algo, hello.obs_dim, hello.act_dim, self.device, p.run.seed, planned_precision(p))
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
        if self.resume_state is not None:
            learner.load_state_dict(self.resume_state["learner"])
            normalizer.load_state_dict(self.resume_state["normalizer"])
            prog.restore_counters(self.resume_state["counters"])
        elif self.init_state is not None:
            with loading_init(p):
                learner.load_weights(self.init_state["learner"])
                if algo.normalize_observations:
                    normalizer.load_state_dict(self.init_state["normalizer"])
        self.learner, self.normalizer = learner, normalizer
        update = learner.update
        if self.dp is not None:
            update = self.dp.attach(learner)
        if p.graphs.learner.enabled:
            update = self._graph(learner, update)
        gen = torch.Generator(device=self.device).manual_seed(self.rp.seed + 104729)
        action_gen = torch.Generator().manual_seed(self.rp.seed + 15485863)

        total = p.run.total_env_steps // p.topology.world_size
        warmup = 0 if self.resume_state is not None else algo.warmup_env_steps // p.topology.world_size
        # A run started from a checkpoint's policy warms the replay up with that policy's actions.
        random_warmup = 0 if self.init_state is not None else warmup
        ckpt_every = p.run.checkpoint_every_env_steps
        next_ckpt = (prog.env_steps * p.topology.world_size // ckpt_every + 1) * ckpt_every if ckpt_every else None
        updates_owed = 0.0
        skipped = torch.zeros((), dtype=torch.int64, device=self.device)
        last_metrics: dict[str, torch.Tensor] = {}
        started_steps, started_updates = prog.env_steps, prog.updates
        if not self._first_obs():
            self.interrupted = True
            return prog
        t_start = time.perf_counter()
        last_log, logged_steps = t_start, prog.env_steps

        def log(now: float) -> None:
            self._read_collector_stats()
            metrics = {k: float(v) for k, v in last_metrics.items() if v.dim() == 0}
            metrics["skipped_updates"] = float(skipped)
            metrics["elapsed_s"] = now - t_start
            metrics["env_steps_run"] = prog.env_steps - started_steps
            metrics["updates_run"] = prog.updates - started_updates
            self.hooks.on_log(prog, metrics)

        threads = LearnerThreads(self.rp.torch_threads, self.rp.learner_cpu_ids, self.rp.collector_cpu_ids)
        action = torch.empty(n, hello.act_dim)
        # Updates start once the replay holds a batch: counted in syncs, the same on every rank, not
        # by len(replay), which a rank's non-finite worlds shorten (the ranks' collectives would
        # then fall out of step). The n-step window holds back the newest n - 1 syncs.
        filled_syncs = -(-algo.batch_size // n) + replay_n_step(algo) - 1
        t = 0  # this session's syncs: the collector's obs slot index
        while prog.env_steps < total:
            obs = bufs.obs[t % 2]
            if algo.normalize_observations:
                t0 = time.perf_counter()
                normalizer.update(self.dp.gather_obs(obs) if self.dp is not None else obs)
                prog.dp_sync_s += time.perf_counter() - t0 if self.dp is not None else 0.0
            if prog.env_steps - started_steps < random_warmup:
                torch.rand(action.shape, generator=action_gen, out=action).mul_(2).sub_(1)
            else:
                obs_in = normalizer.normalize(obs) if algo.normalize_observations else obs
                action.copy_(learner.act(obs_in.to(self.device)).cpu())
            bufs.action.copy_(action)
            self.collector.post_action()

            # Gradient updates overlap the physics step the collector is running now. Every rank
            # has the same replay size and warm-up, so all take the same number of updates.
            if t >= filled_syncs and prog.env_steps - started_steps >= warmup:
                updates_owed += algo.updates_per_step
                while updates_owed >= 1.0:
                    if threads.shared:
                        threads.set(self.collector.obs_ready(), prog)
                    t0 = time.perf_counter()
                    batch = replay.sample(algo.batch_size, gen)
                    if algo.normalize_observations:
                        batch = batch.normalized(normalizer)
                    t1 = time.perf_counter()
                    last_metrics = update(batch)
                    skipped += (~last_metrics["critic_finite"]).to(torch.int64)
                    updates_owed -= 1.0
                    prog.updates += 1
                    prog.update_s += time.perf_counter() - t1
                    prog.sample_s += t1 - t0
                if self.dp is not None and prog.learner_graph is None:
                    # Under the learner graph the all-reduces run inside the replay: no host timer.
                    prog.grad_sync_s = self.dp.sync_s

            t0 = time.perf_counter()
            if not self.collector.wait_obs(lambda: False if self.dp is not None else self.hooks.should_stop()):
                self.interrupted = True
                break
            prog.wait_s += time.perf_counter() - t0
            self._store(replay, learner, bufs, obs, action)
            prog.syncs += 1
            prog.env_steps += n
            prog.transitions_produced += n
            t += 1

            now = time.perf_counter()
            if now - last_log >= p.run.log_every_seconds or prog.env_steps >= total:
                last_log, logged_steps = now, prog.env_steps
                log(now)
            if next_ckpt is not None and prog.env_steps * p.topology.world_size >= next_ckpt and prog.env_steps < total:
                next_ckpt += ckpt_every
                self._read_collector_stats()
                self.hooks.on_checkpoint(prog, self._state(learner, normalizer, prog))
            if self._stop_requested():
                self.interrupted = True
                break
        if self.interrupted and prog.env_steps != logged_steps:
            log(time.perf_counter())  # the manifest's rates and training time end where the counters do
        self._read_collector_stats()
        self.skipped_updates = int(skipped)
        self.final_state = self._state(learner, normalizer, prog)
        return prog

    def _graph(self, learner: Any, update: Callable[..., dict[str, torch.Tensor]]) -> Any:
        """The plan enabled the learner graph: capture the whole update cycle (with data parallel,
        the all-reduce and sentinel too). Its evidence reaches the manifest through `Progress`."""
        from unilab.learn.graph import DP_WARMUP, LearnerGraph

        counters: list[tuple[Any, str]] = []
        agree = None
        if self.dp is not None:
            counters.append((self.dp, "syncs"))
            counters += [(c, "syncs") for c in self.dp.grad_sync.counters.values()]
            agree = self.dp.any_rank
        runner = LearnerGraph(
            learner,
            update,
            batch_size=self.plan.algo.batch_size,
            mode="cuda_graph",
            warmup=DP_WARMUP if self.dp is not None else 3,
            host_counters=counters,
            agree=agree,
        )
        self.progress.learner_graph = runner.stats
        return runner

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
        replay.add_batch(obs.to(dev), action.to(dev), reward, bufs.next_obs.to(dev), terminated, truncated, keep=keep)
        self.progress.transitions_nonfinite += nbad
        # Every transition handed to the replay is in storage or in its n-step window.
        self.progress.transitions_stored = replay.total_added + replay.pending * replay.num_envs

    def _read_collector_stats(self) -> None:
        self.progress.fold(self.collector.read_stats())

    def param_digest(self) -> str:
        """Digest of the learner's replicated tensors and the observation normalizer (fed from every
        rank, so equal on every rank too): a missed normalizer merge shows as differing digests."""
        if self.dp is None:
            raise UnilabError("internal: a parameter digest is data-parallel evidence")
        return param_digest([*self.dp.modules(self.learner), *self.normalizer.state_dict().values()])

    def _state(self, learner: Any, normalizer: ObsNormalizer, prog: Progress) -> dict[str, Any]:
        return {
            "learner": learner.state_dict(),
            "normalizer": normalizer.state_dict(),
            "counters": prog.counters_state(),
            "obs_dim": int(normalizer.dim),
            "act_dim": int(learner.act_dim),
            "obs_terms": ch.obs_terms_state(self.collector.hello),
        }
