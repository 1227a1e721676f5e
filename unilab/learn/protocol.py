"""The interface the replay learners (SAC, FlashSAC, TD3) offer to the runtime (a typing.Protocol;
nothing to inherit)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import nn

    from unilab.learn.optim import GradSyncFn
    from unilab.learn.replay import Batch


@runtime_checkable
class OffPolicyLearner(Protocol):
    obs_dim: int
    act_dim: int
    num_critic_updates: int
    # The policy network and the observation columns it reads (all but privileged ones): what a
    # checkpoint's deployable policy is made of (unilab.algos.common.replay_policy).
    actor: nn.Module
    actor_obs_dim: int

    def act(self, obs_normalized: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions in [-1, 1], [N, act_dim], on the learner's device; no autograd."""
        ...

    def update(self, batch: Batch, sync: GradSyncFn | None = None) -> dict[str, torch.Tensor]:
        """One update cycle; 0-dim metric tensors, read them at log intervals (no host sync inside).

        `sync(name, ok)`, when given, runs between each optimizer's backward and its step: it may
        all-reduce that optimizer's gradients and returns the finite verdict every rank shares.
        """
        ...

    def q_estimate(self, obs_normalized: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[N] the critic's value of the actions, in reward units (the critic-bias figures)."""
        ...

    def exploration_metrics(self) -> dict[str, torch.Tensor]:
        """0-dim tensors of the learner's exploration now (TD3's noise std), read at a log."""
        ...

    def cycle_kind(self) -> str:
        """Which update cycle comes next ("critic+actor" or "critic"), read on the host."""
        ...

    def observe_rewards(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Every env step's raw rewards (FlashSAC's adaptive reward scale; SAC ignores them)."""
        ...

    def refresh_working_copies(self) -> None:
        """Called after the networks' float32 weights were written from outside the update."""
        ...

    def optim_groups(self) -> dict[str, list[torch.Tensor]]:
        """Parameters per optimizer (e.g. "critic", "actor", "alpha"), for a gradient all-reduce."""
        ...

    def deterministic_actor(self) -> nn.Module:
        """Normalized observations -> the deterministic action in [-1, 1] (export, eval)."""
        ...

    def replicated(self) -> list[nn.Module | torch.Tensor]:
        """What every data-parallel rank must hold alike: broadcast at start, digested at the end."""
        ...

    def running_stat_modules(self) -> list[nn.Module]:
        """Modules whose buffers each rank updates from its own batch (averaged under data parallel)."""
        ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: dict[str, object]) -> None: ...

    def load_weights(self, state: dict[str, object]) -> None:
        """The networks (and temperature) of a checkpoint's state, for a run that starts from it."""
        ...
