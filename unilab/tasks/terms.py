"""Named task terms: small functions over fixed-shape torch tensors, one kind per class.

A term reads the backend's PhysicsState (through the task's derived-state buffers) and the
task's own buffers, and returns a tensor of fixed shape, or updates buffers in place. Terms
never read values back to the host: anything that decides control flow stays on the device as
a mask. Every term carries the TermDecl that the planner's preflight sees
(`TaskDef.terms` of the task's package); a test checks the two inventories agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

from unilab.tasks.declarations import TermDecl

if TYPE_CHECKING:
    pass

# A term's function takes the task it belongs to: usually a method of a Task subclass, which a
# Callable[[Task], ...] would refuse (parameters are contravariant), hence Any.
TensorFn = Callable[[Any], torch.Tensor]
MaskFn = Callable[[Any, torch.Tensor], None]
StepFn = Callable[[Any], None]


@dataclass(eq=False)
class ObservationTerm:
    """A slice of the observation vector: ``fn(task) -> [N, dim]``, times ``scale``."""

    name: str
    dim: int
    fn: TensorFn
    scale: float = 1.0
    # Uniform noise half-width applied by the task's noise term (if the spec enables one).
    noise: float = 0.0
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "observation")


@dataclass(eq=False)
class ObservationNoiseTerm:
    """Adds uniform noise, per column half-width ``amplitude`` [obs_dim], to the observation in place."""

    name: str
    amplitude: torch.Tensor  # [obs_dim]
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "observation", noise=True)

    def apply(self, obs: torch.Tensor, scratch: torch.Tensor, generator: torch.Generator) -> None:
        # scratch: a persistent [N, obs_dim] buffer, so the draw allocates nothing.
        scratch.uniform_(-1.0, 1.0, generator=generator)
        obs.addcmul_(scratch, self.amplitude)


@dataclass(eq=False)
class RewardTerm:
    """``weight * fn(task) * step_dt`` is this term's share of the step reward; ``fn -> [N]``."""

    name: str
    weight: float
    fn: TensorFn
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "reward")


@dataclass(eq=False)
class TerminationTerm:
    """``fn(task) -> [N] bool``. ``time_out`` terms truncate (bootstrap), the others terminate."""

    name: str
    fn: TensorFn
    time_out: bool = False
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "termination")


@dataclass(eq=False)
class CommandTerm:
    """A goal the policy follows: ``resample(task, mask)`` at reset, ``update(task)`` every step."""

    name: str
    resample: MaskFn
    update: StepFn | None = None
    # Drawn again on an interval within the episode (in the update body, not only at reset): it
    # draws random numbers in a step, as an interval event does.
    interval: bool = False
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "command", interval_event=self.interval)


EventMode = Literal["reset", "interval"]


@dataclass(eq=False)
class EventTerm:
    """A state or model change. ``reset`` events run for the worlds being reset (reset-owned);
    ``interval`` events run on a step schedule, outside the reset path."""

    name: str
    mode: EventMode
    apply: MaskFn
    # interval events: period in env steps (the schedule is staggered per world by the task).
    period_steps: int = 0
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "event", interval_event=self.mode == "interval")


@dataclass(eq=False)
class CurriculumTerm:
    """Adjusts task parameters; ``reset_owned`` curricula only change state inside the reset path."""

    name: str
    update: MaskFn
    reset_owned: bool = True
    decl: TermDecl = field(init=False)

    def __post_init__(self) -> None:
        self.decl = TermDecl(self.name, "curriculum", non_reset_curriculum=not self.reset_owned)


Term = ObservationTerm | ObservationNoiseTerm | RewardTerm | TerminationTerm | CommandTerm | EventTerm | CurriculumTerm
