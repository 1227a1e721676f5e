"""The runtime term inventory of each task equals what the planner's preflight reads (TaskDef.terms)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conftest import posed
from unilab.errors import UnilabError
from unilab.robot.model import RobotLayout, build_model_xml, model_from_xml
from unilab.sections import DomainRandomization
from unilab.sim.mujoco_cpu import MujocoCpuBackend
from unilab.spec.models import task_spec
from unilab.tasks.declarations import TermDecl
from unilab.tasks.registry import build_task, task_def


def _declared(spec: Any) -> list[TermDecl]:
    """What the planner reads: the task's record's inventory."""
    return task_def(spec).terms(spec)


N = 4


@pytest.fixture(scope="module")
def robot() -> tuple[str, RobotLayout]:
    xml = build_model_xml(None, 0.005)
    return xml, RobotLayout.from_model(model_from_xml(xml))


class ParamsBackend(MujocoCpuBackend):
    """The CPU backend with per-world parameters, its ``set_world_params`` recording the calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, world_params=True, **kwargs)
        self.calls: list[tuple[torch.Tensor, dict[str, torch.Tensor]]] = []

    def set_world_params(self, mask: torch.Tensor, **params: torch.Tensor) -> None:
        self.calls.append((mask.clone(), {k: v.clone() for k, v in params.items()}))


SPECS = [
    {"name": "g1_walk"},
    {"name": "g1_walk", "observation_noise": True, "push_interval_s": 2.0},
    {"name": "g1_walk", "domain_randomization": True, "observation_noise": True, "push_interval_s": 1.0},
    {"name": "g1_walk", "gait_period_s": 0.8, "observation_noise": True},
    {"name": "g1_motion_tracking", "motion": "builtin:g1_squat"},
    {"name": "g1_motion_tracking", "motion": "builtin:g1_squat", "observation_noise": True, "push_interval_s": 3.0},
    {"name": "g1_motion_tracking", "motion": "builtin:g1_squat", "domain_randomization": True},
]


@pytest.mark.parametrize("fields", SPECS, ids=lambda f: "-".join(f"{k}" for k in f if k not in ("motion",)))
def test_runtime_inventory_equals_declared(robot: tuple[str, RobotLayout], fields: dict[str, Any]) -> None:
    xml, layout = robot
    spec = task_spec(num_envs=N, **fields)
    with ParamsBackend(xml, N, 4) as backend:
        task = build_task(spec, backend, posed(xml, layout, spec), step_dt=0.02)
        runtime = task.term_decls()
    declared = _declared(spec)
    assert [(d.name, d.kind) for d in runtime] == [(d.name, d.kind) for d in declared]
    assert runtime == declared  # every graph-safety flag too
    assert len({d.name for d in declared if d.kind == "reward"}) == sum(d.kind == "reward" for d in declared)


def test_flags_follow_the_spec() -> None:
    once = {"commands": {"resample_s": 0.0}}  # one command per episode
    plain = _declared(task_spec(name="g1_walk", num_envs=1, **once))
    assert all(d.graph_safe for d in plain)
    noisy = _declared(task_spec(name="g1_walk", num_envs=1, observation_noise=True, push_interval_s=5.0, **once))
    blockers = {d.name: d.graph_blockers() for d in noisy if not d.graph_safe}
    assert blockers == {
        "observation_noise": ["adds observation noise or corruption"],
        "push_robot": ["is an interval event"],
    }
    # The default draws a new command every 10 s inside the update body: an interval draw.
    resampled = _declared(task_spec(name="g1_walk", num_envs=1))
    assert {d.name: d.graph_blockers() for d in resampled if not d.graph_safe} == {
        "velocity_command": ["is an interval event"]
    }
    dr = _declared(
        task_spec(name="g1_motion_tracking", num_envs=1, motion="builtin:g1_squat", domain_randomization=True)
    )
    names = [d.name for d in dr]
    assert "randomize_friction" in names and "randomize_base_mass" in names
    assert all(d.graph_safe for d in dr)  # reset-owned: drawn inside the reset path


def test_domain_randomization_refused_without_backend_hook(robot: tuple[str, RobotLayout]) -> None:
    xml, layout = robot
    spec = task_spec(name="g1_walk", num_envs=N, domain_randomization=True)
    with MujocoCpuBackend(xml, N, 4) as backend, pytest.raises(UnilabError, match="domain_randomization") as exc:
        build_task(spec, backend, posed(xml, layout, spec), step_dt=0.02)
    assert "without per-world model parameters" in exc.value.summary and "world_params=True" in exc.value.fix


def test_domain_randomization_draws_for_reset_worlds(robot: tuple[str, RobotLayout]) -> None:
    xml, layout = robot
    spec = task_spec(name="g1_walk", num_envs=N, domain_randomization=True)
    with ParamsBackend(xml, N, 4) as backend:
        task = build_task(spec, backend, posed(xml, layout, spec), step_dt=0.02)
        mask = torch.tensor([True, False, True, False])
        task.reset_targets(mask)
        dims = backend.dims
    assert all(torch.equal(m, mask) for m, _ in backend.calls)
    drawn = {k: v for _, p in backend.calls for k, v in p.items()}
    dr = DomainRandomization()
    # Each parameter has its shape and lies in the documented range (docs/tasks.md).
    expect = {
        "floor_friction": ((N,), dr.floor_friction),
        "base_mass_offset": ((N,), dr.base_mass_kg),
        "base_com_offset": ((N, 3), (-max(dr.base_com_m), max(dr.base_com_m))),
        "link_mass_scale": ((N, dims.nbody), dr.link_mass_scale),
        "armature_scale": ((N, dims.nv), dr.joint_armature_scale),
        "damping_offset": ((N, dims.nv), dr.joint_damping),
        "frictionloss_scale": ((N, dims.nv), dr.joint_friction_scale),
        "kp_scale": ((N, dims.nu), dr.pd_gain_scale),
        "kd_scale": ((N, dims.nu), dr.pd_gain_scale),
    }
    assert set(drawn) == set(expect)
    for name, (shape, (lo, hi)) in expect.items():
        v = drawn[name]
        assert v.shape == shape and bool(((v >= lo) & (v <= hi)).all()), name
    # Stiffness and damping gains are drawn apart, per joint.
    assert not torch.equal(drawn["kp_scale"], drawn["kd_scale"])


def test_a_switched_off_term_is_not_drawn(robot: tuple[str, RobotLayout]) -> None:
    xml, layout = robot
    off = {"joint_armature_scale": False, "pd_gain_scale": False, "action_delay_steps": False}
    spec = task_spec(name="g1_walk", num_envs=N, domain_randomization=off)
    with ParamsBackend(xml, N, 4) as backend:
        task = build_task(spec, backend, posed(xml, layout, spec), step_dt=0.02)
        task.reset_targets(torch.ones(N, dtype=torch.bool))
    drawn = {k for _, p in backend.calls for k in p}
    assert not drawn & {"armature_scale", "kp_scale", "kd_scale"} and "floor_friction" in drawn
    names = [e.name for e in task.events]
    assert "randomize_action_delay" not in names and "randomize_pd_gains" not in names
