"""Pieces the replay learners (SAC, FlashSAC, TD3) share beyond `unilab.learn`: building the plan's
learner, and the deployable policy of a checkpoint (export and eval read it here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

# The observation's columns an actor reads: in a module of their own, which PPO's policy loader
# imports too (this one imports the registry, and so PPO's package).
from unilab.algos.columns import actor_columns as actor_columns
from unilab.algos.columns import policy_columns
from unilab.algos.registry import algo_def
from unilab.errors import UnilabError
from unilab.learn.normalizer import ObsNormalizer
from unilab.learn.precision import DTYPES
from unilab.learn.protocol import OffPolicyLearner

if TYPE_CHECKING:
    from unilab.plan.models import Plan
    from unilab.sections import ReplayAlgoSpec

# The learner's compute precision, as the plan decides it (`learner.precision.effective`).
Precision = Literal["float32", "bfloat16"]


def make_learner(
    algo: ReplayAlgoSpec,
    obs_dim: int,
    act_dim: int,
    device: torch.device,
    seed: int,
    precision: Precision = "float32",
    actor_cols: list[int] | None = None,
) -> OffPolicyLearner:
    """The plan's replay learner; `precision` is the plan's `learner.precision.effective`,
    `actor_cols` the observation's columns its actor reads (`actor_columns`). A learner class
    (a plugin's, say) that does not offer the runtime's protocol is refused before it trains."""
    d = algo_def(algo)
    learner = d.learner_class()(
        obs_dim, act_dim, algo, device, seed, compute_dtype=DTYPES[precision], actor_cols=actor_cols
    )
    if not isinstance(learner, OffPolicyLearner):
        members = {*OffPolicyLearner.__annotations__, *(n for n in vars(OffPolicyLearner) if not n.startswith("_"))}
        missing = sorted(m for m in members if not hasattr(learner, m))
        raise UnilabError(
            f"the {d.title} learner ({d.learner}) does not offer what the runtime asks of a replay learner "
            f"(unilab.learn.protocol.OffPolicyLearner): it lacks {', '.join(missing)}",
            fix="subclass unilab.learn.replay_learner.ReplayLearner (docs/extending.md, 'Add an algorithm')",
        )
    return learner


class DeployPolicy(nn.Module):
    """The actor's deterministic action in [-1, 1] (`learner.deterministic_actor()`), on
    observations normalized as in training (``clip``: the normalizer's clip; None for a run without
    normalization, whose actor saw raw observations)."""

    def __init__(self, actor: nn.Module, mean: torch.Tensor, inv_std: torch.Tensor, clip: float | None) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("obs_mean", mean.to(torch.float32).clone())
        self.register_buffer("obs_inv_std", inv_std.to(torch.float32).clone())
        self.clip = clip

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = (obs - self.obs_mean) * self.obs_inv_std
        if self.clip is not None:
            x = x.clamp(-self.clip, self.clip)
        return self.actor(x)


def replay_policy(plan: Any, state: dict[str, Any]) -> tuple[nn.Module, int]:
    """A replay learner's checkpoint state -> its deployable policy and the size of the observation
    it takes: the actor's columns alone where the task keeps privileged observations for the critic
    (`policy_columns` says which)."""

    obs_dim, act_dim = int(state["obs_dim"]), int(state["act_dim"])
    cols = policy_columns(plan, state)
    learner = make_learner(plan.algo, obs_dim, act_dim, torch.device("cpu"), 0, actor_cols=cols)
    # The actor alone: the rest of a GPU run's learner state (its CUDA generator states, for one)
    # does not load into a CPU learner, and the deployed policy needs none of it.
    learner.actor.load_state_dict(state["learner"]["actor"])
    learner.actor.eval()
    norm = ObsNormalizer(obs_dim)
    if plan.algo.normalize_observations:
        norm.load_state_dict(state["normalizer"])
        mean, inv_std, clip = norm.mean, 1.0 / norm.std, norm.clip
    else:
        mean, inv_std, clip = torch.zeros(obs_dim), torch.ones(obs_dim), None
    if cols is not None:
        mean, inv_std = mean[cols], inv_std[cols]
    policy = DeployPolicy(learner.deterministic_actor(), mean, inv_std, clip).eval()
    return policy, learner.actor_obs_dim


def planned_precision(plan: Plan) -> Precision:
    """The learner precision a plan decided (plans made before the decision: float32)."""
    return plan.learner.precision.effective if plan.learner is not None else "float32"


def replay_n_step(algo: Any) -> int:
    """The n-step return length of the replay an algorithm's learner samples."""
    return algo_def(algo).n_step(algo)
