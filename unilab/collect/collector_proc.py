"""The collector process of one rank: builds the physics backend and the task, then serves the
channel protocol (see `unilab.collect.channel`) until told to stop. It ignores the stop signals
(SIGINT, SIGTERM, SIGHUP): the learner decides how a run ends, so Ctrl-C or a signal to the whole
process group gives a final checkpoint rather than a torn collector."""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unilab.errors import UnilabError
from unilab.lifetime import die_with_parent
from unilab.sim.backends import backend_def
from unilab.stop import STOP_SIGNALS

if TYPE_CHECKING:
    from unilab.collect.channel import Hello, SharedBuffers
    from unilab.collect.collector import Collector
    from unilab.collect.curriculum import RewardCurriculum

WAIT_SLICE_S = 0.5


@dataclass(frozen=True)
class CollectorConfig:
    rank: int
    task: Any  # TaskSpec (pickled to the child)
    sim: Any  # SimSpec
    spec_dir: str
    num_envs: int
    workers: int
    cpu_ids: list[int]
    device: str
    physics_graph: bool
    update_graph: bool  # the experimental collector update-state graph (CUDA)
    seed: int
    parent_pid: int
    # The run's env steps (summed over ranks) when this session starts, and per vector step of
    # every rank together: where `task.reward_curriculum` stands (unilab.collect.curriculum).
    env_steps_start: int = 0
    env_steps_per_step: int = 0


def collector_main(cfg: CollectorConfig, messages: Any, obs_conn: Any, act_conn: Any) -> None:
    """``messages``: this process's reports to the learner (its Hello, or its first error);
    ``obs_conn`` / ``act_conn``: the token pipes of the channel protocol (unilab.collect.channel)."""
    for sig in STOP_SIGNALS:  # the learner's to act on
        signal.signal(sig, signal.SIG_IGN)
    # Born with them blocked (unilab.collect.collector_client): ignored now, any that came meanwhile is dropped.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    where = f"rank{cfg.rank}.collector"
    collector = None
    try:
        die_with_parent(cfg.parent_pid)
        import torch

        from unilab.collect.build import build_collector
        from unilab.collect.channel import SharedBuffers
        from unilab.collect.curriculum import RewardCurriculum

        torch.set_num_threads(1)
        if cfg.cpu_ids and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cfg.cpu_ids)
        collector = build_collector(
            cfg.task,
            cfg.sim,
            spec_dir=Path(cfg.spec_dir),
            num_envs=cfg.num_envs,
            workers=cfg.workers,
            cpu_ids=cfg.cpu_ids or None,
            device=cfg.device,
            physics_graph=cfg.physics_graph,
            seed=cfg.seed,
            update_graph="cuda_graph" if cfg.update_graph else None,
        )
        reward_names = list(collector.task.reward_names)
        bufs = SharedBuffers.allocate(
            collector.num_envs,
            collector.obs_dim,
            collector.action_dim,
            len(reward_names),
            len(collector.health_names),
        )
        messages.send(("hello", _hello(cfg, collector, bufs, reward_names)))
        curriculum = RewardCurriculum.of(cfg.task, cfg.env_steps_start, cfg.env_steps_per_step)
        _serve(cfg, collector, bufs, obs_conn, act_conn, curriculum)
    except BaseException as exc:  # report the first error of this process to the learner, then exit non-zero
        report = _error_report(where, exc)
        try:
            messages.send(("error", report))
        except OSError:
            pass  # the learner is gone: nobody to tell
        finally:
            if collector is not None:
                collector.close()
        sys.exit(1)
    finally:
        if collector is not None:
            collector.close()


def _hello(cfg: CollectorConfig, collector: Collector, bufs: SharedBuffers, reward_names: list[str]) -> Hello:
    """The Hello the learner waits for: what this process applied, built and shares (its buffers)."""
    from unilab.collect.channel import Hello

    diag = getattr(collector.backend, "diagnostics", dict)()
    return Hello(
        pid=os.getpid(),
        cpu_ids_applied=sorted(os.sched_getaffinity(0)),
        physics_workers=cfg.workers if backend_def(cfg.sim).cpu_workers else 1,
        obs_dim=collector.obs_dim,
        act_dim=collector.action_dim,
        num_envs=collector.num_envs,
        reward_names=reward_names,
        obs_terms=collector.obs_terms,
        buffers=bufs,
        physics_graph_enabled=bool(diag.get("graph_enabled", False)),
        physics_graph_disable_reason=diag.get("graph_disable_reason"),
        health_names=list(collector.health_names),
    )


def _serve(
    cfg: CollectorConfig,
    collector: Collector,
    bufs: SharedBuffers,
    obs_conn: Any,
    act_conn: Any,
    curriculum: RewardCurriculum | None,
) -> None:
    """Reset every world, then step once per step token until told to quit, the learner's end of the
    pipe is gone, or the learner's process is (this process's parent changed)."""
    from unilab.collect.channel import (
        HEALTH_PUBLISH_SYNCS,
        STAT_WAIT_S,
        TOKEN_OBS,
        TOKEN_STEP,
        TokenWait,
        publish_health,
        publish_sync,
    )

    obs_fd, act_fd = obs_conn.fileno(), act_conn.fileno()
    act_wait = TokenWait(act_fd)
    bufs.obs[0].copy_(collector.reset_all())
    os.write(obs_fd, TOKEN_OBS)
    t = 0
    warned: dict[str, int] = {}
    stats = bufs.stats
    episode_terms = bufs.episode_terms.numpy()  # a view: += writes the shared tensor
    health = bufs.health.numpy()
    # numpy views of the shared tensors: a slice assignment of a list costs a few microseconds.
    phase_s, phase_cpu_s, timer = bufs.phase_s.numpy(), bufs.phase_cpu_s.numpy(), collector.timer
    while True:
        t0 = time.perf_counter()
        while not act_wait.ready(WAIT_SLICE_S):
            if os.getppid() != cfg.parent_pid:
                return
        if os.read(act_fd, 1) != TOKEN_STEP:  # told to quit, or the learner's end is gone
            return
        stats[STAT_WAIT_S] += time.perf_counter() - t0
        if curriculum is not None:
            curriculum.apply(collector.task, t)
        obs, reward, terminated, truncated = collector.step(bufs.action)
        t += 1
        bufs.obs[t % 2].copy_(obs)
        bufs.next_obs.copy_(collector.next_obs)
        bufs.reward.copy_(reward)
        bufs.terminated.copy_(terminated)
        bufs.truncated.copy_(truncated)
        bufs.nonfinite.copy_(collector.nonfinite)
        # Episodes completed this step: read and clear the collector's sums, so the float64
        # totals here stay exact however long the run.
        done = collector.completed_totals
        if publish_sync(stats, episode_terms, collector.num_envs, done.tolist(), collector.nonfinite_worlds_total):
            done.zero_()
        # Phase totals every sync (a few us), so a reader at any sync sees exact figures.
        phase_s[:] = timer.wall_seconds()
        phase_cpu_s[:] = timer.cpu_seconds()
        if t % HEALTH_PUBLISH_SYNCS == 0:  # a host read of device sums: not every sync
            publish_health(stats, health, collector.health_sums())
        if t % 64 == 0:
            _publish_physics_evidence(collector, bufs, warned)
        os.write(obs_fd, TOKEN_OBS)


def _publish_physics_evidence(collector: Collector, bufs: SharedBuffers, warned: dict[str, int]) -> None:
    """Graph replays, physics warnings (their peaks in ``warned``, kept across calls) and the collector
    graph's evidence, from the backend's diagnostics into the shared buffers."""
    from unilab.collect.channel import write_evidence
    from unilab.sim.contract import physics_warnings

    diag = getattr(collector.backend, "diagnostics", dict)()
    bufs.physics_replays[0] = int(diag.get("graph_replays", 0))
    # Peak per kind: MuJoCo's counts only grow; an overflow flag may clear with a reset.
    for kind, n in physics_warnings(diag).items():
        warned[kind] = max(warned.get(kind, 0), n)
    if warned:
        write_evidence(bufs.physics_warnings, warned)
    if collector.update_graph is not None:
        write_evidence(bufs.collector_graph, collector.update_graph.stats.evidence())


def _error_report(where: str, exc: BaseException) -> tuple[str, str, str, str]:
    """The (where, summary, detail, fix) an error of this process crosses to the learner as. Called
    while ``exc`` is being handled, so that the traceback is its own."""
    # A unilab error crosses with its own detail and fix; any other as one line (its traceback
    # only with UNILAB_DEBUG, for the developer).
    if isinstance(exc, UnilabError):
        return (where, exc.summary, exc.detail, exc.fix)
    tb = traceback.format_exc().strip() if os.environ.get("UNILAB_DEBUG") else ""
    return (where, f"{type(exc).__name__}: {exc}", tb, "")
