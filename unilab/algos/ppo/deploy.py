"""PPO's deployable policy: rsl-rl's deterministic actor, its observation normalizer inside."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class PpoDeployPolicy(nn.Module):
    """rsl-rl's deterministic actor (its normalizer inside), clipped as the runtime clips PPO's actions."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs).clamp(-1.0, 1.0)


def ppo_policy(plan: Any, state: dict[str, Any]) -> tuple[nn.Module, int]:
    """A PPO checkpoint's state -> its deployable policy and the size of the observation it takes:
    the actor's columns alone (its "policy" group) where the task kept privileged observations for
    the critic (`unilab.algos.columns.policy_columns` says which)."""
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    from unilab.algos.columns import policy_columns
    from unilab.algos.ppo.runner import POLICY_GROUP, obs_groups, train_cfg

    obs_dim, act_dim = int(state["obs_dim"]), int(state["act_dim"])
    cols = policy_columns(plan, state)
    actor_dim = len(cols) if cols is not None else obs_dim
    cfg = dict(train_cfg(plan.algo)["actor"])  # type: ignore[arg-type]
    cfg.pop("class_name")  # the run's class adds rank syncing to MLPModel, not parameters
    obs = TensorDict({POLICY_GROUP: torch.zeros(1, actor_dim)}, batch_size=[1])
    actor = MLPModel(obs, obs_groups(), "actor", act_dim, **cfg)
    actor.load_state_dict(state["ppo"]["actor_state_dict"])
    return PpoDeployPolicy(actor.as_onnx(verbose=False).eval()).eval(), actor_dim
