"""Soft actor-critic with FastSAC's large-batch options (`learner.py`)."""

from __future__ import annotations

from typing import Any

from unilab.algos.algodef import AlgoDef, IgnoredKeys
from unilab.algos.sac.spec import SacSpec


def network_keys(algo: Any) -> tuple[str, ...]:
    """An MLP actor and twin critic's shape (SAC's, TD3's): what a loaded checkpoint must match."""
    dist = ("num_atoms", "v_min", "v_max") if algo.critic == "c51" else ()
    return (
        "actor_hidden_dims", "critic_hidden_dims", "activation", "critic", "layer_norm", *dist,
        "normalize_observations",
    )  # fmt: skip


# A choice of critic (SAC's, TD3's) ignores the support of the distributional one when the scalar
# one is chosen (rule `algo.options`).
CRITIC_CHOICE = IgnoredKeys(
    ("num_atoms", "v_min", "v_max"),
    lambda a: a.critic != "c51",
    'the scalar critic (algo.critic = "mse") has no support',
    'set algo.critic = "c51"',
)

SAC = AlgoDef(
    name="sac",
    title="SAC",
    spec=SacSpec,
    loop="offpolicy",
    learner="unilab.algos.sac.learner:SacLearner",
    network_keys=network_keys,
    carried_key="alpha_init",
    carried_what="entropy temperature",
    n_step=lambda algo: algo.n_step,
    ignored_keys=(CRITIC_CHOICE,),
    doc_note="Soft actor-critic with FastSAC's large-batch options.",
)
