"""`unilab apply`: plan (or read a saved plan and refuse it if stale), create the run directory,
run the ranks (in this process for one rank, under torch.distributed's elastic launcher for
several), and leave manifest.json, events.jsonl, tensorboard/ and checkpoints/.

Exit codes: 0 succeeded, 1 failed (the first error is named), 130 interrupted (Ctrl-C: a final
checkpoint is written first).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from unilab.atomic import write_text_atomic
from unilab.errors import EXIT_INTERRUPTED, RUN_FAILED_FIX, RunDiverged, UnilabError
from unilab.plan.inputs import check_init_from, check_planned_inputs
from unilab.plan.models import Plan
from unilab.run.run_lock import killed_before_resume, lock_run_dir, read_run_manifest
from unilab.run.stop import STOP_SIGNALS, ignore_stop_signals, signals_blocked, stop_signals_restored


@dataclass(frozen=True)
class ApplyRequest:
    plan: Plan
    resume_dir: Path | None = None
    progress: bool = True
    # A resume re-planned for this host (--replan): the plan id of the run it continues.
    resumes_plan: str | None = None
    # The checkpoint a resume continues from (--checkpoint; None: the newest).
    checkpoint: Path | None = None


def new_run_dir(plan: Plan) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path(plan.run.output_dir).expanduser() / f"{plan.run.name}-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}.{i}")
    return path


def resolve_resume(plan: Plan, run_dir: Path, run_plan_id: str | None = None, checkpoint: Path | None = None) -> Path:
    """The newest loadable checkpoint of `run_dir` (or ``checkpoint``, a file name in its
    checkpoints/ or a path to one), which must belong to the same plan (the run's plan
    `run_plan_id` when `plan` re-plans it for this host) and still have env steps to go."""
    from unilab.plan.render import load_plan
    from unilab.run.checkpoint import (
        check_recorded_digest,
        checkpoint_name,
        env_steps_of,
        list_checkpoints,
        load_checkpoint,
    )

    saved = run_dir / "plan.toml"
    if not saved.is_file():
        raise UnilabError(
            f"{run_dir} is not a unilab run directory (no plan.toml)",
            fix="pass the directory `unilab apply` printed at the end of the run",
        )
    theirs = load_plan(saved)
    run_plan_id = run_plan_id or plan.plan_id
    if theirs.plan_id != run_plan_id:
        raise UnilabError(
            f"{run_dir} was run with plan {theirs.plan_id}, this plan is {plan.plan_id}",
            detail="--resume continues the same plan; a changed spec, override or host makes a new plan",
            fix=f"resume with the run's own plan: {resume_command(run_dir)}",
        )
    ckpts = list_checkpoints(run_dir / "checkpoints")
    if not ckpts:
        raise UnilabError(f"{run_dir}/checkpoints holds no checkpoint to resume from", fix="start a new run")
    if checkpoint is not None:
        from unilab.run.export import run_checkpoint

        path = run_checkpoint(run_dir, checkpoint, "unilab apply --resume")
    else:
        path = ckpts[-1]
    blob = load_checkpoint(path, plan_id=run_plan_id)  # a corrupt file is named as such first
    check_recorded_digest(run_dir, path)
    named = env_steps_of(path)
    if blob["env_steps"] != named:  # checkpoints are ordered, and superseded, by the steps in their names
        raise UnilabError(
            f"checkpoint {path} holds the state after {blob['env_steps']:,} env steps, its name says "
            + (f"{named:,}" if named is not None else "no env steps"),
            detail="checkpoints are picked by name; a renamed one would be resumed from the wrong point",
            fix=f"rename it back to {checkpoint_name(int(blob['env_steps']))} (and its .sha256 file), or remove it",
        )
    if blob["env_steps"] >= plan.run.total_env_steps:
        raise UnilabError(
            f"{run_dir} already finished its run ({blob['env_steps']:,} env steps of "
            f"{plan.run.total_env_steps:,} requested); nothing to resume",
            fix="nothing is left to run in it; for more training, start a new run with a larger "
            "run.total_env_steps (a finished run cannot be extended: its plan fixes the budget)",
        )
    return path


def supersede_newer(run_dir: Path, resumed: Path) -> Path | None:
    """A resume from an older checkpoint continues the run from there: the checkpoints after it
    belong to a history the run no longer has. They are moved, with their digest files, into
    checkpoints/superseded-<utc time>/ (nothing is deleted); returns that directory, or None."""
    from unilab.run.checkpoint import digest_path, env_steps_of, list_checkpoints
    from unilab.run.manifest_io import write_manifest
    from unilab.run.run_lock import read_run_manifest

    steps = env_steps_of(resumed) or 0
    newer = [c for c in list_checkpoints(run_dir / "checkpoints") if (env_steps_of(c) or 0) > steps]
    if not newer:
        return None
    base = run_dir / "checkpoints" / f"superseded-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    aside, i = base, 1
    while aside.exists():  # two resumes within a second
        i += 1
        aside = base.with_name(f"{base.name}.{i}")
    aside.mkdir()
    for c in newer:
        for f in (c, digest_path(c)):
            if f.exists():
                f.rename(aside / f.name)
    # The manifest lists what checkpoints/ holds, now and if this session never starts.
    manifest = read_run_manifest(run_dir)
    if manifest is not None:
        moved = {c.name for c in newer}
        kept = [c for c in manifest.checkpoints if Path(c.path).name not in moved]
        write_manifest(run_dir / "manifest.json", manifest.model_copy(update={"checkpoints": kept}), None)
    return aside


def kept_plan_path(run_dir: Path, plan_id: str) -> Path:
    """Where a re-planned run keeps the plan its new one replaced."""
    return run_dir / f"plan.{plan_id.removeprefix('sha256:')[:12]}.toml"


def replace_plan(run_dir: Path, plan: Plan, old_plan_id: str) -> None:
    """A run re-planned for this host: its plan.toml (plan `old_plan_id`, which resolve_resume
    checked) becomes the new plan, and the one it replaces is kept beside it (its checkpoints
    belong to it; the manifest's sessions name both)."""
    from unilab.plan.render import render

    old = run_dir / "plan.toml"
    keep = kept_plan_path(run_dir, old_plan_id)
    if not keep.exists():
        write_text_atomic(keep, old.read_text(encoding="utf-8"), "previous plan")
    write_text_atomic(old, render(plan), "plan")


def restore_plan_unless_recorded(run_dir: Path, plan: Plan) -> None:
    """A re-planned resume that ended before its manifest named the new plan (it failed or was
    stopped while starting) puts the run's plan.toml back: the directory stays the run it was."""
    manifest = read_run_manifest(run_dir)
    if manifest is None or manifest.plan_id == plan.plan_id:
        return
    kept = kept_plan_path(run_dir, manifest.plan_id)
    if kept.is_file():
        write_text_atomic(run_dir / "plan.toml", kept.read_text(encoding="utf-8"), "plan")
        kept.unlink()


def drop_if_nothing_ran(run_dir: Path, resume_dir: Path | None, made_parents: list[Path] | None = None) -> bool:
    """A new run directory without a manifest holds nothing that ran: remove it, leaving no
    half-made run directory, and the parents this run made (run.output_dir) if they are empty.
    True when it was removed."""
    if resume_dir is not None or (run_dir / "manifest.json").exists():
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in made_parents or []:  # deepest first; stop at the first that holds something
        try:
            parent.rmdir()
        except OSError:
            break
    return True


def _has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / "checkpoints").glob("ckpt-*.pt"))


def resume_command(run_dir: Path) -> str:
    return f"unilab apply --resume {run_dir}"


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
                from unilab.run.rank_env import prepare_rank_env
                from unilab.run.stop import StopFlag

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
        if code == EXIT_INTERRUPTED and _has_checkpoint(run_dir):
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
    from unilab.plan.render import render

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
        write_text_atomic(run_dir / "plan.toml", render(plan), "plan")
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
    elif (run_dir / "manifest.json").exists():
        ckpt = _has_checkpoint(run_dir)
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
