"""Rank 0's record of a run: manifest versions, events, tensorboard scalars, checkpoints, and the
progress line. Other ranks send it their evidence; they write nothing themselves."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from unilab.errors import UnilabError
from unilab.host.facts import HostFacts
from unilab.manifest.models import (
    ApplySession,
    BackendDiagnostics,
    CheckpointRecord,
    Counters,
    DataParallelEvidence,
    FirstError,
    GraphEvidence,
    Manifest,
    Metrics,
    RankEvidence,
    SharingEvidence,
    Timing,
    Topology,
)
from unilab.plan.models import Plan
from unilab.records.checkpoint import CheckpointState, env_steps_of, save_checkpoint
from unilab.records.events import EventLog
from unilab.records.manifest_io import keep_code_diff, provenance, utc_now, write_manifest
from unilab.records.progress import Progress, ProgressLine, cpu_ranges, plural
from unilab.records.run_dir import RunDir
from unilab.records.wandb_mirror import FINISH_TIMEOUT_S, WandbMirror
from unilab.sim.backends import backend_def
from unilab.sim.contract import physics_warning_fix


def existing_checkpoints(run_dir: Path) -> list[CheckpointRecord]:
    """Records of the checkpoints already in a run directory (a resume continues its record), with
    the digests the run recorded for them, never ones taken from the files now: a checkpoint whose
    digest was not recorded is left out rather than vouched for."""

    run = RunDir(run_dir)
    recorded = run.recorded_digests()
    out = []
    for path in run.checkpoint_files():
        steps, digest = env_steps_of(path), recorded.get(path.name)
        if steps is not None and digest is not None:
            out.append(CheckpointRecord(path=str(path.relative_to(run_dir)), env_steps=steps, sha256=digest))
    return out


def previous_sessions(run_dir: Path) -> list[ApplySession]:
    """The applies recorded in the manifest a resume finds (one synthesized from its fields when it
    predates session records). Its last apply, if the manifest still says `running`, was killed:
    this resume holds the run directory's lock, so no apply runs it."""

    old = RunDir(run_dir).read_manifest()
    if old is None:
        return []
    sessions = old.recorded_sessions()
    if sessions[-1].ended == "running":
        sessions[-1] = sessions[-1].model_copy(update={"ended": "killed"})
    return sessions


class RunRecorder:
    def __init__(
        self,
        plan: Plan,
        facts: HostFacts,
        run_dir: Path,
        events: EventLog,
        resumed_from: str | None,
        progress: ProgressLine,
    ) -> None:
        self.plan, self.run_dir, self.events, self.line = plan, run_dir, events, progress
        self.run = RunDir(run_dir)
        self.run_id = run_dir.name
        self.started_at = utc_now()
        self.t0 = time.perf_counter()
        self.ranks: list[RankEvidence] = []
        # A resumed run keeps the checkpoints already on disk in its record (same directory).
        self.checkpoints: list[CheckpointRecord] = existing_checkpoints(run_dir) if resumed_from else []
        self.resumed_from = resumed_from
        self.sessions = previous_sessions(run_dir) if resumed_from else []
        self.session = ApplySession(
            started_at=self.started_at,
            plan_id=plan.plan_id,
            host_fingerprint=plan.plan.host_fingerprint,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            resumed_from=resumed_from,
            ended="running",
        )
        self.prov = provenance(facts)
        self.physics_graph = GraphEvidence(**plan.graphs.physics.model_dump())
        self.data_parallel: DataParallelEvidence | None = None
        if plan.topology.world_size > 1:
            self.data_parallel = DataParallelEvidence(
                world_size=plan.topology.world_size,
                process_group_backend=plan.topology.process_group_backend,
                wire_dtype=plan.gradient_wire.dtype,
            )
        self.tb: Any = None
        self.wandb: WandbMirror | None = None
        self.last_metrics: dict[str, float] = {}
        self._episodes_logged: int | None = None  # rank 0's episode count at the previous log
        self._health_logged = 0.0  # rank 0's env steps of learning-health figures at the previous log
        self.prog: Progress | None = None
        # Exact sums over ranks, gathered at the end; until then rank 0's counts times the world size.
        self.totals: dict[str, int] | None = None
        self._warned: set[str] = set()

    @property
    def world(self) -> int:
        return self.plan.topology.world_size

    def open_tensorboard(self) -> None:
        if self.tb is not None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # a dependency: a run without its curves is not the run the docs promise
            raise UnilabError(
                f"tensorboard cannot be imported ({exc}), so the run could not write its curves",
                fix="reinstall unilab's dependencies: bash tools/setup.sh",
            ) from None
        _quiet_writer_thread_errors()
        self.tb = SummaryWriter(str(self.run.tensorboard))

    def open_wandb(self) -> None:
        """Before the collector starts: a mirror that cannot start refuses the run, not ends it."""
        if self.plan.run.wandb is None or self.wandb is not None:
            return
        self.wandb = WandbMirror(self.plan, self.run_dir, resumed=self.resumed_from is not None)
        self.events.info("wandb_mirror", mode=self.wandb.mode, why=self.wandb.why, run_dir=self.wandb.run.dir)
        self.line.note(f"mirrored to {self.wandb.where}")

    def finish_wandb(self, status: str) -> None:
        """After the final manifest is written: attach it and end the W&B run."""
        if self.wandb is not None:
            mirror, self.wandb = self.wandb, None
            if not mirror.finish(self.run.manifest, failed=status == "failed"):
                print(  # even with --quiet: the mirror is incomplete
                    f"warning: the W&B run did not finish uploading within {FINISH_TIMEOUT_S:.0f} s; its local copy "
                    f"is in {self.run_dir / 'wandb'} (upload it with: wandb sync {self.run_dir / 'wandb'}/*run-*)",
                    file=sys.stderr,
                )

    def manifest(self, status: str, first_error: FirstError | None = None) -> Manifest:
        p, prog, w = self.plan, self.prog, self.world
        wall = time.perf_counter() - self.t0
        counters, timing, metrics = Counters(), Timing(wall_s=wall), Metrics()
        if prog is not None:
            # Env steps and syncs are exact (ranks run in lockstep with equal env counts); the other
            # sums are exact once gathered at the end, rank 0's times the world size before that.
            t = self.totals or {
                k: getattr(prog, k) * w
                for k in (
                    "episodes",
                    "nonfinite_resets",
                    "transitions_nonfinite",
                    "transitions_stored",
                    "transitions_produced",
                )
            }
            counters = Counters(
                env_steps=prog.env_steps * w,
                syncs=prog.syncs,
                updates=prog.updates,
                episodes=t["episodes"],
                nonfinite_resets=t["nonfinite_resets"],
                skipped_updates=int(self.last_metrics.get("skipped_updates", 0)),
                transitions_produced=t["transitions_produced"],
                transitions_stored=t["transitions_stored"],
                dropped_transitions=t["transitions_produced"] - t["transitions_nonfinite"] - t["transitions_stored"],
            )
            run_s = self.last_metrics.get("elapsed_s", wall)
            # Rates and per-update times are this session's (a resumed run's counters include the
            # updates before the resume, its clock and timers do not).
            steps_run = self.last_metrics.get("env_steps_run", prog.env_steps) * w
            updates_run = int(self.last_metrics.get("updates_run", prog.updates))
            timing = Timing(
                wall_s=wall,
                train_s=run_s,
                env_steps_per_s=steps_run / run_s if run_s > 0 else 0.0,
                updates_per_s=updates_run / run_s if run_s > 0 else 0.0,
                collector_phases_us={k: 1e6 * v / max(prog.syncs, 1) for k, v in prog.phase_s.items()},
                collector_phases_cpu_us={k: 1e6 * v / max(prog.syncs, 1) for k, v in prog.phase_cpu_s.items()},
                learner_sample_ms=1e3 * prog.sample_s / max(updates_run, 1),
                learner_update_ms=1e3 * prog.update_s / max(updates_run, 1),
                learner_grad_sync_ms=1e3 * prog.grad_sync_s / max(updates_run, 1),
                learner_updates_on_shared_cpus=prog.updates_on_shared_cpus / max(updates_run, 1),
                learner_wait_s=prog.wait_s,
                collector_wait_s=prog.collector_wait_s,
            )
            metrics = Metrics(episode_return_mean=prog.last_return, episode_length_mean=prog.last_length)
            self.physics_graph = self.physics_graph.model_copy(update={"replays": prog.physics_replays})
        return Manifest(
            run_id=self.run_id,
            plan_id=p.plan_id,
            spec_digest=p.plan.spec_digest,
            task=p.task.name,
            algo=p.algo.name,
            status=status,
            started_at=self.started_at,
            updated_at=utc_now(),
            finished_at=utc_now() if status != "running" else None,
            resumed_from=self.resumed_from,
            provenance=self.prov,
            topology=Topology(
                world_size=w, process_group_backend=p.topology.process_group_backend, launcher=p.topology.launcher
            ),
            ranks=sorted(self.ranks, key=lambda r: r.rank),
            backend=BackendDiagnostics(
                physics=p.sim.backend,
                physics_graph=self.physics_graph,
                learner_graph=self._learner_graph(),
                collector_graph=GraphEvidence(
                    **p.graphs.collector.model_dump(), **((prog.collector_graph if prog else None) or {})
                ),
                physics_warnings=dict(prog.physics_warnings if prog else {}),
            ),
            cuda_process_sharing=SharingEvidence(
                configured=p.cuda_process_sharing.configured,
                effective=p.cuda_process_sharing.effective
                if all(r.mps_validated is not False for r in self.ranks)
                else "none",
            ),
            data_parallel=self.data_parallel,
            counters=counters,
            timing=timing,
            metrics=metrics,
            checkpoints=self.checkpoints,
            first_error=first_error,
            sessions=[*self.sessions, self.session.model_copy(update={"ended": status})],
        )

    def write(self, status: str, first_error: FirstError | None = None) -> None:
        write_manifest(self.run.manifest, self.manifest(status, first_error), self.events)

    # --------------------------------------------------------------------------------- rank hooks
    def on_started(self, evidence: list[RankEvidence], physics_enabled: bool, physics_reason: str | None) -> None:
        self.ranks = list(evidence)
        if backend_def(self.plan.sim).cuda:
            self.physics_graph = self.physics_graph.model_copy(
                update={"enabled": physics_enabled, "disable_reason": None if physics_enabled else physics_reason}
            )
        p = self.plan
        self.line.note(
            f"{p.algo.name} on {p.task.name}, {p.task.num_envs} envs x {plural(self.world, 'rank')}, "
            f"{p.sim.backend} physics; plan {p.plan_id[:19]}"
        )
        init = p.run.init_from
        if init is not None and self.resumed_from is None:
            self.events.info("started_from", checkpoint=init.checkpoint, sha256=init.sha256, env_steps=init.env_steps)
            self.line.note(f"starting from the policy of {init.checkpoint} ({init.env_steps:,} env steps trained)")
        for e in evidence:
            self.events.info(
                "collector_started",
                of_rank=e.rank,
                pid=e.collector_pid,
                cpu_ids=e.collector_cpu_ids_applied,
                physics_workers=e.physics_workers,
                learner_cpu_ids=e.learner_cpu_ids_applied,
            )
            learner = (
                f"learner on CPUs {cpu_ranges(e.learner_cpu_ids_applied)}"
                if e.learner_cpu_ids_planned
                else f"learner not pinned (CPUs {cpu_ranges(e.learner_cpu_ids_applied)})"
            )
            self.line.note(
                f"rank {e.rank} ({e.device}): {learner}, collector on CPUs "
                f"{cpu_ranges(e.collector_cpu_ids_applied)} with {plural(e.physics_workers, 'physics worker')}"
            )
        self.open_tensorboard()
        self.prov = keep_code_diff(self.run_dir, self.prov, self.started_at)
        self.write("running")

    def _note_physics_warnings(self, seen: dict[str, int]) -> None:
        """Say each new kind of physics warning once, on the terminal and in the events."""
        for kind, n in seen.items():
            if kind not in self._warned:
                self._warned.add(kind)
                self.events.info("physics_warning", kind=kind, count=n)
                fix = physics_warning_fix(kind, self.plan.sim.njmax, self.plan.sim.nconmax)
                self.line.note(
                    f"physics warning on rank 0: {kind} ({n}); the manifest records the counts"
                    + (f"; {fix}" if fix else "")
                )

    def _learner_graph(self) -> GraphEvidence:
        planned = self.plan.graphs.learner.model_dump()
        stats = self.prog.learner_graph if self.prog is not None else None
        return GraphEvidence(**planned, **(stats.evidence() if stats is not None else {}))

    def on_log(self, prog: Progress, metrics: dict[str, float]) -> None:
        self.prog, self.last_metrics = prog, metrics
        self._note_physics_warnings(prog.physics_warnings)
        run_s = metrics.get("elapsed_s", 0.0)
        sps = metrics.get("env_steps_run", 0) * self.world / run_s if run_s > 0 else 0.0
        ups = metrics.get("updates_run", prog.updates) / run_s if run_s > 0 else 0.0
        # Episode figures only for an interval in which episodes ended: repeating the previous
        # interval's mean as a new point would show progress (or its absence) that never happened.
        fresh = prog.last_return is not None and prog.episodes != self._episodes_logged
        self._episodes_logged = prog.episodes
        # Learning-health figures likewise only for a window the collector published since the last log.
        health = prog.last_health if prog.health_env_steps != self._health_logged else {}
        self._health_logged = prog.health_env_steps
        record = {
            "env_steps": prog.env_steps * self.world,
            "env_steps_per_s": round(sps, 1),
            "updates": prog.updates,
            "updates_per_s": round(ups, 2),
            "episodes": prog.episodes * self.world,
            "episode_return": prog.last_return if fresh else None,
            "episode_length": prog.last_length if fresh else None,
            "terminated_fraction": prog.last_terminated_fraction if fresh else None,
            "episode_reward": {k: round(v, 6) for k, v in prog.last_reward_terms.items()} if fresh else {},
            **{k: round(v, 6) for k, v in health.items()},
            **{k: round(v, 6) for k, v in metrics.items()},
        }
        self.events.info("iteration", **record)
        scalars = {"perf/env_steps_per_s": sps, "perf/updates_per_s": ups}
        if fresh:
            scalars["episode/return"] = prog.last_return or 0.0  # fresh: not None
            scalars["episode/length"] = prog.last_length or 0.0
            scalars["episode/terminated_fraction"] = prog.last_terminated_fraction or 0.0
            for name, v in prog.last_reward_terms.items():  # the return's terms, as mjlab logs them
                scalars[f"episode_reward/{name}"] = v
        scalars |= {f"health/{k}": v for k, v in health.items()}
        scalars |= {f"learner/{k}": v for k, v in metrics.items() if k not in ("elapsed_s", "env_steps_run")}
        step = prog.env_steps * self.world
        if self.tb is not None:
            for tag, v in scalars.items():
                self.tb.add_scalar(tag, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step)  # plotted against env_steps, as in TensorBoard
        self.line.update(prog.env_steps * self.world, sps, ups, prog.last_return if fresh else None, run_s)

    def on_finished(
        self,
        prog: Progress,
        totals: dict[str, int],
        param_digests: list[str | None] | None,
        grad_sync: tuple[int, float, dict[str, int]] | None,
    ) -> None:
        """Every rank's end-of-run evidence, gathered to rank 0: the counters summed over ranks and,
        with data parallel, each rank's parameter digest and the gradient all-reduce's figures
        (``grad_sync``: syncs, seconds, wire bytes per sync by buffer)."""
        self.prog, self.totals = prog, totals
        if param_digests is None or grad_sync is None or self.data_parallel is None:
            return
        self.ranks = [r.model_copy(update={"param_digest": d}) for r, d in zip(self.ranks, param_digests, strict=True)]
        syncs, sync_s, wire = grad_sync
        self.data_parallel = self.data_parallel.model_copy(
            update={
                "grad_syncs": syncs,
                "grad_sync_ms_per_update": 1e3 * sync_s / max(prog.updates, 1),
                "wire_bytes_per_sync": wire,
                "obs_gather_s": prog.dp_sync_s,
                "params_identical": len(set(param_digests)) == 1,
            }
        )

    def on_checkpoint(self, prog: Progress, state: CheckpointState) -> Path:

        self.prog = prog
        steps = prog.env_steps * self.world
        path, sha = save_checkpoint(
            self.run.checkpoints,
            state,
            plan_id=self.plan.plan_id,
            env_steps=steps,
            keep=self.plan.run.checkpoint_keep,
        )
        kept = {p.name for p in self.run.checkpoint_files()}
        rel = str(path.relative_to(self.run_dir))
        self.checkpoints = [c for c in self.checkpoints if Path(c.path).name in kept and c.path != rel]
        self.checkpoints.append(CheckpointRecord(path=rel, env_steps=steps, sha256=sha))
        self.events.info("checkpoint_saved", path=rel, env_steps=steps, sha256=sha)
        self.write("running")
        return path

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        self.line.close()


def _quiet_writer_thread_errors() -> None:
    """TensorBoard writes its event file from a thread of its own; on a full or read-only disk that
    thread dies with the OSError, which Python prints as a traceback, and the writer raises the same
    error in the foreground at its next call, where the run reports it in one paragraph. The
    traceback says nothing more, so it is not printed; any other thread's exception still is."""
    import threading

    previous = threading.excepthook
    if getattr(previous, "unilab_quiet_writer", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if issubclass(args.exc_type, OSError) and type(args.thread).__name__ == "_AsyncWriterThread":
            return
        previous(args)

    hook.unilab_quiet_writer = True  # type: ignore[attr-defined]
    threading.excepthook = hook
