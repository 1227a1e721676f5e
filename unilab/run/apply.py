"""`unilab apply`: plan (or read a saved plan and refuse it if stale), create the run directory,
run the ranks, and record what happened in manifest.json, events.jsonl and tensorboard/.

Exit codes: 0 succeeded, 1 failed (the first error is named), 130 interrupted (Ctrl-C: a final
checkpoint is written first).
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from unilab.errors import UnilabError
from unilab.host.facts import HostFacts
from unilab.manifest.models import (
    BackendDiagnostics,
    CheckpointRecord,
    Counters,
    FirstError,
    GraphEvidence,
    Manifest,
    Metrics,
    RankEvidence,
    Timing,
    Topology,
)
from unilab.plan.models import Plan
from unilab.run.atomic import write_text_atomic
from unilab.run.events import EventLog
from unilab.run.manifest_io import provenance, utc_now, write_manifest

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class ApplyRequest:
    plan: Plan
    spec_dir: Path
    facts: HostFacts
    resume_dir: Path | None = None
    progress: bool = True


class StopFlag:
    """Set by the first SIGINT/SIGTERM; the rank loop polls it and ends the run gracefully. A second
    signal falls through to the default handler (immediate KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = signum
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def __call__(self) -> bool:
        return self.signal is not None


def new_run_dir(plan: Plan) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path(plan.run.output_dir) / f"{plan.run.name}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}.{i}")
    return path


def resolve_resume(plan: Plan, run_dir: Path) -> tuple[dict[str, Any], Path]:
    """The newest loadable checkpoint of `run_dir`, which must belong to the same plan."""
    from unilab.plan.render import load_plan
    from unilab.run.checkpoint import list_checkpoints, load_checkpoint

    saved = run_dir / "plan.toml"
    if not saved.is_file():
        raise UnilabError(
            f"{run_dir} is not a unilab run directory (no plan.toml)",
            fix="pass the directory `unilab apply` printed at the end of the run",
        )
    theirs = load_plan(saved)
    if theirs.plan_id != plan.plan_id:
        raise UnilabError(
            f"{run_dir} was run with plan {theirs.plan_id}, this plan is {plan.plan_id}",
            detail="--resume continues the same plan; a changed spec, override or host makes a new plan",
            fix=f"resume with the saved plan: unilab apply {saved} --resume {run_dir}",
        )
    ckpts = list_checkpoints(run_dir / "checkpoints")
    if not ckpts:
        raise UnilabError(f"{run_dir}/checkpoints holds no checkpoint to resume from", fix="start a new run")
    blob = load_checkpoint(ckpts[-1], plan_id=plan.plan_id)
    if blob["env_steps"] >= plan.run.total_env_steps:
        raise UnilabError(f"{run_dir} already finished its {plan.run.total_env_steps:,} env steps; nothing to resume",
                          fix="start a new run, or raise run.total_env_steps in the spec (a new plan)")
    return blob["state"], ckpts[-1]


class RunRecorder:
    """Rank 0's record of the run: manifest versions, events, tensorboard scalars, checkpoints."""

    def __init__(self, req: ApplyRequest, run_dir: Path, events: EventLog, resumed_from: Path | None) -> None:
        self.req, self.plan, self.run_dir, self.events = req, req.plan, run_dir, events
        self.run_id = run_dir.name
        self.started_at = utc_now()
        self.t0 = time.perf_counter()
        self.ranks: list[RankEvidence] = []
        self.checkpoints: list[CheckpointRecord] = []
        self.resumed_from = str(resumed_from) if resumed_from else None
        self.prov = provenance(req.facts)
        self.physics_graph = GraphEvidence(**self.plan.graphs.physics.model_dump())
        self.tb: Any = None
        self.last_metrics: dict[str, float] = {}

    def open_tensorboard(self) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is a dependency; a broken install is worth saying, not fatal
            self.events.info("tensorboard_unavailable")
            return
        self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))

    def manifest(self, status: str, prog: Any = None, first_error: FirstError | None = None) -> Manifest:
        p = self.plan
        wall = time.perf_counter() - self.t0
        counters, timing, metrics = Counters(), Timing(wall_s=wall), Metrics()
        if prog is not None:
            stored = prog.transitions_stored
            counters = Counters(
                env_steps=prog.env_steps,
                syncs=prog.syncs,
                updates=prog.updates,
                episodes=prog.episodes,
                nonfinite_resets=prog.nonfinite_resets,
                skipped_updates=int(self.last_metrics.get("skipped_updates", 0)),
                transitions_produced=prog.transitions_produced,
                transitions_stored=stored,
                dropped_transitions=prog.transitions_produced - prog.transitions_nonfinite - stored,
            )
            run_s = self.last_metrics.get("elapsed_s", wall)
            steps_run = self.last_metrics.get("env_steps_run", prog.env_steps)
            syncs = max(prog.syncs, 1)
            timing = Timing(
                wall_s=wall,
                env_steps_per_s=steps_run / run_s if run_s > 0 else 0.0,
                updates_per_s=prog.updates / run_s if run_s > 0 else 0.0,
                collector_phases_us={k: 1e6 * v / syncs for k, v in prog.phase_s.items()},
                learner_update_ms=1e3 * prog.update_s / max(prog.updates, 1),
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
            updated_at=utc_now(),  # type: ignore[arg-type]
            finished_at=utc_now() if status != "running" else None,
            resumed_from=self.resumed_from,
            provenance=self.prov,
            topology=Topology(
                world_size=p.topology.world_size,
                process_group_backend=p.topology.process_group_backend,
                launcher=p.topology.launcher,
            ),
            ranks=self.ranks,
            backend=BackendDiagnostics(
                physics=p.sim.backend,
                physics_graph=self.physics_graph,
                learner_graph=GraphEvidence(**p.graphs.learner.model_dump()),
            ),
            counters=counters,
            timing=timing,
            metrics=metrics,
            checkpoints=self.checkpoints,
            first_error=first_error,
        )

    def write(self, status: str, prog: Any = None, first_error: FirstError | None = None) -> None:
        write_manifest(self.run_dir / "manifest.json", self.manifest(status, prog, first_error), self.events)

    # rank hooks ---------------------------------------------------------------------------------
    def on_started(self, rank: int, hello: Any, learner_pid: int, threads: int) -> None:
        rp = self.plan.ranks[rank]
        self.ranks.append(
            RankEvidence(
                rank=rank,
                device=rp.device,
                gpu_uuid=rp.gpu_uuid,
                learner_pid=learner_pid,
                collector_pid=hello.pid,
                collector_cpu_ids_planned=rp.collector_cpu_ids,
                collector_cpu_ids_applied=hello.cpu_ids_applied,
                physics_workers=hello.physics_workers,
                torch_threads=threads,
            )
        )
        self.physics_graph = (
            self.physics_graph.model_copy(
                update={
                    "enabled": hello.physics_graph_enabled,
                    "disable_reason": hello.physics_graph_disable_reason if not hello.physics_graph_enabled else None,
                }
            )
            if self.plan.sim.backend == "mjwarp"
            else self.physics_graph
        )
        self.events.info(
            "collector_started",
            pid=hello.pid,
            cpu_ids=hello.cpu_ids_applied,
            physics_workers=hello.physics_workers,
            obs_dim=hello.obs_dim,
            act_dim=hello.act_dim,
        )
        self.open_tensorboard()
        self.write("running")

    def on_log(self, prog: Any, metrics: dict[str, float], progress_line: Any) -> None:
        self.last_metrics = metrics
        run_s = metrics.get("elapsed_s", 0.0)
        sps = metrics.get("env_steps_run", 0) / run_s if run_s > 0 else 0.0
        ups = prog.updates / run_s if run_s > 0 else 0.0
        record = {
            "env_steps": prog.env_steps,
            "env_steps_per_s": round(sps, 1),
            "updates": prog.updates,
            "updates_per_s": round(ups, 2),
            "episodes": prog.episodes,
            "episode_return": prog.last_return,
            "episode_length": prog.last_length,
            **{k: round(v, 6) for k, v in metrics.items()},
        }
        self.events.info("iteration", **record)
        if self.tb is not None:
            step = prog.env_steps
            self.tb.add_scalar("perf/env_steps_per_s", sps, step)
            self.tb.add_scalar("perf/updates_per_s", ups, step)
            if prog.last_return is not None:
                self.tb.add_scalar("episode/return", prog.last_return, step)
                self.tb.add_scalar("episode/length", prog.last_length or 0.0, step)
            for k, v in metrics.items():
                if k not in ("elapsed_s", "env_steps_run"):
                    self.tb.add_scalar(f"learner/{k}", v, step)
            self.tb.flush()
        progress_line.update(prog.env_steps, sps, ups, prog.last_return, run_s)

    def on_checkpoint(self, prog: Any, state: dict[str, Any]) -> Path:
        from unilab.run.checkpoint import save_checkpoint

        path, sha = save_checkpoint(
            self.run_dir / "checkpoints",
            state,
            plan_id=self.plan.plan_id,
            env_steps=prog.env_steps,
            keep=self.plan.run.checkpoint_keep,
        )
        kept = {p.name for p in (self.run_dir / "checkpoints").glob("ckpt-*.pt")}
        rel = str(path.relative_to(self.run_dir))
        self.checkpoints = [c for c in self.checkpoints if Path(c.path).name in kept and c.path != rel]
        self.checkpoints.append(CheckpointRecord(path=rel, env_steps=prog.env_steps, sha256=sha))
        self.events.info("checkpoint_saved", path=rel, env_steps=prog.env_steps, sha256=sha)
        self.write("running", prog)
        return path


def run_apply(req: ApplyRequest) -> int:
    from unilab.plan.render import render
    from unilab.run.offpolicy import OffPolicyRank, RankHooks, RunFailed
    from unilab.run.progress import ProgressLine

    plan = req.plan
    if plan.topology.world_size > 1:
        raise UnilabError(
            f"this unilab runs one rank; the plan has {plan.topology.world_size} (data parallel is not available yet)",
            fix='set training.devices to a single device, e.g. --set training.devices="cpu"',
        )
    if plan.algo.name == "ppo":
        raise UnilabError(
            'algo.name = "ppo" cannot be applied yet (PPO through rsl-rl-lib is not wired in)',
            fix='set algo.name = "sac" or "flashsac"',
        )

    resume_state, resumed_from = None, None
    if req.resume_dir is not None:
        resume_state, resumed_from = resolve_resume(plan, req.resume_dir)
        run_dir = req.resume_dir
    else:
        run_dir = new_run_dir(plan)
        try:
            run_dir.mkdir(parents=True)
        except OSError as exc:
            raise UnilabError(
                f"cannot create run directory {run_dir}: {exc.strerror}", fix="check run.output_dir and its permissions"
            ) from None
        write_text_atomic(run_dir / "plan.toml", render(plan), "plan")

    events = EventLog(run_dir / "events.jsonl", run_id=run_dir.name, rank=0)
    rec = RunRecorder(req, run_dir, events, resumed_from)
    stop = StopFlag()
    line = ProgressLine(plan.run.total_env_steps, enabled=req.progress)
    started = False

    def on_started(hello: Any) -> None:
        nonlocal started
        import os

        import torch

        started = True
        rec.on_started(0, hello, os.getpid(), torch.get_num_threads())

    rank = OffPolicyRank(
        plan,
        0,
        req.spec_dir,
        RankHooks(
            on_started=on_started,
            on_log=lambda prog, metrics: rec.on_log(prog, metrics, line),
            on_checkpoint=lambda prog, state: rec.on_checkpoint(prog, state),
            should_stop=stop,
        ),
        resume_state=resume_state,
    )
    events.info("run_started", plan_id=plan.plan_id, resumed_from=rec.resumed_from, run_dir=str(run_dir))
    stop.install()
    status, code, first_error = "failed", EXIT_FAILED, None
    try:
        rank.run()
        status, code = ("interrupted", EXIT_INTERRUPTED) if stop() else ("succeeded", EXIT_OK)
        rec.on_checkpoint(rank.progress, rank.final_state)
    except KeyboardInterrupt:  # a second Ctrl-C: stop now, record what we have
        status, code = "interrupted", EXIT_INTERRUPTED
    except RunFailed as exc:
        first_error = FirstError(where=exc.where, message=exc.message)
        raise
    except UnilabError as exc:
        first_error = FirstError(where="rank0.learner", message=exc.summary)
        raise
    except Exception as exc:
        first_error = FirstError(where="rank0.learner", message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        rank.close()
        stop.restore()
        line.close()
        if not started and req.resume_dir is None:
            events.close()  # nothing ran: leave no half-made run directory behind
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            try:
                rec.write(status, rank.progress, first_error)
            except UnilabError as exc:
                # The run's own first error (if any) stays the one reported; this one is said too.
                print(f"warning: the final manifest was not written: {exc.summary}", file=sys.stderr)
                if first_error is None:
                    raise
            outcome = {"succeeded": "run_finished", "interrupted": "run_interrupted"}.get(status, "run_failed")
            events.info(outcome, status=status, first_error=first_error.model_dump() if first_error else None)
            if rec.tb is not None:
                rec.tb.close()
            events.close()
            if status == "failed":
                print(f"run directory (manifest and last checkpoint): {run_dir}", file=sys.stderr)
    summarize(run_dir, rec, rank.progress, status)
    return code


def summarize(run_dir: Path, rec: RunRecorder, prog: Any, status: str) -> None:
    m = rec.manifest(status, prog)
    print(
        f"run {status}: {m.counters.env_steps:,} env steps, {m.counters.updates:,} updates, "
        f"{m.counters.episodes:,} episodes in {m.timing.wall_s:.0f} s "
        f"({m.timing.env_steps_per_s:,.0f} env steps/s, {m.timing.updates_per_s:,.1f} updates/s)"
    )
    if m.metrics.episode_return_mean is not None:
        print(
            f"last mean episode return {m.metrics.episode_return_mean:.2f}, "
            f"length {m.metrics.episode_length_mean:.0f} steps"
        )
    print(f"run directory: {run_dir}")
    sys.stdout.flush()
