"""TD3 (Fujimoto et al. 2018) with FastTD3's options (arXiv:2505.22642): `learner.py`."""

from __future__ import annotations

from typing import Any

from unilab.algos.algodef import AlgoDef
from unilab.spec.models import Td3Spec


def _network_keys(algo: Any) -> tuple[str, ...]:
    dist = ("num_atoms", "v_min", "v_max") if algo.critic == "c51" else ()
    return (
        "actor_hidden_dims", "critic_hidden_dims", "activation", "critic", "layer_norm", *dist,
        "normalize_observations",
    )  # fmt: skip


TD3 = AlgoDef(
    name="td3",
    title="TD3",
    spec=Td3Spec,
    loop="offpolicy",
    learner="unilab.algos.td3.learner:Td3Learner",
    network_keys=_network_keys,
    n_step=lambda algo: algo.n_step,
)
