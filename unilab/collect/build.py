"""Assemble a collector from a spec: composed G1 model -> physics backend -> task -> Collector."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.collect.collector import Collector
from unilab.robot.model import RobotLayout, build_model_xml, model_from_xml
from unilab.sim.backends import backend_def
from unilab.sim.factory import make_backend
from unilab.tasks.declarations import needs_world_params
from unilab.tasks.registry import build_task, robot_spec, task_def

if TYPE_CHECKING:
    from unilab.sim.contract import PhysicsBackend
    from unilab.spec.models import SimSpec, TaskSpec


def reads_acceleration_sensors(task: TaskSpec) -> bool:
    """Whether some term reads an acceleration-stage sensor (accelerometer, touch, force, ...) of
    the state a step returns (`TaskDef.acc_sensors`). Only then does the physics backend run the
    extra constraint solve that makes those readings current (``unilab.sim.mjmodel``; about 10% of a
    G1 env step). No built-in term reads ``sensordata``: base velocities come from ``qvel``/``cvel``;
    tests/test_collector.py checks that every task's outputs are the same with and without the solve."""
    return task_def(task).acc_sensors


@dataclass(frozen=True)
class RobotModel:
    xml: str
    layout: RobotLayout | None  # None for the cart-pole check task (not a G1)


def compose_robot(task: TaskSpec, sim: SimSpec, spec_dir: Path = Path(".")) -> RobotModel:
    robot = robot_spec(task)
    if robot is None:  # a task with its own model (the cart-pole)
        return RobotModel(xml=task_def(task).model_xml(sim.timestep), layout=None)
    mjcf = None
    if robot.robot_mjcf is not None:
        mjcf = Path(robot.robot_mjcf).expanduser()
        if not mjcf.is_absolute():
            mjcf = Path(spec_dir) / mjcf
    xml = build_model_xml(mjcf, sim.timestep)
    model = model_from_xml(xml, mjcf)
    return RobotModel(xml=xml, layout=RobotLayout.from_model(model, robot.default_pose))


def make_physics(
    sim: SimSpec,
    model_xml: str,
    num_envs: int,
    *,
    workers: int | None = None,
    cpu_ids: list[int] | None = None,
    device: str = "cpu",
    physics_graph: bool = False,
    world_params: bool = False,
    acc_sensors: bool = True,
) -> PhysicsBackend:
    """The backend ``sim.backend`` names. CPU workers: ``workers``, else ``sim.workers`` (``auto``:
    one per CPU in ``cpu_ids``, or in this process's affinity set), never more than ``num_envs``."""
    if backend_def(sim).cpu_workers:
        if workers is None:
            if sim.workers != "auto":
                workers = sim.workers
            else:
                workers = len(cpu_ids) if cpu_ids is not None else len(os.sched_getaffinity(0))
        workers = max(1, min(workers, num_envs))
        if cpu_ids is not None:
            cpu_ids = cpu_ids[:workers]
    else:
        workers = 1
    return make_backend(
        sim.backend,
        model_xml,
        num_envs,
        sim.decimation,
        device=device,
        cpu_ids=cpu_ids,
        workers=workers,
        physics_graph=physics_graph,
        world_params=world_params,
        njmax=sim.njmax,
        nconmax=sim.nconmax,
        acc_sensors=acc_sensors,
    )


def build_collector(
    task: TaskSpec,
    sim: SimSpec,
    *,
    spec_dir: Path = Path("."),
    num_envs: int | None = None,
    workers: int | None = None,
    cpu_ids: list[int] | None = None,
    device: str = "cpu",
    physics_graph: bool = False,
    seed: int = 0,
    finite_check_interval: int = 100,
    timing: bool = True,
    update_graph: str | None = None,
) -> Collector:
    """A ready collector (call ``reset_all`` before the first ``step``); ``close()`` it when done."""
    robot = compose_robot(task, sim, spec_dir)
    n = num_envs if num_envs is not None else task.num_envs
    backend = make_physics(
        sim,
        robot.xml,
        n,
        workers=workers,
        cpu_ids=cpu_ids,
        device=device,
        physics_graph=physics_graph,
        world_params=needs_world_params(task),
        acc_sensors=reads_acceleration_sensors(task),
    )
    try:
        runtime_task = build_task(
            task, backend, robot.layout, step_dt=sim.timestep * sim.decimation, seed=seed, spec_dir=spec_dir
        )
        return Collector(
            backend, runtime_task, finite_check_interval=finite_check_interval, timing=timing, update_graph=update_graph
        )
    except BaseException:
        backend.close()
        raise
