"""`unilab export RUN_DIR --format onnx`: the deterministic actor (tanh of the Gaussian mean) with
the observation normalizer folded in, for deployment. Input `obs` [batch, obs_dim] raw
observations as the task produces them; output `action` [batch, act_dim] in [-1, 1]."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from unilab.errors import UnilabError


class DeployPolicy(nn.Module):
    def __init__(self, actor: nn.Module, mean: torch.Tensor, inv_std: torch.Tensor, clip: float, flash: bool) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("obs_mean", mean.to(torch.float32).clone())
        self.register_buffer("obs_inv_std", inv_std.to(torch.float32).clone())
        self.clip = clip
        self.flash = flash

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = ((obs - self.obs_mean) * self.obs_inv_std).clamp(-self.clip, self.clip)
        mean = self.actor(x, False)[0] if self.flash else self.actor(x)[0]
        return torch.tanh(mean)


def load_policy(run_dir: Path) -> tuple[DeployPolicy, int]:
    """The deployable policy of the newest checkpoint in `run_dir`, and its observation size."""
    from unilab.learn.normalizer import ObsNormalizer
    from unilab.plan.render import load_plan
    from unilab.run.checkpoint import list_checkpoints, load_checkpoint
    from unilab.run.learners import make_offpolicy_learner

    plan_path = run_dir / "plan.toml"
    if not plan_path.is_file():
        raise UnilabError(f"{run_dir} is not a unilab run directory (no plan.toml)", fix="pass a run directory")
    plan = load_plan(plan_path)
    if plan.algo.name == "ppo":
        raise UnilabError("exporting PPO policies is not supported yet", fix="export a sac or flashsac run")
    ckpts = list_checkpoints(run_dir / "checkpoints")
    if not ckpts:
        raise UnilabError(f"{run_dir}/checkpoints holds no checkpoint", fix="export a run that wrote a checkpoint")
    state = load_checkpoint(ckpts[-1], plan_id=plan.plan_id)["state"]
    learner_state = state["learner"]
    obs_dim = int(state["obs_dim"])
    act_dim = int(state["act_dim"])
    learner = make_offpolicy_learner(plan.algo, obs_dim, act_dim, plan.task.num_envs, torch.device("cpu"), 0)
    learner.load_state_dict(learner_state)
    norm = ObsNormalizer(obs_dim)
    if plan.algo.normalize_observations:
        norm.load_state_dict(state["normalizer"])
        mean, inv_std = norm.mean, 1.0 / norm.std
    else:
        mean, inv_std = torch.zeros(obs_dim), torch.ones(obs_dim)
    actor = learner.actor.eval()
    return DeployPolicy(actor, mean, inv_std, norm.clip, flash=plan.algo.name == "flashsac").eval(), obs_dim


def export_onnx(run_dir: Path, out: Path | None) -> Path:
    policy, obs_dim = load_policy(run_dir)
    out = out or run_dir / "policy.onnx"
    example = torch.zeros(1, obs_dim)
    try:
        torch.onnx.export(
            policy,
            (example,),
            str(out),
            input_names=["obs"],
            output_names=["action"],
            dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}},
            dynamo=False,
        )
    except Exception as exc:
        raise UnilabError(
            f"ONNX export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
            fix="report this with the run's plan.toml",
        ) from None
    return out
