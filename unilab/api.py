"""unilab from Python: plan, apply and read a run, as the CLI does (docs/python.md).

    import unilab

    plan = unilab.plan("specs/g1.toml", overrides=["run.total_env_steps=100_000"])
    print(plan.plan_id, plan.learner.precision.value)
    run = unilab.apply(plan)
    print(run.run_dir, run.manifest.status)

Every refusal is the CLI's: a ``unilab.UnilabError`` (a spec error, a refused plan with its rule
ids, a file that cannot be read) whose ``str()`` is the paragraph the CLI prints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from unilab.errors import UnilabError
from unilab.manifest.models import Manifest
from unilab.plan.from_spec import SpecSource, plan
from unilab.plan.models import Plan


@dataclass(frozen=True)
class Run:
    """What `apply` leaves: the run directory and its manifest (validated, with the run's plan and
    checkpoint digests checked). ``stopped``: the run was interrupted (Ctrl-C, SIGTERM) and ended
    with a final checkpoint; resume it with ``unilab.apply(resume=run.run_dir)``."""

    run_dir: Path
    manifest: Manifest
    stopped: bool


def apply(
    spec: SpecSource | Plan | None = None,
    overrides: Sequence[str] = (),
    *,
    resume: str | os.PathLike[str] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    replan: bool = False,
    progress: bool = True,
) -> Run:
    """Train, as `unilab apply` does: ``spec`` is a spec (a path or a mapping, planned for this
    host), a saved plan's path or a Plan (re-checked against this host: a plan compiled for other
    facts is refused), or None with ``resume`` (a run directory to continue, from its newest
    checkpoint or ``checkpoint``; ``replan`` as `--replan`). Blocks until the run ends; returns its
    directory and manifest."""
    from unilab.run.apply import ApplyRequest, run_apply
    from unilab.run.resolve import resolve_apply, resolve_plan_object

    resume_dir = None if resume is None else Path(resume)
    if checkpoint is not None and resume_dir is None:
        raise UnilabError(
            "checkpoint picks the checkpoint a resumed run continues from",
            fix="pass it with resume=RUN_DIR; to start a new run from a checkpoint's policy, set run.init_from",
        )
    if replan and resume_dir is None:
        raise UnilabError("replan re-plans a run being resumed", fix="pass it with resume=RUN_DIR, or drop it")
    resumes_plan = None
    if isinstance(spec, Plan):
        if overrides or resume_dir is not None:
            raise UnilabError(
                "a Plan is applied as it is: overrides and resume do not apply to it",
                fix="plan again with the overrides (unilab.plan(spec, overrides=...)), or pass resume alone",
            )
        the_plan = resolve_plan_object(spec)
    elif isinstance(spec, Mapping):
        if resume_dir is not None:
            raise UnilabError("resume continues a run's own plan: pass resume alone", fix="apply(resume=RUN_DIR)")
        the_plan = plan(spec, overrides)
    else:
        target = None if spec is None else Path(spec)
        the_plan, resumes_plan = resolve_apply(target, list(overrides), resume_dir, replan)
    from unilab.stop import stop_signals_interrupt

    with stop_signals_interrupt():
        outcome = run_apply(
            ApplyRequest(
                plan=the_plan,
                resume_dir=resume_dir,
                progress=progress,
                resumes_plan=resumes_plan,
                checkpoint=None if checkpoint is None else Path(checkpoint),
            )
        )
    if outcome.run_dir is None:
        raise KeyboardInterrupt  # stopped before the run started: nothing to return
    return Run(outcome.run_dir, load_manifest(outcome.run_dir), stopped=outcome.code != 0)


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """A run's manifest (``path``: the run directory or its manifest.json), checked as `unilab
    manifest validate` checks it: schema, consistency, and a run directory's plan and checkpoints."""
    from unilab.records.manifest_io import validate_manifest_file

    return validate_manifest_file(Path(path))[0]
