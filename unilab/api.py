"""unilab from Python: plan, apply, evaluate, export and read a run, as the CLI does (docs/python.md).

    import unilab

    plan = unilab.plan("specs/g1.toml", overrides=["run.total_env_steps=100_000"])
    print(plan.plan_id, plan.learner.precision.value)
    run = unilab.apply(plan, quiet=True)
    print(run.run_dir, run.manifest.status)
    report = unilab.evaluate(run.run_dir, episodes=16)

Every refusal is the CLI's: a ``unilab.UnilabError`` (a spec error, a refused plan with its rule
ids, a file that cannot be read) whose ``render()`` is the paragraph the CLI prints, its fixes
phrased for a Python caller (``overrides=[...]``, not ``--set``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from unilab.errors import UnilabError
from unilab.evaluate.call import evaluate as evaluate  # re-exported: unilab.evaluate calls it
from unilab.manifest.models import Manifest
from unilab.plan.from_spec import SpecSource, plan
from unilab.plan.models import Plan
from unilab.python_voice import python_api
from unilab.run.resolve import resolve_apply, resolve_plan_object
from unilab.stop import import_uninterrupted, stop_signals_interrupt


@dataclass(frozen=True)
class Run:
    """What `apply` leaves: the run directory and its manifest (validated, with the run's plan and
    checkpoint digests checked). ``stopped``: the run was interrupted (Ctrl-C, SIGTERM) and ended
    with a final checkpoint; resume it with ``unilab.apply(resume=run.run_dir)``."""

    run_dir: Path
    manifest: Manifest
    stopped: bool


@contextlib.contextmanager
def _stdout_silenced() -> Iterator[None]:
    """Nothing reaches standard output: not this interpreter's prints (a notebook's sys.stdout is
    not file descriptor 1) nor the run's processes', which inherit descriptor 1."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@python_api
def apply(
    spec: SpecSource | Plan | None = None,
    overrides: Sequence[str] = (),
    *,
    resume: str | os.PathLike[str] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    replan: bool = False,
    progress: bool = True,
    quiet: bool = False,
    smoke: bool = False,
) -> Run:
    """Train, as `unilab apply` does: ``spec`` is a spec (a path or a mapping, planned for this
    host), a saved plan's path or a Plan (re-checked against this host: a plan compiled for other
    facts is refused), or None with ``resume`` (a run directory to continue, from its newest
    checkpoint or ``checkpoint``; ``replan`` as `--replan`). Blocks until the run ends; returns its
    directory and manifest. ``progress=False``: no progress line; ``quiet=True``: nothing on
    standard output either (warnings and errors still go to standard error); ``smoke=True``: the
    spec's smoke run, a budget of a few updates (`--smoke`, unilab.plan.smoke)."""
    if quiet:
        with _stdout_silenced():
            return apply(
                spec, overrides, resume=resume, checkpoint=checkpoint, replan=replan, progress=False, smoke=smoke
            )

    import_uninterrupted("numpy", "torch", "torch.utils.tensorboard", "unilab.run.apply")
    from unilab.run.apply import ApplyRequest, run_apply

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
        if smoke:
            raise UnilabError(
                "a Plan is applied as it is: smoke=True re-plans a spec with a short budget",
                fix="plan the spec with it (unilab.plan(spec, smoke=True)), or pass the spec itself",
            )
        if overrides or resume_dir is not None:
            raise UnilabError(
                "a Plan is applied as it is: overrides and resume do not apply to it",
                fix="plan again with the overrides (unilab.plan(spec, overrides=...)), or pass resume alone",
            )
        the_plan = resolve_plan_object(spec)
    elif isinstance(spec, Mapping):
        if resume_dir is not None:
            raise UnilabError("resume continues a run's own plan: pass resume alone", fix="apply(resume=RUN_DIR)")
        the_plan = plan(spec, overrides, smoke=smoke)
    else:
        target = None if spec is None else Path(spec)
        the_plan, resumes_plan = resolve_apply(target, list(overrides), resume_dir, replan, smoke)

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


@python_api
def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """A run's manifest (``path``: the run directory or its manifest.json), checked as `unilab
    manifest validate` checks it: schema, consistency, and a run directory's plan and checkpoints."""
    from unilab.records.manifest_io import validate_manifest_file

    return validate_manifest_file(Path(path))[0]


@python_api
def export(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    format: Literal["onnx", "torchscript"] = "onnx",  # as the CLI's --format
) -> Path:
    """Write the run's policy (its newest checkpoint, or ``checkpoint``) with its observation
    normalizer as ONNX or TorchScript, as `unilab export` does (default ``RUN_DIR/policy.onnx`` or
    ``policy.pt``); returns the path."""

    import_uninterrupted("numpy", "torch", "onnx", "unilab.run.export")
    from unilab.run.export import export_policy

    return export_policy(
        Path(run_dir), None if out is None else Path(out), None if checkpoint is None else Path(checkpoint), format
    )
