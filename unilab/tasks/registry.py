"""Build the runtime task a TaskSpec names, on a given backend and robot layout."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from unilab.tasks.motion_file import load_motion, resolve_motion

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sim.contract import PhysicsBackend
    from unilab.spec.models import TaskSpec
    from unilab.tasks.base import Task


def build_task(
    spec: TaskSpec,
    backend: PhysicsBackend,
    layout: RobotLayout | None,
    *,
    step_dt: float,
    seed: int = 0,
    spec_dir: Path = Path("."),
) -> Task:
    """The task for ``spec`` over ``backend`` (built from the model ``layout`` describes).

    ``step_dt`` is the env step, ``sim.timestep * sim.decimation``; ``spec_dir`` is the directory
    relative ``task.motion`` paths resolve against.
    """
    if spec.name == "cartpole":
        from unilab.tasks.cartpole import CartpoleTask

        return CartpoleTask(spec, backend, step_dt=step_dt, seed=seed)  # type: ignore[return-value]
    if spec.name == "g1_walk":
        from unilab.tasks.g1_walk import G1WalkTask

        return G1WalkTask(spec, backend, layout, step_dt=step_dt, seed=seed)
    if spec.name == "g1_motion_tracking":
        from unilab.tasks.g1_motion_tracking import G1MotionTrackingTask

        path = resolve_motion(spec.motion, spec_dir)
        motion = load_motion(path, num_joints=len(layout.qpos_adr), num_bodies=backend.dims.nbody - 1)
        return G1MotionTrackingTask(spec, backend, layout, step_dt=step_dt, motion=motion, seed=seed)
    raise ValueError(f"unknown task {spec.name!r}")  # unreachable: each task model's name is a Literal
