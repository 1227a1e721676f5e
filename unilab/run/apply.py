"""`unilab apply`: plan (or read a saved plan and refuse it if stale), create the run directory,
run the ranks (in this process for one rank, under torch.distributed's elastic launcher for
several), and leave manifest.json, events.jsonl, tensorboard/ and checkpoints/.

Exit codes: 0 succeeded, 1 failed (the first error is named), 130 interrupted (Ctrl-C: a final
checkpoint is written first).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from unilab.atomic import write_text_atomic
from unilab.errors import EXIT_INTERRUPTED, RUN_FAILED_FIX, RunDiverged, UnilabError
from unilab.plan.inputs import check_init_from, check_planned_inputs
from unilab.plan.models import Plan
from unilab.plan.render import render
from unilab.records.run_dir import RunDir
from unilab.run.rank_env import prepare_rank_env
from unilab.run.run_dir import (
    drop_if_nothing_ran,
    new_run_dir,
    replace_plan,
    resolve_resume,
    restore_plan_unless_recorded,
    resume_command,
    supersede_newer,
)
from unilab.run.run_lock import killed_before_resume, lock_run_dir
from unilab.stop import STOP_SIGNALS, StopFlag, ignore_stop_signals, signals_blocked, stop_signals_restored


@dataclass(frozen=True)
class ApplyRequest:
    plan: Plan
    resume_dir: Path | None = None
    progress: bool = True
    # A resume re-planned for this host (--replan): the plan id of the run it continues.
    resumes_plan: str | None = None
    # The checkpoint a resume continues from (--checkpoint; None: the newest).
    checkpoint: Path | None = None


@dataclass(frozen=True)
class ApplyOutcome:
    code: int  # the process exit status: 0 finished, 130 stopped (unilab.exit_status)
    run_dir: Path | None  # None: stopped before the run started, and no directory was kept


def run_apply(req: ApplyRequest) -> ApplyOutcome:
    # The run changes how this process takes the stop signals (a stop flag, then ignoring them
    # while it records its end) and, for one rank, pins it to the learner's CPUs: a caller that
    # goes on afterwards (a notebook, a test) gets its handlers and CPUs back, and so do the
    # processes it starts later.
    cpus = os.sched_getaffinity(0)
    try:
        with stop_signals_restored():
            return _run_apply(req)
    finally:
        os.sched_setaffinity(0, cpus)


def _run_apply(req: ApplyRequest) -> ApplyOutcome:
    plan = req.plan
    # The runtime (torch first: a resume loads its checkpoint with it) imports before anything else.
    # torch's import can swallow a KeyboardInterrupt raised inside it (the stop is then lost and
    # the run goes on; a module left half-imported cannot be imported again): a stop signal that
    # arrives meanwhile is held and acted on once the imports are done.
    with signals_blocked(*STOP_SIGNALS):
        import torch  # noqa: F401

        if plan.topology.world_size == 1:
            from unilab.run.rank_run import RankJob, run_rank
        else:
            from torch.distributed.launcher.api import elastic_launch  # noqa: F401  (launch_ranks')

            from unilab.run.launch import launch_ranks
    check_planned_inputs(plan.task, Path.cwd(), req.resume_dir)
    if req.resume_dir is None:  # a resumed run continues from its own checkpoint
        check_init_from(plan.run, Path.cwd())
    checkpoint: Path | None = None
    made: list[Path] = []  # run.output_dir's directories this run creates, deepest first
    if req.resume_dir is not None:
        run_dir, lock, checkpoint = _open_resumed_run(req, req.resume_dir)
    else:
        run_dir, lock, made = _open_new_run(plan)
    try:
        try:
            if plan.topology.world_size == 1:
                mps = prepare_rank_env(plan, 0)  # the planned GPU, before anything initialises CUDA
                stop = StopFlag()
                stop.install()
                try:
                    code = run_rank(RankJob(plan, 0, run_dir, checkpoint, req.progress, mps=mps), stop)
                finally:
                    stop.restore()
            else:
                code = launch_ranks(plan, run_dir, checkpoint, req.progress)
        finally:
            # The run is over and recorded: what is left (the directory's fate, the resume line, the
            # error's wording) takes milliseconds and must not be cut short by a late stop signal.
            ignore_stop_signals()
        if drop_if_nothing_ran(run_dir, req.resume_dir, made):  # stopped before the collector started
            print("stopped before the run started; no run directory was kept", file=sys.stderr)
            return ApplyOutcome(code, None)
        if code == EXIT_INTERRUPTED and RunDir(run_dir).has_checkpoint():
            print(f"resume with: {resume_command(run_dir)}")
        return ApplyOutcome(code, run_dir)
    except BaseException as exc:
        _settle_failed_run(exc, run_dir, req.resume_dir, made)
        raise
    finally:
        if req.resumes_plan is not None:
            restore_plan_unless_recorded(run_dir, plan)
        if lock is not None:
            os.close(lock)


def _open_resumed_run(req: ApplyRequest, resume_dir: Path) -> tuple[Path, int | None, Path]:
    """Lock ``resume_dir`` (``req.resume_dir``) and pick the checkpoint it resumes from (re-planned:
    its plan.toml replaced; the checkpoints after the picked one moved aside): ``(run_dir, lock,
    checkpoint)``. On a refusal the lock is released before the error goes on."""
    lock = lock_run_dir(resume_dir)  # before reading it: another apply may be writing it
    try:
        checkpoint = resolve_resume(req.plan, resume_dir, req.resumes_plan, req.checkpoint)
        if req.resumes_plan is not None:
            replace_plan(resume_dir, req.plan, req.resumes_plan)
        if (aside := supersede_newer(resume_dir, checkpoint)) is not None:
            print(
                f"note: resuming from {checkpoint.name}; the checkpoints after it were moved to {aside}",
                file=sys.stderr,
            )
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    run_dir = resume_dir
    if (killed := killed_before_resume(run_dir)) is not None:
        print(f"note: {killed}; this resume records that apply as killed", file=sys.stderr)
    return run_dir, lock, checkpoint


def _open_new_run(plan: Plan) -> tuple[Path, int | None, list[Path]]:
    """Create and lock a new run directory holding plan.toml: ``(run_dir, lock, made)``, ``made``
    the directories above it this run created, deepest first. A failure to write plan.toml leaves
    no empty run directory."""

    run_dir = new_run_dir(plan)
    made = [p for p in run_dir.parents if not p.exists()]
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise UnilabError(
            f"cannot create run directory {run_dir}: {exc.strerror}", fix="check run.output_dir and its permissions"
        ) from None
    lock = lock_run_dir(run_dir)
    try:
        write_text_atomic(RunDir(run_dir).plan, render(plan), "plan")
    except BaseException:
        if lock is not None:
            os.close(lock)
        drop_if_nothing_ran(run_dir, None, made)  # e.g. a full disk: no empty run directory left
        raise
    return run_dir, lock, made


def _settle_failed_run(exc: BaseException, run_dir: Path, resume_dir: Path | None, made: list[Path]) -> None:
    """A run that ended in ``exc``: drop its directory if nothing ran, else say where it is; and
    make a UnilabError's fix fit what is left (no run to read, or a checkpoint to resume from)."""
    # No import here: a Ctrl-C can land while torch is half imported.
    if drop_if_nothing_ran(run_dir, resume_dir, made):
        # There is no run to read or resume: a fix that points at one (or at its directory) is void.
        if isinstance(exc, UnilabError) and (exc.fix == RUN_FAILED_FIX or str(run_dir) in (exc.fix or "")):
            exc.fix = "nothing ran and no run directory was kept: correct the problem above and apply again"
    elif (run := RunDir(run_dir)).manifest.exists():
        ckpt = run.has_checkpoint()
        held = "manifest and last checkpoint" if ckpt else "manifest; no checkpoint was written"
        print(f"run directory ({held}): {run_dir}", file=sys.stderr)
        if isinstance(exc, UnilabError) and exc.fix == RUN_FAILED_FIX:
            exc.fix = f"read events.jsonl and the manifest in {run_dir}; " + (
                f"resume with: {resume_command(run_dir)}" if ckpt else "no checkpoint to resume from: apply again"
            )
        elif (
            isinstance(exc, UnilabError)
            and not isinstance(exc, RunDiverged)
            and ckpt
            and "--resume" not in (exc.fix or "")
        ):
            # A failure with a fix of its own (a dead physics worker, a full disk) ends a run that
            # can still go on from its last checkpoint once the cause is dealt with.
            resume = f"then resume with: {resume_command(run_dir)}"
            exc.fix = f"{exc.fix}; {resume}" if exc.fix else resume
