"""File inputs of a plan (robot MJCF, reference motion): located, inspected and digested at plan
time without importing mujoco, so a bad file is a plan-time error, not a crash mid-run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from unilab.errors import UnilabError


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
    from unilab.robot.inspect import builtin_mjcf_path, inspect_mjcf

    path = builtin_mjcf_path() if robot_mjcf is None else resolve_input_path(robot_mjcf, spec_dir)
    try:
        return inspect_mjcf(path)
    except UnilabError as exc:
        return exc


def inspect_task_motion(motion: str | None, spec_dir: Path, robot: Any) -> Any:
    if motion is None:
        return None
    from unilab.tasks.motion_file import inspect_motion, resolve_motion

    try:
        path = resolve_motion(motion, spec_dir)
        num_bodies = None if robot is None or isinstance(robot, UnilabError) else len(robot.body_names)
        return inspect_motion(path, num_joints=29, num_bodies=num_bodies)
    except UnilabError as exc:
        return exc
