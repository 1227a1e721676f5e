"""`run.init_from`: the checkpoint a new run starts from, located and checked at plan time without
torch: a run directory (its newest checkpoint) or a checkpoint file of one, holding the bytes its
run recorded, with that run's plan readable so the rule `run.init-from` can compare the networks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.digests import env_steps_of, file_sha256, list_checkpoints, recorded_digests
from unilab.errors import UnilabError
from unilab.plan.inputs import resolve_input_path
from unilab.plan.render import load_plan
from unilab.run_layout import CHECKPOINTS, RunLayout

if TYPE_CHECKING:
    from unilab.plan.models import Plan

_FIX = "point run.init_from at a run directory written by `unilab apply`, or at a checkpoint in its checkpoints/"


@dataclass(frozen=True)
class InitSource:
    checkpoint: Path  # resolved
    sha256: str
    env_steps: int
    plan: Plan  # of the run that wrote it


def _checkpoint_of(path: Path) -> tuple[Path, Path]:
    """(checkpoint file, its run directory) for a run directory or a checkpoint file of one."""

    if path.is_dir():
        ckpts = list_checkpoints(RunLayout(path).checkpoints)
        if not RunLayout(path).plan.is_file():
            raise UnilabError(f"run.init_from: {path} is not a unilab run directory (no plan.toml)", fix=_FIX)
        if not ckpts:
            raise UnilabError(f"run.init_from: {path}/checkpoints holds no checkpoint", fix=_FIX)
        return ckpts[-1], path
    if not path.exists():
        raise UnilabError(
            f"run.init_from: {path} does not exist",
            detail="a relative path, in the spec or in --set, resolves against the spec file's directory",
            fix=_FIX,
        )
    run_dir = path.parent.parent
    if path.parent.name != CHECKPOINTS or env_steps_of(path) is None or not RunLayout(run_dir).plan.is_file():
        raise UnilabError(f"run.init_from: {path} is not a checkpoint in a unilab run directory", fix=_FIX)
    return path, run_dir


def inspect_init_from(ref: str | None, spec_dir: Path) -> InitSource | UnilabError | None:
    """The checkpoint ``run.init_from`` names (None when unset), or the UnilabError saying why not."""

    if ref is None:
        return None
    try:
        checkpoint, run_dir = _checkpoint_of(resolve_input_path(ref, spec_dir).resolve())
        plan = load_plan(RunLayout(run_dir).plan)
        want = recorded_digests(run_dir).get(checkpoint.name)
        if want is None:
            raise UnilabError(
                f"run.init_from: {checkpoint} cannot be verified: its run recorded no sha256 for it",
                detail="a run starts only from a checkpoint whose bytes its run recorded",
                fix=f"choose a checkpoint `unilab manifest validate {run_dir}` verifies",
            )
        got = file_sha256(checkpoint)
        if got != want:
            raise UnilabError(
                f"run.init_from: {checkpoint} does not have the sha256 its run recorded: it changed after it was saved",
                fix=f"restore it, or choose another checkpoint of {run_dir}",
            )
    except OSError as exc:
        return UnilabError(
            f"run.init_from: cannot read {exc.filename or ref}: {exc.strerror or exc}",
            fix="give this user read access to the run directory and its files",
        )
    except UnilabError as exc:
        return exc
    return InitSource(checkpoint=checkpoint, sha256=got, env_steps=env_steps_of(checkpoint) or 0, plan=plan)
