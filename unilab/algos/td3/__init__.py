"""TD3 (Fujimoto et al. 2018) with FastTD3's options (arXiv:2505.22642): `learner.py`."""

from __future__ import annotations

from unilab.algos.algodef import AlgoDef
from unilab.algos.sac import CRITIC_CHOICE, network_keys
from unilab.algos.td3.spec import Td3Spec

TD3 = AlgoDef(
    name="td3",
    title="TD3",
    spec=Td3Spec,
    loop="offpolicy",
    learner="unilab.algos.td3.learner:Td3Learner",
    network_keys=network_keys,  # SAC's networks, a deterministic actor
    n_step=lambda algo: algo.n_step,
    ignored_keys=(CRITIC_CHOICE,),
)
