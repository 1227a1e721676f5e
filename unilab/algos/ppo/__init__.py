"""PPO through rsl-rl-lib's on-policy runner (`runner.py`); its deployable policy (`deploy.py`)."""

from __future__ import annotations

from typing import Any

from unilab.algos.algodef import AlgoDef, IgnoredKeys, KeyRule, Violation
from unilab.algos.ppo.spec import PpoSpec


def _minibatches(spec: Any) -> list[Violation]:
    algo, n = spec.algo, spec.task.num_envs
    samples = n * algo.num_steps_per_env  # one rank's rollout; rsl-rl splits it into the mini-batches
    if algo.num_mini_batches <= samples:
        return []
    return [
        (
            f"{algo.num_mini_batches} mini-batches of a rollout of {samples} samples ({n} envs x "
            f"{algo.num_steps_per_env} steps) would be empty, and PPO would train on NaN",
            f"set algo.num_mini_batches <= {samples} (e.g. --set algo.num_mini_batches=4), or raise "
            "task.num_envs or algo.num_steps_per_env",
            None,
        )
    ]


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
    asymmetric=True,  # rsl-rl's observation groups: "policy" for the actor, "critic" for the critic
    rules=(
        KeyRule(
            "algo.ppo-minibatches",
            "algo.num_mini_batches",
            "Every PPO mini-batch holds at least one sample: `num_mini_batches <= task.num_envs * num_steps_per_env`.",
            _minibatches,
        ),
    ),
    ignored_keys=(
        IgnoredKeys(
            ("desired_kl",),
            lambda a: a.schedule != "adaptive",
            'algo.schedule = "fixed" keeps the learning rate fixed, without a KL target',
            'set algo.schedule = "adaptive"',
        ),
    ),
    doc_note="PPO through rsl-rl-lib. Off-policy keys (e.g. `batch_size`) are refused by rule "
    "`algo.ppo-offpolicy-keys`. With `task.privileged_observations` PPO trains an asymmetric actor-critic "
    "as SAC, TD3 and FlashSAC do: rsl-rl-lib's actor reads the observation group `policy` (every "
    "observation column but the privileged terms'), its critic the group `critic` (the whole observation), "
    "each through its own observation normalizer (`normalize_observations`); the policy `unilab export` "
    "writes takes the actor's columns alone, and its `unilab.observation_layout` names only their terms.",
)
