"""The tasks a spec can name, one line each (torch-free; unilab.tasks.taskdef), and the runtime
task a TaskSpec names, built on a given backend and robot layout."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from unilab import plugins
from unilab.sections import task_record_problem
from unilab.tasks.cartpole import CARTPOLE
from unilab.tasks.g1_motion_tracking import G1_MOTION_TRACKING
from unilab.tasks.g1_walk import G1_WALK
from unilab.tasks.taskdef import TaskDef

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sections import G1TaskSpec
    from unilab.sim.contract import PhysicsBackend
    from unilab.tasks.contract import CollectorTask

TASKS: dict[str, TaskDef] = {d.name: d for d in (G1_WALK, G1_MOTION_TRACKING, CARTPOLE)}


_CHECK = plugins.record_check(TaskDef, task_record_problem)


def plugin_task_def(name: str) -> TaskDef | None:
    """The record of the installed plugin task ``name`` (unilab.plugins), or None."""
    return plugins.plugin_record(TASKS, plugins.TASK_GROUP, name, _CHECK)


def task_def(task: object) -> TaskDef:
    """The definition of a `[task]` section (a spec or plan model) or of a task's name: a
    built-in task's or an installed plugin's."""
    return plugins.record_named(TASKS, plugins.TASK_GROUP, task, _CHECK, "task.name")


def robot_spec(task: object) -> G1TaskSpec | None:
    """The `[task]` as a G1 task's spec (its robot MJCF, default pose, observation noise, ...), or
    None for a task that brings its own model."""
    return cast("G1TaskSpec", task) if task_def(task).robot else None


def build_task(
    spec: Any,
    backend: PhysicsBackend,
    layout: RobotLayout | None,
    *,
    step_dt: float,
    seed: int = 0,
    spec_dir: Path = Path("."),
) -> CollectorTask:
    """The task for ``spec`` over ``backend`` (built from the model ``layout`` describes).

    ``step_dt`` is the env step, ``sim.timestep * sim.decimation``; ``spec_dir`` is the directory
    relative input paths (a motion file) resolve against.
    """
    return task_def(spec).builder()(spec, backend, layout, step_dt=step_dt, seed=seed, spec_dir=spec_dir)
