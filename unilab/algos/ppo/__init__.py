"""PPO through rsl-rl-lib's on-policy runner (`runner.py`); its deployable policy (`deploy.py`)."""

from __future__ import annotations

from unilab.algos.algodef import AlgoDef
from unilab.spec.models import PpoSpec

PPO = AlgoDef(
    name="ppo",
    title="PPO",
    spec=PpoSpec,
    loop="onpolicy",
    learner="unilab.algos.ppo.runner:UnilabOnPolicyRunner",
    network_keys=lambda algo: ("hidden_dims", "normalize_observations"),
    carried_key="init_noise_std",
    carried_what="action noise",
    external_runner="rsl-rl-lib",
    syncs_per_unit=lambda algo: algo.num_steps_per_env,
    state_key="ppo",
    actor_key="actor_state_dict",
    policy="unilab.algos.ppo.deploy:ppo_policy",
)
