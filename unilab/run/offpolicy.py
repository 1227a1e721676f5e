"""One rank of an off-policy run (SAC, FlashSAC, TD3): the driver of `unilab.run.rank_loop` whose
unit is one sync. The learner runs in this process, the collector in a child process
(`unilab.collect.collector_client`), exchanging data through `unilab.collect.channel`.

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
from typing import Any

import torch

from unilab.algos.common import actor_columns, make_learner, planned_precision, replay_n_step
from unilab.collect import channel as ch
from unilab.dist import param_digest
from unilab.errors import UnilabError
from unilab.learn.critic_bias import StartValueBias
from unilab.learn.graph import DP_WARMUP, LearnerGraph
from unilab.learn.mirror import BatchMirror
from unilab.learn.normalizer import ObsNormalizer
from unilab.learn.replay import ReplayBuffer
from unilab.plan.models import Plan
from unilab.records.progress import Progress
from unilab.run.cpu_tuning import keep_freed_memory
from unilab.run.init_state import loading_init
from unilab.run.rank_loop import RankLoop
from unilab.sections import ReplayAlgoSpec
from unilab.tasks.registry import task_def


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


class OffPolicyRank(RankLoop):
    """The replay learners' driver: one unit is one sync of the collector (K = 1)."""

    def __init__(self, plan: Plan, *args: Any, **kwargs: Any) -> None:
        if not isinstance(plan.algo, ReplayAlgoSpec):
            raise UnilabError(f"internal: OffPolicyRank runs a replay learner, the plan's algo is {plan.algo.name}")
        super().__init__(plan, *args, **kwargs)
        self.algo: ReplayAlgoSpec = plan.algo
        self.allocator: str | None = None  # unilab.run.cpu_tuning, set when the rank starts
        self.learner: Any = None

    def _total(self) -> int:
        return self.plan.run.total_env_steps // self.plan.topology.world_size

    def _started(self) -> None:
        self.allocator = keep_freed_memory() if self.device.type == "cpu" else "default (CUDA learner)"
        torch.manual_seed(self.rp.seed)

    def _collector_started(self) -> None:
        if self.rp.learner_cpu_ids:  # after the collector started: it must not inherit the learner's CPUs
            os.sched_setaffinity(0, self.rp.learner_cpu_ids)

    def _on_hello(self, hello: ch.Hello) -> None:
        """The learner, replay and normalizer, restored or started from init_from; the update the
        loop calls (data-parallel and captured where the plan says so)."""
        p, algo, prog = self.plan, self.algo, self.progress
        self.bufs, self.n = hello.buffers, hello.num_envs
        n = self.n
        # Same seed on every rank: with data parallel the replicas must start identical anyway
        # (rank 0's parameters are broadcast), and their exploration differs through the envs.
        learner = make_learner(
            algo,
            hello.obs_dim,
            hello.act_dim,
            self.device,
            p.run.seed,
            planned_precision(p),
            actor_columns(p.task, hello.obs_terms),
        )
        normalizer = ObsNormalizer(hello.obs_dim, self.device)
        self.replay = ReplayBuffer(
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
        self.mirror = (
            BatchMirror(task_def(p.task).mirror(p.task, hello.obs_terms), self.device)
            if algo.mirror_augmentation
            else None
        )
        update = learner.update
        if self.dp is not None:
            update = self.dp.attach(learner)
        if p.graphs.learner.enabled:
            update = self._graph(learner, update)
        self.update = update
        self.gen = torch.Generator(device=self.device).manual_seed(self.rp.seed + 104729)
        self.action_gen = torch.Generator().manual_seed(self.rp.seed + 15485863)
        world = p.topology.world_size
        self.warmup = 0 if self.resume_state is not None else algo.warmup_env_steps // world
        # A run started from a checkpoint's policy warms the replay up with that policy's actions.
        self.random_warmup = 0 if self.init_state is not None else self.warmup
        self.updates_owed = 0.0
        self.skipped = torch.zeros((), dtype=torch.int64, device=self.device)
        self.last_metrics: dict[str, torch.Tensor] = {}
        self.threads = LearnerThreads(self.rp.torch_threads, self.rp.learner_cpu_ids, self.rp.collector_cpu_ids)
        self.action = torch.empty(n, hello.act_dim)
        # Updates start once the replay holds a batch: counted in syncs, the same on every rank, not
        # by len(replay), which a rank's non-finite worlds shorten (the ranks' collectives would
        # then fall out of step). The n-step window holds back the newest n - 1 syncs.
        self.filled_syncs = -(-algo.batch_size // n) + replay_n_step(algo) - 1
        self.t = 0  # this session's syncs: the collector's obs slot index
        # The critic's bias on this rank's episodes (rank 0's are logged). Every world starts an
        # episode at the collector's first observation; later, those that ended at the previous sync.
        self.critic_bias = StartValueBias(n, algo.gamma, self.device)
        self.starting = torch.ones(n, dtype=torch.bool)  # on the host, as the channel's done flags

    def _step(self) -> bool:
        """One sync: act on obs[t], post the action, update while the collector steps the physics,
        then wait for the transition and store it."""
        algo, prog, learner, normalizer = self.algo, self.progress, self.learner, self.normalizer
        obs = self.bufs.obs[self.t % 2]
        if algo.normalize_observations:
            t0 = time.perf_counter()
            normalizer.update(self.dp.gather_obs(obs) if self.dp is not None else obs)
            prog.dp_sync_s += time.perf_counter() - t0 if self.dp is not None else 0.0
        if prog.env_steps - self._started_steps < self.random_warmup:
            torch.rand(self.action.shape, generator=self.action_gen, out=self.action).mul_(2).sub_(1)
        else:
            obs_in = normalizer.normalize(obs) if algo.normalize_observations else obs
            self.action.copy_(learner.act(obs_in.to(self.device)).cpu())
        self.bufs.action.copy_(self.action)
        self.collector.post_action()
        self._measure_starts(obs)  # while the collector steps the physics

        # Gradient updates overlap the physics step the collector is running now. Every rank
        # has the same replay size and warm-up, so all take the same number of updates.
        if self.t >= self.filled_syncs and prog.env_steps - self._started_steps >= self.warmup:
            self.updates_owed += algo.updates_per_step
            while self.updates_owed >= 1.0:
                if self.threads.shared:
                    self.threads.set(self.collector.obs_ready(), prog)
                t0 = time.perf_counter()
                if self.mirror is None:
                    batch = self.replay.sample(algo.batch_size, self.gen)
                else:
                    half = self.replay.sample(BatchMirror.sampled(algo.batch_size), self.gen)
                    batch = self.mirror.augment(half, algo.batch_size)
                if algo.normalize_observations:
                    batch = batch.normalized(normalizer)
                t1 = time.perf_counter()
                self.last_metrics = self.update(batch)
                self.skipped += (~self.last_metrics["critic_finite"]).to(torch.int64)
                self.updates_owed -= 1.0
                prog.updates += 1
                prog.update_s += time.perf_counter() - t1
                prog.sample_s += t1 - t0
            if self.dp is not None and prog.learner_graph is None:
                # Under the learner graph the all-reduces run inside the replay: no host timer.
                prog.grad_sync_s = self.dp.sync_s

        t0 = time.perf_counter()
        if not self.collector.wait_obs(lambda: False if self.dp is not None else self.hooks.should_stop()):
            return False
        prog.wait_s += time.perf_counter() - t0
        self._store(self.replay, learner, self.bufs, obs, self.action)
        prog.syncs += 1
        prog.env_steps += self.n
        prog.transitions_produced += self.n
        self.t += 1
        return True

    def _measure_starts(self, obs: torch.Tensor) -> None:
        """Q(s0, a0) of the episodes that begin at this sync, for the critic-bias figures. Which
        begin is read from the channel's done flags, host tensors: no device read. Outside the
        update, so a captured learner graph is untouched."""
        if not bool(self.starting.any()):
            return
        rows = self.starting.nonzero().squeeze(1)
        obs_in = obs[rows]
        if self.algo.normalize_observations:
            obs_in = self.normalizer.normalize(obs_in)
        rows_dev = rows.to(self.device)
        q = self.learner.q_estimate(obs_in.to(self.device), self.action[rows].to(self.device))
        self.critic_bias.start(rows_dev, q)

    def _metrics(self) -> dict[str, float]:
        metrics = {k: float(v) for k, v in self.last_metrics.items() if v.dim() == 0}
        metrics["skipped_updates"] = float(self.skipped)
        metrics |= {k: float(v) for k, v in self.learner.exploration_metrics().items()}
        metrics |= self.critic_bias.read()
        return metrics

    def _graph(self, learner: Any, update: Callable[..., dict[str, torch.Tensor]]) -> Any:
        """The plan enabled the learner graph: capture the whole update cycle (with data parallel,
        the all-reduce and sentinel too). Its evidence reaches the manifest through `Progress`."""

        counters: list[tuple[Any, str]] = []
        agree = None
        if self.dp is not None:
            counters.append((self.dp, "syncs"))
            counters += [(c, "syncs") for c in self.dp.grad_sync.counters.values()]
            agree = self.dp.any_rank
        runner = LearnerGraph(
            learner,
            update,
            batch_size=self.algo.batch_size,
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
        # A non-finite world is reported truncated: `ended` covers it, and its episode is left out.
        ended = bufs.terminated | bufs.truncated
        any_ended = bool(ended.any())
        self.critic_bias.step(reward, ended.to(dev) if any_ended else None, None if keep is None else ~keep)
        self.starting = ended
        replay.add_batch(obs.to(dev), action.to(dev), reward, bufs.next_obs.to(dev), terminated, truncated, keep=keep)
        self.progress.transitions_nonfinite += nbad
        # Every transition handed to the replay is in storage or in its n-step window.
        self.progress.transitions_stored = replay.total_added + replay.pending * replay.num_envs

    def grad_sync_evidence(self) -> tuple[int, float, dict[str, int]]:
        """Data parallel: gradient all-reduces, their seconds and wire bytes per sync, by optimizer."""
        dp = self.dp
        return dp.syncs, dp.sync_s, {k: v["wire_bytes_per_sync"] for k, v in dp.wire_summary().items()}

    def param_digest(self) -> str:
        """Digest of the learner's replicated tensors and the observation normalizer (fed from every
        rank, so equal on every rank too): a missed normalizer merge shows as differing digests."""
        if self.dp is None:
            raise UnilabError("internal: a parameter digest is data-parallel evidence")
        return param_digest([*self.learner.replicated(), *self.normalizer.state_dict().values()])

    def _state(self) -> dict[str, Any]:
        learner, normalizer, prog = self.learner, self.normalizer, self.progress
        return {
            "learner": learner.state_dict(),
            "normalizer": normalizer.state_dict(),
            "counters": prog.counters_state(),
            "obs_dim": int(normalizer.dim),
            "act_dim": int(learner.act_dim),
            "obs_terms": ch.obs_terms_state(self.collector.hello),
        }
