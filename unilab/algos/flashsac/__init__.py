"""FlashSAC (arXiv:2604.04539): `learner.py`."""

from __future__ import annotations

from typing import Any

from unilab.algos.algodef import AlgoDef
from unilab.algos.flashsac.spec import FlashSacSpec


def _network_keys(algo: Any) -> tuple[str, ...]:
    # reward_scaling too: the critic's distribution was fitted to returns scaled (or not) so.
    return (
        "actor_hidden_dims", "critic_hidden_dims", "num_blocks", "expansion", "num_atoms", "v_min", "v_max",
        "reward_scaling", "normalize_observations",
    )  # fmt: skip


# What docs/spec.md says above its keys: where unilab's FlashSAC differs from the paper's code.
DOC_NOTE = (
    "FlashSAC (arXiv:2604.04539): the paper's networks, update order and defaults (batch 2048, 0.5 updates per "
    "env step, 3-step returns, 101-bin critic on [-5, 5], temperature 0.01, tau 0.01). Where it differs from the "
    "reference code (leeyngdo/FlashSAC): the actor is as wide as the critic by default "
    "(`actor_hidden_dims = [256]`; the reference's actor is 128 wide against a 256 critic); learning rates are "
    "constant (the reference decays them from 3e-4 to 1.5e-4 on a cosine); exploration draws fresh noise every "
    "step (the reference repeats it for a zeta-distributed number of steps); the update runs without "
    "torch.compile, in the plan's precision (the reference compiles it and runs bf16; on CUDA unilab's learner "
    "graph captures the whole update instead, docs/gpu.md)."
)

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
    doc_note=DOC_NOTE,
    zero_centred_support=True,  # rewards are scaled into [v_min, v_max] around 0 (the paper's [-5, 5])
)
