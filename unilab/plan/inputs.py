"""File inputs of a plan (robot MJCF, reference motion): located, inspected and digested at plan
time without importing mujoco, so a bad file is a plan-time error, not a crash mid-run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unilab.digests import file_sha256
from unilab.errors import UnilabError
from unilab.robot.inspect import builtin_mjcf_path, inspect_mjcf, mjcf_digest
from unilab.run_layout import RunLayout
from unilab.tasks.motion_file import inspect_motion, resolve_motion
from unilab.tasks.registry import robot_spec

if TYPE_CHECKING:
    from unilab.plan.models import RunPlan, TaskPlan


def resolve_input_path(ref: str, spec_dir: Path) -> Path:
    p = Path(ref).expanduser()
    return p if p.is_absolute() else spec_dir / p


def display_path(path: Path) -> str:
    """How a file input is written into the plan: relative to the working directory when under
    it, so plans made from a checkout read the same in every clone."""
    path = path.resolve()
    try:
        return os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


def inspect_robot(robot_mjcf: str | None, spec_dir: Path) -> Any:
    path = builtin_mjcf_path() if robot_mjcf is None else resolve_input_path(robot_mjcf, spec_dir)
    try:
        return inspect_mjcf(path)
    except UnilabError as exc:
        return exc


def inspect_task_motion(motion: str, spec_dir: Path, robot: Any) -> Any:

    try:
        path = resolve_motion(motion, spec_dir)
        num_bodies = None if robot is None or isinstance(robot, UnilabError) else len(robot.body_names)
        return inspect_motion(path, num_joints=29, num_bodies=num_bodies)
    except UnilabError as exc:
        return exc


def _user_files(task: TaskPlan) -> list[tuple[str, str, str]]:
    """(spec key, path as the plan recorded it, sha256) of each user file the task reads."""
    files: list[tuple[str, str, str]] = []
    robot = robot_spec(task)
    if robot is not None and robot.robot_mjcf is not None and task.robot.sha256 is not None:
        files.append(("robot_mjcf", task.robot.source, task.robot.sha256))
    motion = task.reference_motion
    if motion is not None and not motion.source.startswith("builtin:"):
        files.append(("motion", motion.source, motion.sha256))
    return files


def planned_input_paths(task: TaskPlan, cwd: Path) -> list[Path]:
    """The user files the plan reads (robot MJCF, motion), as paths from ``cwd``."""
    return [resolve_input_path(source, cwd) for _, source, _ in _user_files(task)]


def planned_task(task: TaskPlan) -> TaskPlan:
    """The task with its file inputs as the plan recorded them (absolute, or relative to the
    working directory the plan was made in), so a saved plan runs the files it names whatever
    directory its spec was in."""
    return task.model_copy(update={key: source for key, source, _ in _user_files(task)})


def check_planned_inputs(task: TaskPlan, cwd: Path, resume_dir: Path | None = None) -> None:
    """Refuse to run a plan whose input files are gone or changed since it was made: the plan
    (and the manifest that embeds it) would describe files other than the ones that ran. A robot
    MJCF counts with its includes and asset files (unilab.robot.inspect.mjcf_digest).
    ``resume_dir``: the run being resumed, whose fixes differ (a new plan cannot resume it)."""

    where = applied_from(resume_dir) if resume_dir is not None else None
    for field, source, digest in _user_files(task):
        key = f"task.{field}"
        path = resolve_input_path(source, cwd)
        try:
            actual = mjcf_digest(path) if field == "robot_mjcf" else file_sha256(path)
            if field == "robot_mjcf" and actual != digest and file_sha256(path) == digest:
                actual = digest  # a plan made before includes were digested recorded the main file's sha256
        except (OSError, UnilabError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else exc.summary
            if resume_dir is None:
                fix = "run `unilab apply` from that directory, or re-plan: unilab plan SPEC --out PLAN.toml"
            else:
                run = resume_dir.resolve()
                fix = f"resume from the directory the run was applied in: cd {where or 'DIR'} && "
                fix += f"unilab apply --resume {run}"
            raise UnilabError(
                f"{key}: the plan's file {source} cannot be read from {cwd}: {why}",
                detail="relative paths in a plan are taken against the working directory it was made in",
                fix=fix,
            ) from None
        if actual != digest:
            what = "its files" if field == "robot_mjcf" else source
            raise UnilabError(
                f"{key}: {source} changed since the plan was made (sha256 {actual[:12]}, planned {digest[:12]})",
                detail="a plan names the exact files it runs; this one would run different "
                + ("robot files (the MJCF, its includes or its meshes)" if field == "robot_mjcf" else "data"),
                fix="re-plan against the current file: unilab plan SPEC --out PLAN.toml (or apply the spec)"
                if resume_dir is None
                else f"restore {what} as they were when the run started to resume it, or start a new run: "
                "unilab apply SPEC",
            )


def check_init_from(run: RunPlan, cwd: Path) -> None:
    """Refuse to start a run from a checkpoint (run.init_from) that is gone or changed since the
    plan was made: the plan records the one it names by its sha256."""

    init = run.init_from
    if init is None:
        return
    path = resolve_input_path(init.checkpoint, cwd)
    try:
        actual = file_sha256(path)
    except OSError as exc:
        relative = not Path(init.checkpoint).expanduser().is_absolute()
        raise UnilabError(
            f"run.init_from: the plan's checkpoint {init.checkpoint} cannot be read"
            + (f" from {cwd}" if relative else "")
            + f": {exc.strerror}",
            detail="relative paths in a plan are taken against the working directory it was made in"
            if relative and not path.exists()
            else "",
            fix="run `unilab apply` from that directory, or re-plan: unilab plan SPEC --out PLAN.toml"
            if relative and not path.exists()
            else "restore the checkpoint (its run may have pruned it: run.checkpoint_keep), or re-plan against "
            "another: unilab plan SPEC --out PLAN.toml",
        ) from None
    if actual != init.sha256:
        raise UnilabError(
            f"run.init_from: {init.checkpoint} changed since the plan was made "
            f"(sha256 {actual[:12]}, planned {init.sha256[:12]})",
            fix="restore the checkpoint, or re-plan against another one: unilab plan SPEC --out PLAN.toml",
        )


def applied_from(run_dir: Path) -> Path | None:
    """The working directory the run's last `unilab apply` ran in, as its manifest recorded it."""
    import json

    try:
        wd = json.loads(RunLayout(run_dir).manifest.read_text())["provenance"].get("working_dir")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return Path(wd) if isinstance(wd, str) else None
