"""Learner construction from the plan's `[algo]`."""

from __future__ import annotations

from typing import Any

import torch

from unilab.spec.models import FlashSacSpec, SacSpec


def make_offpolicy_learner(
    algo: SacSpec | FlashSacSpec, obs_dim: int, act_dim: int, device: torch.device, seed: int
) -> Any:
    if isinstance(algo, SacSpec):
        from unilab.learn.sac import SacLearner

        return SacLearner(obs_dim, act_dim, algo, device, seed)
    from unilab.learn.flashsac import FlashSacLearner

    return FlashSacLearner(obs_dim, act_dim, algo, device, seed)


def replay_n_step(algo: SacSpec | FlashSacSpec) -> int:
    return algo.n_step if isinstance(algo, FlashSacSpec) else 1
