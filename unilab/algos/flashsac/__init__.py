"""FlashSAC (arXiv:2604.04539): `learner.py`."""

from __future__ import annotations

from typing import Any

from unilab.algos.algodef import AlgoDef
from unilab.spec.models import FlashSacSpec


def _network_keys(algo: Any) -> tuple[str, ...]:
    # reward_scaling too: the critic's distribution was fitted to returns scaled (or not) so.
    return (
        "actor_hidden_dims", "critic_hidden_dims", "num_blocks", "expansion", "num_atoms", "v_min", "v_max",
        "reward_scaling", "normalize_observations",
    )  # fmt: skip


FLASHSAC = AlgoDef(
    name="flashsac",
    title="FlashSAC",
    spec=FlashSacSpec,
    loop="offpolicy",
    learner="unilab.algos.flashsac.learner:FlashSacLearner",
    network_keys=_network_keys,
    carried_key="alpha_init",
    carried_what="entropy temperature",
    n_step=lambda algo: algo.n_step,
    zero_centred_support=True,  # rewards are scaled into [v_min, v_max] around 0 (the paper's [-5, 5])
)
