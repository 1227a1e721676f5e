"""Events both G1 tasks honour: base pushes on an interval, domain randomization at reset.

Pushes go through the backend contract (``reset`` of the pushed worlds with their own state and
a changed base velocity), so they work on every backend. The action delay is the task's own (it
holds the policy's recent actions). Friction, masses, joint dynamics and servo gains live in the
physics *model*, which the contract does not expose: they need the backend's optional
``set_world_params`` hook (see ``ModelParamsBackend``), enabled when the backend is built; a task
asked for domain randomization on a backend without it is refused when it is built, never
silently run without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from unilab.errors import UnilabError
from unilab.sections import DomainRandomization
from unilab.tasks.declarations import RANDOMIZATION_EVENTS
from unilab.tasks.terms import EventTerm
from unilab.tasks.timing import nearest_whole_step_seconds, seconds_text, whole_steps

if TYPE_CHECKING:
    from unilab.tasks.base import Task

# mjlab's G1 velocity task ranges.
PUSH_VELOCITY_XY = 0.5  # m/s, uniform in [-v, v] added to the base's x and y velocity


@runtime_checkable
class ModelParamsBackend(Protocol):
    """Optional backend hook: per-world model parameters, applied to the masked worlds.

    ``values``: named [N, ...] tensors (``unilab.sim.world_params.WORLD_PARAMS``: floor friction,
    added base mass, base centre-of-mass offset, link mass, joint armature, damping and friction
    scales, servo gain scales). Rows outside ``mask`` are ignored; the values persist until set again.
    """

    def set_world_params(self, mask: torch.Tensor, **values: torch.Tensor) -> None: ...


def require_model_params(task: Task) -> ModelParamsBackend:
    backend = task.backend
    if not isinstance(backend, ModelParamsBackend):
        raise UnilabError(
            "task.domain_randomization needs per-world model parameters, which this physics backend "
            f"({type(backend).__name__}) does not provide",
            detail="friction, masses, joint dynamics and servo gains are model parameters; the backend must "
            "implement set_world_params(mask, **values) (unilab.tasks.events.ModelParamsBackend)",
            fix="set task.domain_randomization = false, or use a backend that supports it",
        )
    if not getattr(backend, "world_params_enabled", True):
        raise UnilabError(
            f"task.domain_randomization: this {type(backend).__name__} was built without per-world model parameters",
            detail="the backend allocates per-world model parameters only when asked to at build time",
            fix="build the backend with world_params=True (unilab.collect.build does when the task asks for it)",
        )
    return backend


def push_event(task: Task, period_steps: int) -> EventTerm:
    n, dev = task.num_envs, task.device
    qpos = torch.zeros(n, task.backend.dims.nq, device=dev)
    qvel = torch.zeros(n, task.backend.dims.nv, device=dev)

    def apply(t: Task, mask: torch.Tensor) -> None:
        qpos.copy_(t.state.qpos)
        qvel.copy_(t.state.qvel)
        qvel[:, t._base_lin.start : t._base_lin.start + 2] += t.uniform(-PUSH_VELOCITY_XY, PUSH_VELOCITY_XY, n, 2)
        state = t.backend.reset(mask, qpos, qvel)
        t.read_state(state)

    return EventTerm("push_robot", "interval", apply, period_steps=period_steps)


def domain_randomization_events(task: Task, dr: DomainRandomization) -> list[EventTerm]:
    """One reset event per term `task.domain_randomization` switches on, in its declared order."""
    n = task.num_envs
    dims = task.backend.dims

    def model_event(key: str, **draws: Callable[[Task], torch.Tensor]) -> EventTerm:
        backend = require_model_params(task)

        def apply(t: Task, mask: torch.Tensor) -> None:
            backend.set_world_params(mask, **{param: draw(t) for param, draw in draws.items()})

        return EventTerm(RANDOMIZATION_EVENTS[key], "reset", apply)

    def scale(rng: tuple[float, float], size: int) -> Callable[[Task], torch.Tensor]:
        return lambda t: t.uniform(rng[0], rng[1], n, size)

    out: list[EventTerm] = []
    for key in dr.on():
        v = getattr(dr, key)
        if key == "floor_friction":
            out.append(model_event(key, floor_friction=lambda t, v=v: t.uniform(v[0], v[1], n)))
        elif key == "base_mass_kg":
            out.append(model_event(key, base_mass_offset=lambda t, v=v: t.uniform(v[0], v[1], n)))
        elif key == "base_com_m":
            half = torch.tensor(v, device=task.device)
            out.append(model_event(key, base_com_offset=lambda t, h=half: t.uniform(-1.0, 1.0, n, 3).mul_(h)))
        elif key == "link_mass_scale":
            out.append(model_event(key, link_mass_scale=scale(v, dims.nbody)))
        elif key == "joint_armature_scale":
            out.append(model_event(key, armature_scale=scale(v, dims.nv)))
        elif key == "joint_damping":
            out.append(model_event(key, damping_offset=scale(v, dims.nv)))
        elif key == "joint_friction_scale":
            out.append(model_event(key, frictionloss_scale=scale(v, dims.nv)))
        elif key == "pd_gain_scale":
            out.append(model_event(key, kp_scale=scale(v, dims.nu), kd_scale=scale(v, dims.nu)))
        elif key == "action_delay_steps":
            out.append(EventTerm(RANDOMIZATION_EVENTS[key], "reset", action_delay_event(v)))
        else:
            raise UnilabError(f"internal: task.domain_randomization.{key} has no event")
    return out


def action_delay_event(steps: tuple[int, int]) -> Callable[[Task, torch.Tensor], None]:
    """Each reset world's action delay, a whole number of control steps in [lo, hi]."""
    lo, hi = steps

    def apply(t: Task, mask: torch.Tensor) -> None:
        draw = t.uniform(float(lo), float(hi + 1), t.num_envs).floor_().clamp_(max=hi).to(torch.long)
        t.set_action_delay(mask, draw)

    return apply


def shared_events(task: Task) -> list[EventTerm]:
    """Events from the spec's optional switches, in `TaskDef.terms` order."""
    out: list[EventTerm] = []
    dr = task.spec.randomization
    if dr is not None:
        out += domain_randomization_events(task, dr)
    if task.spec.push_interval_s is not None:
        out.append(push_event(task, push_period_steps(task.spec.push_interval_s, task.step_dt)))
    return out


def push_period_steps(push_interval_s: float, step_dt: float) -> int:
    """The push interval in control steps, exactly: the plan's rule `task.push-interval` refuses an
    interval that is not a whole number of steps, and this guard refuses it for a task built without
    a plan, rather than rounding it to another interval."""
    steps = whole_steps(push_interval_s, step_dt)
    if steps is None:
        near = " or ".join(nearest_whole_step_seconds(push_interval_s, step_dt))
        raise UnilabError(
            f"task.push_interval_s = {push_interval_s} is not a whole number of "
            f"{seconds_text(step_dt)} s control steps",
            fix=f"set task.push_interval_s = {near}",
        )
    return steps
