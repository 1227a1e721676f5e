"""Events both G1 tasks honour: base pushes on an interval, floor friction and base mass at reset.

Pushes go through the backend contract (``reset`` of the pushed worlds with their own state and
a changed base velocity), so they work on every backend. Friction and mass live in the physics
*model*, which the contract does not expose: they need the backend's optional
``set_world_params`` hook (see ``ModelParamsBackend``), enabled when the backend is built; a task
asked for domain randomization on a backend without it is refused when it is built, never
silently run without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from unilab.errors import UnilabError
from unilab.tasks.terms import EventTerm
from unilab.tasks.timing import nearest_whole_step_seconds, seconds_text, whole_steps

if TYPE_CHECKING:
    from unilab.tasks.base import Task

# mjlab's G1 velocity task ranges.
PUSH_VELOCITY_XY = 0.5  # m/s, uniform in [-v, v] added to the base's x and y velocity
FRICTION_RANGE = (0.3, 1.2)  # floor sliding friction (the floor has contact priority)
BASE_MASS_RANGE = (-1.0, 3.0)  # kg added to the pelvis


@runtime_checkable
class ModelParamsBackend(Protocol):
    """Optional backend hook: per-world model parameters, applied to the masked worlds.

    ``floor_friction`` [N]: sliding friction of the floor geom; ``base_mass_offset`` [N]: kg
    added to the base body's nominal mass (inertia scaled with it). Rows outside ``mask`` are
    ignored; the values persist until set again.
    """

    def set_world_params(
        self,
        mask: torch.Tensor,
        *,
        floor_friction: torch.Tensor | None = None,
        base_mass_offset: torch.Tensor | None = None,
    ) -> None: ...


def require_model_params(task: Task) -> ModelParamsBackend:
    backend = task.backend
    if not isinstance(backend, ModelParamsBackend):
        raise UnilabError(
            "task.domain_randomization needs per-world model parameters, which this physics backend "
            f"({type(backend).__name__}) does not provide",
            detail="floor friction and added base mass are model parameters; the backend must implement "
            "set_world_params(mask, floor_friction=..., base_mass_offset=...) (unilab.tasks.events.ModelParamsBackend)",
            fix="set task.domain_randomization = false, or use a backend that supports it",
        )
    if not getattr(backend, "world_params_enabled", True):
        raise UnilabError(
            f"task.domain_randomization: this {type(backend).__name__} was built without per-world model parameters",
            detail="the backend allocates per-world friction and mass only when asked to at build time",
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


def domain_randomization_events(task: Task) -> list[EventTerm]:
    backend = require_model_params(task)
    n = task.num_envs

    def friction(t: Task, mask: torch.Tensor) -> None:
        backend.set_world_params(mask, floor_friction=t.uniform(*FRICTION_RANGE, n))

    def base_mass(t: Task, mask: torch.Tensor) -> None:
        backend.set_world_params(mask, base_mass_offset=t.uniform(*BASE_MASS_RANGE, n))

    return [EventTerm("randomize_friction", "reset", friction), EventTerm("randomize_base_mass", "reset", base_mass)]


def shared_events(task: Task) -> list[EventTerm]:
    """Events from the spec's optional switches, in `TaskDef.terms` order."""
    out: list[EventTerm] = []
    if task.spec.domain_randomization:
        out += domain_randomization_events(task)
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
