"""Learner construction from the plan's `[algo]`."""

from __future__ import annotations

from typing import Any

import torch

from unilab.spec.models import FlashSacSpec, SacSpec


def make_offpolicy_learner(
    algo: SacSpec | FlashSacSpec,
    obs_dim: int,
    act_dim: int,
    device: torch.device,
    seed: int,
    precision: str = "float32",
) -> Any:
    """The plan's learner; `precision` is the plan's `learner.precision.effective`."""
    from unilab.learn.precision import DTYPES

    dtype = DTYPES[precision]
    if isinstance(algo, SacSpec):
        from unilab.learn.sac import SacLearner

        return SacLearner(obs_dim, act_dim, algo, device, seed, compute_dtype=dtype)
    from unilab.learn.flashsac import FlashSacLearner

    return FlashSacLearner(obs_dim, act_dim, algo, device, seed, compute_dtype=dtype)


def planned_precision(plan: Any) -> str:
    """The learner precision a plan decided (plans made before the decision: float32)."""
    return plan.learner.precision.effective if plan.learner is not None else "float32"


def replay_n_step(algo: SacSpec | FlashSacSpec) -> int:
    return algo.n_step if isinstance(algo, FlashSacSpec) else 1
