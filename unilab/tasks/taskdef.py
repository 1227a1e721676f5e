"""`TaskDef`: what the planner and the runtime may ask of a task, as data.

Torch-free (the planner imports it): each task is one package under `unilab/tasks/` whose
`__init__` holds its record and term declarations; its runtime builder is named by import path and
imported only where a run builds it. Rules, the plan's resolution, the collector, export and eval
ask these questions instead of comparing `task.name`s or task spec classes (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from unilab.sections import G1TaskSpec, TaskSpecBase
from unilab.tasks.declarations import TermDecl
from unilab.tasks.mirror import Mirror, TermMirror, compose

if TYPE_CHECKING:
    from unilab.robot.model import RobotLayout
    from unilab.sim.contract import PhysicsBackend
    from unilab.tasks.contract import CollectorTask


class BuildTask(Protocol):
    """A task package's runtime entry: its task over ``backend`` (``layout``: the composed robot's,
    None for a task with its own model), ``step_dt`` the env step, ``spec_dir`` the directory its
    relative input paths resolve against."""

    def __call__(
        self,
        spec: Any,
        backend: PhysicsBackend,
        layout: RobotLayout | None,
        *,
        step_dt: float,
        seed: int,
        spec_dir: Path,
    ) -> CollectorTask: ...


def _none(spec: Any) -> None:
    return None


@dataclass(frozen=True)
class TaskDef:
    name: str  # the spec's `task.name`
    title: str  # how messages name it
    spec: type[TaskSpecBase]  # its `[task]` model (its package's spec.py)
    runtime: str  # "module:function", a `BuildTask`, imported lazily by `builder`
    # Its reward terms and their default weights per second, in the order it builds them.
    reward_weights: Callable[[Any], dict[str, float]]
    # Its observation terms, in the order the observation concatenates them.
    observations: Callable[[Any], tuple[str, ...]]
    # Its exact term inventory (names, kinds, graph-safety flags, order), which the runtime builds.
    terms: Callable[[Any], list[TermDecl]]
    # Simulates the G1 unilab composes (`task.robot_mjcf`, the default pose, the joint PD loops);
    # False: the task brings its own MJCF (`own_model`).
    robot: bool = True
    own_model: str | None = None  # "module:function" (timestep) -> MJCF text, where not `robot`
    # The joints its actions drive, in order (None: every joint of the robot).
    action_joints: Callable[[Any], tuple[str, ...] | None] = _none
    # Its reference motion (`builtin:NAME` or a path the plan pins by digest), or None.
    motion: Callable[[Any], str | None] = _none
    # A term reads an acceleration-stage sensor (accelerometer, touch, force, ...), so the physics
    # backend must run the extra constraint solve that makes them current (unilab.sim.mjmodel).
    acc_sensors: bool = False
    # "module:function" (the plan's `[task]`) -> what an exported policy's metadata adds for this
    # task (strings; unilab.run.export), or None: nothing.
    deployment: str | None = None
    # Keys its plan's `[task]` takes beyond the spec's and what the plan resolves, as pydantic's
    # create_model takes them (name -> (type, Field)): e.g. keys older plans wrote, still read.
    plan_fields: Mapping[str, Any] = field(default_factory=dict)
    # Its left-right mirror (unilab.tasks.mirror): each observation term's and the actions', for a
    # spec; None: the task has none (`algo.mirror_augmentation` is refused).
    mirror_terms: Callable[[Any], tuple[Mapping[str, TermMirror], TermMirror]] | None = None

    def __post_init__(self) -> None:
        if self.robot and not issubclass(self.spec, G1TaskSpec):
            raise TypeError(f"task {self.name}: a task that simulates the G1 has a G1TaskSpec model")
        if not self.robot and self.own_model is None:
            raise TypeError(f"task {self.name}: a task that does not simulate the G1 names its own model")

    def weights(self, spec: Any) -> dict[str, float]:
        """The weight of every reward term: the task's defaults with ``task.reward_weights`` applied.
        The plan rule `task.reward-weights` refuses a name the task does not have before this runs."""
        weights = self.reward_weights(spec)
        overrides = spec.reward_weights or {}
        unknown = sorted(set(overrides) - set(weights))
        if unknown:
            raise ValueError(f"{self.name} has no reward term {unknown[0]!r}")
        return {name: float(overrides.get(name, w)) for name, w in weights.items()}

    def weights_at(self, spec: Any, env_steps: int) -> dict[str, float]:
        """The weight of every reward term after ``env_steps`` of the run (summed over ranks):
        `weights` with ``task.reward_curriculum`` applied, each change linear from its start to its end."""
        weights = self.weights(spec)
        for name, change in (spec.reward_curriculum or {}).items():
            if name not in weights:
                raise ValueError(f"{self.name} has no reward term {name!r}")
            before, start, end = weights[name], change.start_env_steps, change.end
            if env_steps >= end:
                weights[name] = float(change.weight)
            elif env_steps > start:
                weights[name] = before + (change.weight - before) * (env_steps - start) / (end - start)
        return weights

    def unmirrored_observations(self, spec: Any) -> list[str]:
        """The spec's observation terms without a mirror (all of them where the task has none)."""
        if self.mirror_terms is None:
            return list(self.observations(spec))
        terms, _ = self.mirror_terms(spec)
        return [n for n in self.observations(spec) if n not in terms]

    def mirror(self, spec: Any, obs_terms: list[tuple[str, int]]) -> Mirror:
        """The mirror over the observation as the collector lays it out (``obs_terms``: each
        term's name and width, in order)."""
        if self.mirror_terms is None:
            raise ValueError(f"{self.name} declares no left-right mirror")
        terms, actions = self.mirror_terms(spec)
        return compose(obs_terms, terms, actions)

    def builder(self) -> BuildTask:
        return _load(self.runtime)  # type: ignore[no-any-return]

    def deployment_metadata(self, task: Any) -> dict[str, str]:
        return {} if self.deployment is None else _load(self.deployment)(task)  # type: ignore[no-any-return]

    def model_xml(self, timestep: float) -> str:
        """The task's own MJCF at ``timestep`` (a task that does not simulate the G1)."""
        if self.own_model is None:
            raise ValueError(f"{self.name} simulates the robot; it has no model of its own")
        return _load(self.own_model)(timestep)  # type: ignore[no-any-return]


def _load(path: str) -> Any:
    import importlib

    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
