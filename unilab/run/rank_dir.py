"""Rank 0's run directory under torchrun (`python -m unilab.rank`): checked before the launch,
made only once every rank has joined the process group (a rank refused on its node must leave no
half-made directory behind), and dropped again if the run never started."""

from __future__ import annotations

from pathlib import Path

from unilab.atomic import write_text_atomic
from unilab.errors import UnilabError
from unilab.plan.models import Plan
from unilab.plan.render import render
from unilab.records.run_dir import RunDir
from unilab.run.run_dir import drop_if_nothing_ran
from unilab.run.run_lock import lock_run_dir
from unilab.run_layout import CHECKPOINTS, MANIFEST, PLAN

_RUN_FILES = (PLAN, MANIFEST, CHECKPOINTS)


def check_run_dir_free(run_dir: Path) -> None:
    """A --run-dir that already holds a run is refused (a run's files are never overwritten;
    --resume continues one). An existing directory is locked first: another launch may be writing it."""
    if run_dir.is_dir():
        lock_run_dir(run_dir)  # held until the process ends
    taken = [n for n in _RUN_FILES if (run_dir / n).exists()]
    if taken:
        raise UnilabError(
            f"--run-dir {run_dir} already holds a run ({', '.join(taken)})",
            fix=f"pass a new directory, or continue that run with --resume {run_dir}",
        )


def make_run_dir(plan: Plan, run_dir: Path) -> list[Path]:
    """Create `run_dir` (locked, if this call made it) with the plan; returns the directories it
    made, deepest first, for `drop_unstarted_run_dir`."""

    made = [p for p in [run_dir, *run_dir.parents] if not p.exists()]
    run_dir.mkdir(parents=True, exist_ok=True)
    if made:
        lock_run_dir(run_dir)
    write_text_atomic(RunDir(run_dir).plan, render(plan), "plan")
    return made


def drop_unstarted_run_dir(run_dir: Path, made: list[Path]) -> None:
    """A run that never started (no manifest) leaves nothing behind: the plan it wrote, and the
    directories it made if they are empty."""
    if made and made[0] == run_dir:
        drop_if_nothing_ran(run_dir, None, made[1:])
    elif not (run := RunDir(run_dir)).manifest.exists():  # a --run-dir that existed: only the plan is ours
        run.plan.unlink(missing_ok=True)
