"""What the collector asks of a task (a typing.Protocol; nothing to inherit).

The G1 tasks offer it through `unilab.tasks.base.Task`; a task with its own model need not be a
`Task` (the cart-pole's is not): it offers these members and the collector runs it the same way.
`TaskDef.runtime` builds one (`unilab.tasks.taskdef.BuildTask`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from unilab.sim.contract import PhysicsBackend, PhysicsState
    from unilab.tasks.taskdef import TaskDef
    from unilab.tasks.terms import ObservationTerm, RewardTerm, TensorFn


class CollectorTask(Protocol):
    name: str
    definition: TaskDef
    backend: PhysicsBackend
    device: torch.device
    num_envs: int
    num_actions: int
    obs_dim: int
    step_dt: float
    max_episode_steps: int
    generator: torch.Generator
    observations: list[ObservationTerm]  # in the observation's order
    rewards: list[RewardTerm]
    reward_terms: torch.Tensor  # [N, rewards] this step's weighted terms
    state: PhysicsState  # the state the task last read

    @property
    def reward_names(self) -> list[str]: ...

    def apply_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions in [-1, 1] [N, num_actions] -> the backend's control [N, nu]."""
        ...

    def read_state(self, state: PhysicsState) -> None: ...

    def advance(self) -> None:
        """Per-step task state after the physics step (counters, contacts, clocks)."""
        ...

    def compute_terminations(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(terminated, truncated), [N] bool each."""
        ...

    def compute_rewards(self) -> torch.Tensor: ...

    def set_reward_weights(self, weights: Sequence[float]) -> None:
        """The reward terms' weights per second from the next step on, in `rewards` order
        (``task.reward_curriculum``; unilab.collect.curriculum)."""
        ...

    def step_events(self) -> None: ...

    def compute_observations(self) -> torch.Tensor: ...

    def reset_targets(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(qpos, qvel) the worlds in ``mask`` reset to; rows outside it are ignored."""
        ...

    def after_reset(self, mask: torch.Tensor, state: PhysicsState) -> None: ...

    def commanded_velocity(self, worlds: int) -> torch.Tensor | None:
        """The first ``worlds`` worlds' velocity command [worlds, 3] (None: a task without one)."""
        ...

    def reference_qpos(self, worlds: int) -> torch.Tensor | None:
        """The reference motion's pose of the first ``worlds`` worlds (None: a task without one)."""
        ...

    def diagnostic_terms(self) -> dict[str, TensorFn]:
        """Learning-health figures by name, [N] each (the G1 walk's swing share, ...)."""
        ...
