"""A run's directory: where a new one goes, which checkpoint a resume continues from (and where
the later ones are set aside), its kept plan, and whether a run that never started leaves it
behind. Shared by `unilab apply`, the multi-rank launcher and rank 0 under torchrun."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from unilab.atomic import write_text_atomic
from unilab.digests import digest_path, env_steps_of
from unilab.errors import UnilabError
from unilab.plan.models import Plan
from unilab.plan.render import load_plan, render
from unilab.records.manifest_io import write_manifest
from unilab.records.run_dir import RunDir


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
    from unilab.records.checkpoint import check_recorded_digest, checkpoint_name, load_checkpoint  # torch

    run = RunDir(run_dir)
    saved = run.plan
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
    ckpts = run.checkpoint_files()
    if not ckpts:
        if (unstarted := run.never_started(locked_by_us=True)) is not None:
            raise unstarted
        raise UnilabError(f"{run_dir}/checkpoints holds no checkpoint to resume from", fix="start a new run")
    if (manifest := run.read_manifest()) is None:
        # A run with checkpoints wrote its manifest before the first of them: it was deleted or damaged
        # since. Resuming would start a new record and silently lose the sessions and digests it held.
        gone = "missing" if not run.manifest.exists() else "unreadable or invalid"
        raise UnilabError(
            f"{run_dir}/manifest.json is {gone}: the run's record of its sessions and checkpoint digests is gone",
            detail="a resume continues a run's record; it would start a new one and the history would be lost",
            fix=f"restore {run_dir}/manifest.json (`unilab manifest validate {run_dir}` checks it), or start a new "
            f'run from this one\'s policy: unilab apply SPEC --set run.init_from="{run_dir}"',
        )
    path = ckpts[-1] if checkpoint is None else run.find_checkpoint(checkpoint, "unilab apply --resume")
    # A corrupt file is named as such first. Any plan the run has had may own it: a resume that
    # re-planned or extended the run can stop before the new plan's first checkpoint.
    blob = load_checkpoint(path, plan_id=run.plan_ids(run_plan_id, manifest))
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
            fix=f"nothing is left to run in it; to train it further, give it a larger budget: "
            f"unilab apply --resume {run_dir} --set run.total_env_steps=N (N above {blob['env_steps']:,})",
        )
    return path


def supersede_newer(run_dir: Path, resumed: Path) -> Path | None:
    """A resume from an older checkpoint continues the run from there: the checkpoints after it
    belong to a history the run no longer has. They are moved, with their digest files, into
    checkpoints/superseded-<utc time>/ (nothing is deleted); returns that directory, or None."""
    run = RunDir(run_dir)
    steps = env_steps_of(resumed) or 0
    newer = [c for c in run.checkpoint_files() if (env_steps_of(c) or 0) > steps]
    if not newer:
        return None
    base = run.checkpoints / f"superseded-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
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
    manifest = run.read_manifest()
    if manifest is not None:
        moved = {c.name for c in newer}
        kept = [c for c in manifest.checkpoints if Path(c.path).name not in moved]
        write_manifest(run.manifest, manifest.model_copy(update={"checkpoints": kept}), None)
    return aside


def kept_plan_path(run_dir: Path, plan_id: str) -> Path:
    """Where a re-planned run keeps the plan its new one replaced."""
    return run_dir / f"plan.{plan_id.removeprefix('sha256:')[:12]}.toml"


def replace_plan(run_dir: Path, plan: Plan, old_plan_id: str) -> None:
    """A run re-planned for this host: its plan.toml (plan `old_plan_id`, which resolve_resume
    checked) becomes the new plan, and the one it replaces is kept beside it (its checkpoints
    belong to it; the manifest's sessions name both)."""

    old = RunDir(run_dir).plan
    keep = kept_plan_path(run_dir, old_plan_id)
    if not keep.exists():
        write_text_atomic(keep, old.read_text(encoding="utf-8"), "previous plan")
    write_text_atomic(old, render(plan), "plan")


def restore_plan_unless_recorded(run_dir: Path, plan: Plan) -> None:
    """A re-planned resume that ended before its manifest named the new plan (it failed or was
    stopped while starting) puts the run's plan.toml back: the directory stays the run it was."""
    run = RunDir(run_dir)
    manifest = run.read_manifest()
    if manifest is None or manifest.plan_id == plan.plan_id:
        return
    kept = kept_plan_path(run_dir, manifest.plan_id)
    if kept.is_file():
        write_text_atomic(run.plan, kept.read_text(encoding="utf-8"), "plan")
        kept.unlink()


def drop_if_nothing_ran(run_dir: Path, resume_dir: Path | None, made_parents: list[Path] | None = None) -> bool:
    """A new run directory without a manifest holds nothing that ran: remove it, leaving no
    half-made run directory, and the parents this run made (run.output_dir) if they are empty.
    True when it was removed."""
    if resume_dir is not None or RunDir(run_dir).manifest.exists():
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in made_parents or []:  # deepest first; stop at the first that holds something
        try:
            parent.rmdir()
        except OSError:
            break
    return True


def resume_command(run_dir: Path) -> str:
    return f"unilab apply --resume {run_dir}"
