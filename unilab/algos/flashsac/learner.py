"""FlashSAC (arXiv:2604.04539): SAC made stable at large batch and low update-to-data ratio.

Networks (actor E=1, critic E=2 members run as one batched ensemble):
    x -> BatchNorm -> UnitLinear(in -> h)                      embedder
      -> [x + ReLU(BN(W2 ReLU(BN(W1 x))))] * num_blocks         inverted-residual blocks, W1: h -> expansion*h
      -> RMSNorm -> head                                        actor: mean / log_std; critic: 101-bin logits
Every linear weight has no bias (heads excepted) and is projected back to the unit sphere (each
output unit's weight row has norm 1) after each optimizer step; BatchNorm (scale, shift) and RMSNorm
scale are projected to norm sqrt(width). Projection is masked like the step, so a skipped step
changes nothing.

Update, in the paper's order (its reference code, leeyngdo/FlashSAC, was read for details):
1. every `actor_update_every` calls: actor on cat(obs, next_obs) in training mode (one BatchNorm
   batch over both), loss mean(alpha * log_pi - min_i Q_i) on the obs half with the critic in eval
   mode (running statistics); then the temperature, loss alpha * (entropy - target_entropy);
2. critic ("cross-batch value prediction"): target critic and critic both run on
   cat((obs, action), (next_obs, next_action)) in training mode so BatchNorm statistics are shared;
   the target distribution is the next half of the target critic member with the lower mean, shifted
   to r + discount * (z - alpha * log_pi') and projected on the support; loss is the cross-entropy
   of the online critic's obs half; next actions come from the actor in eval mode;
3. Polyak update of the target critic with `tau` after every critic step.
Rewards are multiplied by an adaptive scale (`unilab.learn.reward_scale`), fed by `observe_rewards`.
n-step returns come from the replay buffer (`ReplayBuffer(n_step=cfg.n_step)`); `batch.discount`
already holds gamma**k (0 on termination).

Choices where the spec has no field or the paper leaves room (each is a default here):
- actor width `actor_hidden_dims[0]` = critic width `critic_hidden_dims[0]` = 256 by default; the
  reference uses 128 for the actor (`hidden_dims` sets both).
- BatchNorm momentum 0.01, eps 1e-5; RMSNorm eps 1e-6; log_std squashed into [-10, 2] (reference).
- weights orthogonally initialized (gain 1), then projected; head biases start at zero.
- learning rates constant (actor_lr, critic_lr, alpha_lr); the reference decays 3e-4 -> 1.5e-4 by
  cosine, which the spec cannot express yet.
- alpha starts at cfg.alpha_init and the target critic follows at cfg.tau: 0.01 each by default,
  as in the reference.
- entropy target: the differential entropy of a Gaussian with std `target_action_std` per action
  dim, 0.5 * A * log(2 pi e sigma^2) (actions span [-1, 1], so no range term).
- critic support is [cfg.v_min, cfg.v_max] (+-5 by default, the reference's) and the reward scale
  keeps returns within g_max = min(-v_min, v_max).
- the critic loss is the mean of both members' cross-entropies (reference), not their sum.
- exploration noise repetition (the reference holds action noise for a zeta-distributed number of
  steps) belongs to the collector and is not implemented: `act` draws fresh noise each call.
- BatchNorm running statistics advance in every forward pass, including on a step later skipped
  for a non-finite loss (they cannot be masked without a second pass).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from unilab.algos.flashsac.spec import FlashSacSpec
from unilab.errors import UnilabError
from unilab.learn import categorical, squashed_gaussian
from unilab.learn.optim import GradSyncFn, MaskedAdam, agree, set_grads
from unilab.learn.replay import Batch
from unilab.learn.replay_learner import ReplayLearner, seeded
from unilab.learn.reward_scale import RewardScaler

LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0
BN_MOMENTUM, BN_EPS, RMS_EPS = 0.01, 1e-5, 1e-6


class UnitLinear(nn.Module):
    """Bias-free ensemble linear layer, weight [E, out, in]; rows are projected to unit norm."""

    def __init__(self, members: int, d_in: int, d_out: int) -> None:
        super().__init__()
        w = torch.empty(members, d_out, d_in)
        for e in range(members):
            nn.init.orthogonal_(w[e], gain=1.0)
        self.weight = nn.Parameter(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.weight.transpose(-2, -1))  # not .mT: the ONNX exporter has no aten::mT

    @torch.no_grad()
    def project(self, ok: torch.Tensor) -> None:
        self.weight.copy_(torch.where(ok, F.normalize(self.weight, dim=-1, eps=1e-8), self.weight))


class BatchNorm(nn.Module):
    """BatchNorm over the batch axis of [E, B, D], per member and feature; statistics in float32."""

    def __init__(self, members: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, dim))
        self.bias = nn.Parameter(torch.zeros(members, dim))
        self.register_buffer("running_mean", torch.zeros(members, dim))
        self.register_buffer("running_var", torch.ones(members, dim))

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        """`train`: normalize with this batch's statistics and advance the running ones."""
        e, n, d = x.shape
        # [E, B, D] -> [B, E*D]: one native batch_norm call, members side by side as channels
        # (about twice as fast on CPU as reducing over the middle axis).
        flat = x.float().transpose(0, 1).reshape(n, e * d)
        y = F.batch_norm(
            flat,
            self.running_mean.view(-1),
            self.running_var.view(-1),
            self.weight.view(-1).float(),
            self.bias.view(-1).float(),
            training=train,
            momentum=BN_MOMENTUM,
            eps=BN_EPS,
        )
        return y.view(n, e, d).transpose(0, 1).to(x.dtype)

    @torch.no_grad()
    def project(self, ok: torch.Tensor) -> None:
        d = self.weight.shape[-1]
        sq = (self.weight.square() + self.bias.square()).sum(-1, keepdim=True)
        f = torch.where(ok, math.sqrt(d) * torch.rsqrt(sq + 1e-8), 1.0)
        self.weight.mul_(f)
        self.bias.mul_(f)


class RMSNorm(nn.Module):
    def __init__(self, members: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = x.float()
        return (f * torch.rsqrt(f.square().mean(-1, keepdim=True) + RMS_EPS) * self.weight.unsqueeze(1)).to(x.dtype)

    @torch.no_grad()
    def project(self, ok: torch.Tensor) -> None:
        d = self.weight.shape[-1]
        f = torch.where(ok, math.sqrt(d) * torch.rsqrt(self.weight.square().sum(-1, keepdim=True) + 1e-8), 1.0)
        self.weight.mul_(f)


class Block(nn.Module):
    """Inverted residual: h -> expansion*h -> h, BatchNorm before each ReLU."""

    def __init__(self, members: int, h: int, expansion: int) -> None:
        super().__init__()
        self.w1 = UnitLinear(members, h, h * expansion)
        self.bn1 = BatchNorm(members, h * expansion)
        self.w2 = UnitLinear(members, h * expansion, h)
        self.bn2 = BatchNorm(members, h)

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        y = F.relu(self.bn1(self.w1(x), train))
        return x + F.relu(self.bn2(self.w2(y), train))


class Trunk(nn.Module):
    """[E, B, in] -> [E, B, h]: embedder, blocks, RMSNorm."""

    def __init__(self, members: int, d_in: int, h: int, num_blocks: int, expansion: int) -> None:
        super().__init__()
        self.bn_in = BatchNorm(members, d_in)
        self.embed = UnitLinear(members, d_in, h)
        self.blocks = nn.ModuleList([Block(members, h, expansion) for _ in range(num_blocks)])
        self.norm = RMSNorm(members, h)

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        x = self.embed(self.bn_in(x, train))
        for block in self.blocks:
            x = block(x, train)
        return self.norm(x)


class FlashActor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, h: int, num_blocks: int, expansion: int) -> None:
        super().__init__()
        self.trunk = Trunk(1, obs_dim, h, num_blocks, expansion)
        self.head = UnitLinear(1, h, 2 * act_dim)
        self.head_bias = nn.Parameter(torch.zeros(2 * act_dim))

    def forward(self, obs: torch.Tensor, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        out = (self.head(self.trunk(obs.unsqueeze(0), train)) + self.head_bias).squeeze(0).float()
        mean, raw = out.chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        return mean, log_std


class FlashCritic(nn.Module):
    """Two distributional Q networks: logits [2, B, num_atoms]."""

    def __init__(self, obs_dim: int, act_dim: int, h: int, num_blocks: int, expansion: int, num_atoms: int) -> None:
        super().__init__()
        self.trunk = Trunk(2, obs_dim + act_dim, h, num_blocks, expansion)
        self.head = UnitLinear(2, h, num_atoms)
        self.head_bias = nn.Parameter(torch.zeros(2, 1, num_atoms))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, train: bool) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1).unsqueeze(0).expand(2, -1, -1)
        return (self.head(self.trunk(x, train)) + self.head_bias).float()


def _project_all(module: nn.Module, ok: torch.Tensor) -> None:
    for m in module.modules():
        if isinstance(m, UnitLinear | BatchNorm | RMSNorm):
            m.project(ok)


class FlashSacLearner(ReplayLearner):
    """FlashSAC learner; same API as `SacLearner` (see `unilab.algos.sac.learner` for the update structure)."""

    algo = "flashsac"
    title = "FlashSAC"

    cfg: FlashSacSpec

    def _build(self, seed: int) -> None:
        """The networks projected onto their weight spheres from the start; BatchNorm statistics are
        the float32 networks' own (the working copies hold the weights only, unilab.learn.precision)."""
        cfg, obs_dim, act_dim = self.cfg, self.obs_dim, self.act_dim
        if not cfg.v_min < 0 < cfg.v_max:
            raise UnilabError(
                f"FlashSAC's critic support [{cfg.v_min}, {cfg.v_max}] must contain 0 (rewards are scaled to it)",
                fix="set algo.v_min = -5.0 and algo.v_max = 5.0 (the paper's support)",
            )
        self.target_entropy = squashed_gaussian.gaussian_entropy_target(act_dim, cfg.target_action_std)
        ha, hc = cfg.actor_hidden_dims[0], cfg.critic_hidden_dims[0]
        actor, critic = seeded(
            seed,
            lambda: FlashActor(self.actor_obs_dim, act_dim, ha, cfg.num_blocks, cfg.expansion),
            lambda: FlashCritic(obs_dim, act_dim, hc, cfg.num_blocks, cfg.expansion, cfg.num_atoms),
        )
        self.actor = self._observing(actor.to(self.device))
        self.critic = critic.to(self.device)
        yes = torch.ones((), dtype=torch.bool, device=self.device)
        _project_all(self.actor, yes)
        _project_all(self.critic, yes)
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), device=self.device, requires_grad=True)
        self.alpha_opt = MaskedAdam([self.log_alpha], cfg.alpha_lr)
        self.atoms = categorical.support(cfg.v_min, cfg.v_max, cfg.num_atoms, self.device)
        self.reward_scaler = RewardScaler(cfg.gamma, min(-cfg.v_min, cfg.v_max), self.device)
        self.reward_scaling = cfg.reward_scaling

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def act(self, obs_normalized: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions in [-1, 1] for observations [N, obs_dim]; BatchNorm uses running statistics."""
        mean, log_std = self.actor(obs_normalized.to(self.device, torch.float32), train=False)
        if deterministic:
            return torch.tanh(mean)
        noise = torch.randn(mean.shape, device=self.device, generator=self.act_gen)
        return squashed_gaussian.sample(mean, log_std, noise)[0]

    @torch.no_grad()
    def q_estimate(self, obs_normalized: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[N] the lower of the two critics' expected values (BatchNorm on running statistics),
        divided by the reward scale the critic learns under: in the task's reward units."""
        obs = obs_normalized.to(self.device, torch.float32)
        logits = self.critic(obs, action.to(self.device, torch.float32), train=False)
        return categorical.expectation(logits, self.atoms).min(0).values / self.reward_scale()

    def observe_rewards(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Feed one env step of raw rewards [num_envs] to the adaptive reward scale (call once per env step)."""
        if self.reward_scaling:
            self.reward_scaler.observe(reward, terminated, truncated)

    def reward_scale(self) -> torch.Tensor:
        one = torch.ones((), device=self.device)
        return self.reward_scaler.scale() if self.reward_scaling else one

    # ------------------------------------------------------------------ losses (pure but for BN statistics)
    def _actor_loss_eager(
        self, batch: Batch, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b = batch.obs.shape[0]
        mean, log_std = self._actor_w(self._in(torch.cat([batch.obs, batch.next_obs], dim=0)), train=True)
        a, logp = squashed_gaussian.sample(mean[:b], log_std[:b], noise)
        q = categorical.expectation(self._critic_w(self._in(batch.obs), self._in(a), train=False), self.atoms)
        loss = (alpha * logp - q.min(0).values).mean()
        return loss, logp.detach().mean()

    def _critic_loss_eager(
        self, batch: Batch, next_noise: torch.Tensor, alpha: torch.Tensor, reward_scale: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b = batch.obs.shape[0]
        with torch.no_grad():
            mean, log_std = self._actor_w(self._in(batch.next_obs), train=False)
            next_a, next_logp = squashed_gaussian.sample(mean, log_std, next_noise)
            obs_all = self._in(torch.cat([batch.obs, batch.next_obs], dim=0))
            act_all = self._in(torch.cat([batch.action, next_a], dim=0))
            t_logits = self._critic_target_w(obs_all, act_all, train=True)[:, b:]  # [2, B, K], next half
            t_q = categorical.expectation(t_logits, self.atoms)
            pick = (t_q[0] <= t_q[1])[:, None]
            t_probs = torch.softmax(t_logits, dim=-1)
            probs = torch.where(pick, t_probs[0], t_probs[1])
            reward = batch.reward * reward_scale
            values = reward[:, None] + batch.discount[:, None] * (self.atoms[None] - (alpha * next_logp)[:, None])
            target = categorical.project(probs, values, self.cfg.v_min, self.cfg.v_max)
        logits = self._critic_w(obs_all, act_all, train=True)[:, :b]
        loss = -(target[None] * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        return loss, categorical.expectation(logits.detach(), self.atoms).mean()

    # ------------------------------------------------------------------ grads / steps
    def optim_groups(self) -> dict[str, list[torch.Tensor]]:
        return {"critic": self._critic_params, "actor": self._actor_params, "alpha": [self.log_alpha]}

    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def actor_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        noise = torch.randn(batch.action.shape, device=self.device, generator=self.update_gen)
        loss, logp_mean = self._actor_loss(batch, noise, self.alpha())
        # Into the float32 .grad buffers (converted there): see unilab.learn.precision.
        set_grads(self._actor_params, torch.autograd.grad(loss, self._actor_w.params, allow_unused=True))
        return {"actor_loss": loss.detach(), "actor_finite": torch.isfinite(loss), "entropy": -logp_mean}

    def _constrain(self, net: nn.Module, ok: torch.Tensor) -> None:
        _project_all(net, ok)

    def alpha_grads(self, entropy: torch.Tensor) -> dict[str, torch.Tensor]:
        """Loss alpha * (entropy - target); its gradient w.r.t. log_alpha is written directly."""
        alpha = self.alpha()
        gap = entropy.detach() - self.target_entropy
        self.log_alpha.grad.copy_(alpha * gap)  # type: ignore[union-attr]
        loss = alpha * gap
        return {"alpha_loss": loss, "alpha_finite": torch.isfinite(loss)}

    def alpha_step(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        ok = ok & torch.isfinite(self.log_alpha.grad).all()  # type: ignore[arg-type]
        self.alpha_opt.step(ok)
        return {"alpha": self.alpha(), "alpha_finite": ok}

    def critic_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        noise = torch.randn(batch.action.shape, device=self.device, generator=self.update_gen)
        loss, q_mean = self._critic_loss(batch, noise, self.alpha(), self.reward_scale())
        return self._critic_grads(loss, q_mean)

    def update(self, batch: Batch, sync: GradSyncFn | None = None) -> dict[str, torch.Tensor]:
        """Actor + temperature every `actor_update_every` calls (first), then critic and target."""
        m: dict[str, torch.Tensor] = {}
        if self.num_critic_updates % self.cfg.actor_update_every == 0:
            m.update(self.actor_grads(batch))
            m.update(self.actor_step(agree(sync, "actor", m["actor_finite"])))
            m.update(self.alpha_grads(m["entropy"]))
            m.update(self.alpha_step(agree(sync, "alpha", m["alpha_finite"])))
        m.update(self.critic_grads(batch))
        m.update(self.critic_step(agree(sync, "critic", m["critic_finite"])))
        m["reward_scale"] = self.reward_scale()
        return m

    # ------------------------------------------------------------------ what the runtime asks
    def deterministic_actor(self) -> nn.Module:
        """Normalized observations -> the deterministic action in [-1, 1] (export, eval)."""
        return squashed_gaussian.MeanAction(self.bare_actor, False)

    def _learned_tensors(self) -> list[torch.Tensor]:
        return [self.log_alpha]

    def running_stat_modules(self) -> list[nn.Module]:
        return [self.actor, self.critic, self.critic_target]  # BatchNorm running statistics

    # ------------------------------------------------------------------ checkpoints
    def optimizers(self) -> dict[str, MaskedAdam]:
        return {**super().optimizers(), "alpha_opt": self.alpha_opt}

    def _extra_state(self) -> dict[str, object]:
        return {"log_alpha": self.log_alpha.detach().clone(), "reward_scaler": self.reward_scaler.state_dict()}

    def _load_extra_weights(self, state: dict[str, Any]) -> None:
        """The entropy temperature and the reward scale the critic was fitted under (its statistics;
        the source's unfinished episode returns are dropped)."""
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.reward_scaler.load_state_dict(state["reward_scaler"])
        self.reward_scaler.returns = torch.zeros(0, device=self.device)  # this run's episodes are new

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.reward_scaler.load_state_dict(state["reward_scaler"])  # the unfinished returns too
