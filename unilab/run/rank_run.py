"""Run one rank of a plan to its end: the learner loop with its collector, rank 0's record of the
run, evidence from every rank, and a final status. Used in-process for one rank and inside each
torch.distributed elastic worker (or torchrun process) for several."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from unilab.algos.common import planned_precision
from unilab.algos.registry import algo_def
from unilab.collect.collector_client import RunFailed
from unilab.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, UnilabError
from unilab.extras import install_command
from unilab.host import probe
from unilab.manifest.models import FirstError, RankEvidence
from unilab.plan.models import Plan
from unilab.records import checkpoint
from unilab.records.events import EventLog
from unilab.records.progress import ProgressLine, plural
from unilab.records.recorder import RunRecorder
from unilab.records.run_dir import RunDir
from unilab.run import mps_attach
from unilab.run.offpolicy import OffPolicyRank
from unilab.run.rank_loop import RankHooks, RankLoop
from unilab.sim.contract import physics_warning_fix
from unilab.stop import STOP_SIGNALS, StopFlag, signals_ignored

if TYPE_CHECKING:
    from unilab.run.mps_attach import MpsAttachment

GRACE_S = 120.0  # how long the ranks wait for each other at the end of the run


@dataclass(frozen=True)
class RankJob:
    plan: Plan
    rank: int
    run_dir: Path | None  # rank 0 only
    resume_checkpoint: Path | None = None
    progress: bool = True
    # The rank's MPS attachment, from unilab.run.rank_env.prepare_rank_env (called before CUDA
    # initialised); confirmed here once the learner's context exists.
    mps: MpsAttachment | None = None


def _gather(obj: Any, world: int) -> list[Any]:
    if world == 1:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def _starting_states(job: RankJob) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The checkpoint state a resume continues from, or run.init_from's to start from (not both)."""

    plan = job.plan
    if job.resume_checkpoint is not None:
        # Rank 0 has the run directory; the others find it above the checkpoint (RUN/checkpoints/).
        run_dir = job.run_dir if job.run_dir is not None else job.resume_checkpoint.parent.parent
        plan_ids = RunDir(run_dir).plan_ids(plan.plan_id)
        return checkpoint.load_checkpoint(job.resume_checkpoint, plan_id=plan_ids)["state"], None
    if plan.run.init_from is not None:  # a resumed run continues from its own checkpoint instead
        from unilab.run.init_state import read_init_state

        return None, read_init_state(plan)
    return None, None


def _open_record(job: RankJob) -> tuple[RunRecorder, EventLog]:
    """Rank 0's record of the run: its event log (which says the run started) and recorder."""

    plan = job.plan
    if job.run_dir is None:
        raise UnilabError("internal: rank 0 needs the run directory")
    events = EventLog(RunDir(job.run_dir).events, run_id=job.run_dir.name, rank=0)
    rec = RunRecorder(
        plan,
        probe.probe_host(),
        job.run_dir,
        events,
        str(job.resume_checkpoint) if job.resume_checkpoint else None,
        ProgressLine(plan.run.effective_env_steps, enabled=job.progress),
    )
    events.info(
        "run_started",
        plan_id=plan.plan_id,
        world_size=plan.topology.world_size,
        resumed_from=rec.resumed_from,
        run_dir=str(job.run_dir),
    )
    return rec, events


class _RankStart:
    """The rank's `on_started` hook: once its collector said hello, confirm the MPS attachment,
    gather every rank's evidence and hand it to rank 0's recorder."""

    def __init__(self, job: RankJob, stop: StopFlag, dp: Any, rec: RunRecorder | None) -> None:
        self.job, self.stop, self.dp, self.rec = job, stop, dp, rec
        self.att = job.mps
        self.started = False
        self.runner: Any = None  # set once built: its allocator is evidence

    def __call__(self, hello: Any) -> None:

        plan, rank = self.job.plan, self.job.rank
        if self.dp is None and self.stop():
            # Stopped while the collector started: nothing ran yet, so, as for a stop before it,
            # nothing is recorded and apply keeps no run directory (a second Ctrl-C's path below).
            # Data-parallel ranks decide together after their first sync instead.
            raise KeyboardInterrupt
        self.started = True
        att = self.att
        if att is not None:
            # The learner's CUDA context (torch creates it lazily, at the first allocation); the
            # collector's exists already. Only then does the daemon list this process as a client.
            torch.empty(1, device="cuda")
            att = self.att = mps_attach.confirm_attached(att)
        rp = plan.ranks[rank]
        mine = RankEvidence(
            rank=rank,
            device=rp.device,
            gpu_uuid=rp.gpu_uuid,
            learner_pid=os.getpid(),
            collector_pid=hello.pid,
            collector_cpu_ids_planned=rp.collector_cpu_ids,
            collector_cpu_ids_applied=hello.cpu_ids_applied,
            learner_cpu_ids_planned=rp.learner_cpu_ids,
            learner_cpu_ids_applied=sorted(os.sched_getaffinity(0)),
            physics_workers=hello.physics_workers,
            torch_threads=torch.get_num_threads(),
            learner_precision=planned_precision(plan) if algo_def(plan.algo).follows_precision else None,
            learner_allocator=getattr(self.runner, "allocator", None),
            mps_service=att.service if att else None,
            mps_control_pipe=att.pipe_directory if att else None,
            mps_daemon_pid=att.daemon_pid if att else None,
            mps_server_pids=list(att.server_pids) if att else [],
            mps_validated=att.validated if att else None,
        )
        everyone = _gather(mine, plan.topology.world_size)
        if self.rec is not None:
            self.rec.on_started(everyone, hello.physics_graph_enabled, hello.physics_graph_disable_reason)


def _make_runner(job: RankJob, hooks: RankHooks, dp: Any, states: tuple[Any, Any]) -> RankLoop:
    plan, (resume_state, init_state) = job.plan, states
    if algo_def(plan.algo).loop == "onpolicy":  # imported here: rsl-rl takes seconds to import, others skip it
        from unilab.run.onpolicy import OnPolicyRank

        return OnPolicyRank(plan, job.rank, hooks, resume_state=resume_state, dp=dp, init_state=init_state)
    return OffPolicyRank(plan, job.rank, hooks, resume_state=resume_state, dp=dp, init_state=init_state)


def _record_end(rec: RunRecorder | None, runner: Any, dp: Any, world: int) -> None:
    """Every rank's end-of-run evidence (parameter digests, counters) gathered to rank 0's record,
    with its final checkpoint."""
    pr = runner.progress
    digest = runner.param_digest() if dp is not None else None
    mine = (
        digest,
        {
            "episodes": pr.episodes,
            "nonfinite_resets": pr.nonfinite_resets,
            "transitions_nonfinite": pr.transitions_nonfinite,
            "transitions_stored": pr.transitions_stored,
            "transitions_produced": pr.transitions_produced,
        },
    )
    if dp is not None:
        dp.finish_within(GRACE_S)
    finals = _gather(mine, world)
    digests = [d for d, _ in finals]
    if rec is None:
        return
    totals = {k: sum(c[k] for _, c in finals) for k in finals[0][1]}
    with_dp = dp is not None
    rec.on_finished(pr, totals, digests if with_dp else None, runner.grad_sync_evidence() if with_dp else None)
    if runner.final_state is not None:  # None: stopped before the first observation, nothing to save
        rec.on_checkpoint(pr, runner.final_state)


def run_rank(job: RankJob, stop: StopFlag) -> int:
    """Returns the exit code; raises RunFailed / UnilabError for failures (after recording them)."""
    plan, rank, world = job.plan, job.rank, job.plan.topology.world_size
    if plan.cuda_process_sharing.effective == "mps" and job.mps is None:
        raise UnilabError("internal: an MPS rank must be prepared (unilab.run.rank_env) before CUDA initialises")
    states = _starting_states(job)
    rec, events = _open_record(job) if rank == 0 else (None, None)
    dp = None
    if world > 1:
        from unilab.run.dp import DpContext

        dp = DpContext(plan, rank, world)
    start = _RankStart(job, stop, dp, rec)
    noop = lambda *a: None  # noqa: E731
    hooks = RankHooks(
        on_started=start,
        on_log=rec.on_log if rec is not None else noop,
        on_checkpoint=rec.on_checkpoint if rec is not None else noop,
        should_stop=stop,
    )
    runner = start.runner = _make_runner(job, hooks, dp, states)
    if rec is not None and events is not None:
        # Last before the collector starts: nothing after it can fail without reaching _finish,
        # which ends the W&B run; a mirror that cannot start refuses the run before it begins.
        try:
            rec.open_wandb()
        except UnilabError as exc:
            runner.close()
            error = {"where": "rank0.wandb", "message": exc.summary}
            events.info("run_not_started", status="failed", first_error=error)
            events.close()
            raise
    status, code, first_error = "failed", EXIT_FAILED, None
    try:
        runner.run()
        status, code = ("interrupted", EXIT_INTERRUPTED) if runner.interrupted else ("succeeded", EXIT_OK)
        _record_end(rec, runner, dp, world)
    except KeyboardInterrupt:  # a second Ctrl-C: stop now, record what we have
        status, code = "interrupted", EXIT_INTERRUPTED
    except RunFailed as exc:
        first_error = FirstError(where=exc.where, message=exc.message)
        raise
    except UnilabError as exc:
        first_error = FirstError(where=f"rank{rank}.learner", message=exc.summary)
        raise
    except Exception as exc:
        lost = None
        if dp is not None:
            from unilab.run.dp import lost_rank_error

            lost = lost_rank_error(exc, rank, world, dp.control)
        if lost is not None:  # another rank is gone: name it, not this rank's broken collective
            first_error = FirstError(where=lost.where, message=lost.message)
            raise lost from None
        first_error = FirstError(where=f"rank{rank}.learner", message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        with signals_ignored(*STOP_SIGNALS):  # a further stop signal must not cut the record short
            runner.close()
            if rec is not None and events is not None:
                _finish(rec, events, status, first_error, start.started)
    if rec is not None and start.started:
        summarize(rec, status)
    return code


def _finish(rec: RunRecorder, events: EventLog, status: str, first_error: FirstError | None, started: bool) -> None:
    rec.close()
    if started:  # before the collector starts there is nothing to record (and a resumed run keeps its manifest)
        try:
            rec.write(status, first_error)
        except UnilabError as exc:
            # The run's own first error (if any) stays the one reported; this one is said too.
            print(f"warning: the final manifest was not written: {exc.summary}", file=sys.stderr)
            if first_error is None:
                raise
        outcome = {"succeeded": "run_finished", "interrupted": "run_interrupted"}.get(status, "run_failed")
        events.info(outcome, status=status, first_error=first_error.model_dump() if first_error else None)
    else:
        # Nothing ran this session. A resumed run keeps its directory, so its log says why the
        # session's run_started had no run: refused (first_error) or stopped before it began.
        error = first_error.model_dump() if first_error else None
        events.info("run_not_started", status=status, first_error=error)
    try:
        rec.finish_wandb(status)
    except Exception as exc:  # the run and its record are complete; the mirror's end is not theirs
        print(f"warning: the W&B mirror did not finish: {type(exc).__name__}: {exc}", file=sys.stderr)
    events.close()


def _why_no_updates(m: Any) -> str | None:
    """Why a run that collected env steps made no update, from its counters; None when it updated
    (or was stopped before the plan's first update was due: the plan rules guarantee one otherwise)."""
    c = m.counters
    if c.updates > 0 or c.env_steps == 0 or m.status != "succeeded":
        return None
    if c.transitions_produced and c.transitions_stored < c.transitions_produced:
        lost = c.transitions_produced - c.transitions_stored
        return (
            f"{lost:,} of its {c.transitions_produced:,} transitions were not stored ({c.nonfinite_resets:,} worlds "
            "reset for a non-finite state), so the replay never held a batch: the physics diverged; check "
            "task and sim values (docs/spec.md) and the run's physics warnings"
        )
    return f"it collected {c.env_steps:,} env steps and its learner never updated; events.jsonl has the run's log"


RECENT_EPISODES = 100


def summarize(rec: RunRecorder, status: str) -> None:
    m = rec.manifest(status)
    # The counters span the whole run, the timing this session: a resumed run says so.
    rates = (
        f"{m.timing.train_s:.0f} s training: {m.timing.env_steps_per_s:,.0f} env steps/s, "
        f"{m.timing.updates_per_s:,.1f} updates/s"
    )
    when = (
        f" (resumed from {Path(m.resumed_from).name}; this session {m.timing.wall_s:.0f} s, {rates})"
        if m.resumed_from
        else f" in {m.timing.wall_s:.0f} s ({rates})"
    )
    print(
        f"run {status}: {m.counters.env_steps:,} env steps, {m.counters.updates:,} updates, "
        f"{m.counters.episodes:,} episodes{when}"
    )
    # Over the last 100 or more episodes (rank 0's), as rsl-rl and Stable-Baselines3 report theirs:
    # the run's last log interval may hold a single fall.
    recent = rec.prog.recent_episodes(RECENT_EPISODES) if rec.prog is not None else None
    if recent is not None:
        n, ret, length = recent
        print(f"mean episode return {ret:.2f}, length {length:.0f} steps, over the last {plural(n, 'episode')}")
    if status == "succeeded" and m.checkpoints:
        if importlib.util.find_spec("imageio_ffmpeg") is not None:
            print(f"next: unilab eval {rec.run_dir} --video {rec.run_dir / 'eval.mp4'}   (score and film the policy)")
        else:  # the video extra is not installed: offer what works, and how to film
            print(f"next: unilab eval {rec.run_dir}   (score the policy; to film it: {install_command('video')})")
    print(f"run directory: {rec.run_dir}")
    if (why := _why_no_updates(m)) is not None:  # even with --quiet: the run trained nothing
        print(f"warning: the run made no policy update: {why}", file=sys.stderr)
    for kind, n in m.backend.physics_warnings.items():
        fix = physics_warning_fix(kind, rec.plan.sim.njmax, rec.plan.sim.nconmax)
        if fix:  # physics ran without some constraints or contacts: say so even with --quiet
            print(f"warning: {kind} = {n}: the physics dropped what did not fit; {fix}", file=sys.stderr)
    sys.stdout.flush()
