"""Soft actor-critic (Haarnoja et al. 2018) with FastSAC's large-batch options (arXiv:2512.01996).

Pieces, top to bottom:
- actor: MLP -> (mean, log_std), tanh-squashed Gaussian, log_std squashed into [-5, 2];
- critic: two Q networks evaluated as one batched ensemble (one bmm per layer), either scalar
  (`critic = "mse"`) or C51 distributional (`critic = "c51"`, `num_atoms` over [v_min, v_max],
  target distribution of the critic with the lower mean, projected onto the support);
- actor and critic widths set apart (`actor_hidden_dims`, `critic_hidden_dims`), one activation
  (`relu | silu | elu`) after every hidden layer, optional LayerNorm before it (`layer_norm`);
- target critic by Polyak averaging (`tau`) after each critic step;
- learned temperature: log_alpha, loss -log_alpha * (log_pi + target_entropy);
- actor and temperature updated every `actor_update_every` critic updates.

Inputs are normalized observations (see `unilab.learn.normalizer`); actions are in [-1, 1].

Precision. With `compute_dtype=torch.bfloat16` (the plan's `precision`) the update's network calls
run on working copies of the three networks in bfloat16: inputs, matrix products, LayerNorm and
activations in bf16, outputs back in float32 for the losses. Gradients are taken w.r.t. the
copies' parameters and converted into the float32 parameters' `.grad`; the float32 parameters
and their optimizer state are the learner's state, and each copy is refreshed from them after
their optimizer (or Polyak) step, one conversion per step rather than one per call. torch.autocast
converts weights at every call and keeps LayerNorm in float32, converting around it; this
layout is faster on a Xeon with AMX (docs/performance.md). `act` always runs the float32 actor.

Update structure. For each optimizer (critic, actor, alpha) there is a `*_grads` method, which
computes the loss and writes the gradients into fixed `.grad` buffers and returns a finite flag
tensor, and a `*_step(ok)` method, which measures (and optionally clips) the gradient norm and
takes a `MaskedAdam` step that is an exact no-op where `ok` (or the gradient norm) is not finite.
A data-parallel layer all-reduces the `optim_groups()` gradients and the flags between the two.
`update` chains them. No `.item()`, no branches on tensor values, fixed shapes: the only Python
control flow is the actor cadence, a host-side counter. Random noise is drawn from the learner's
own generators outside the loss functions, so those are pure and can be torch.compile'd.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from unilab.algos.sac.spec import SacSpec
from unilab.errors import UnilabError
from unilab.learn import categorical, squashed_gaussian
from unilab.learn.optim import GradSyncFn, MaskedAdam, agree, set_grads
from unilab.learn.replay import Batch
from unilab.learn.replay_learner import ReplayLearner, seeded

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "silu": nn.SiLU, "elu": nn.ELU}


def mlp(d: int, hidden: tuple[int, ...], layer_norm: bool, activation: str) -> tuple[nn.Sequential, int]:
    """Linear, optional LayerNorm and the activation per hidden width; and the output width."""
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(d, h), nn.LayerNorm(h) if layer_norm else nn.Identity(), ACTIVATIONS[activation]()]
        d = h
    return nn.Sequential(*layers), d


class Actor(nn.Module):
    def __init__(
        self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], layer_norm: bool, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.trunk, d = mlp(obs_dim, hidden, layer_norm, activation)
        self.head = nn.Linear(d, 2 * act_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, raw = self.head(self.trunk(obs)).float().chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1.0)
        return mean, log_std


class EnsembleLinear(nn.Module):
    """`members` independent linear layers applied to [members, B, in] with one batched matmul."""

    def __init__(self, members: int, d_in: int, d_out: int) -> None:
        super().__init__()
        ref = [nn.Linear(d_in, d_out) for _ in range(members)]  # torch's default init, per member
        self.weight = nn.Parameter(torch.stack([m.weight.detach().t() for m in ref]))  # [E, in, out]
        self.bias = nn.Parameter(torch.stack([m.bias.detach()[None] for m in ref]))  # [E, 1, out]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    def __init__(self, members: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(members, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, x.shape[-1:]), self.weight)


def distributional(cfg: Any) -> bool:
    """Whether the `[algo]` asks for the C51 critic; an empty support is refused."""
    if cfg.critic == "c51" and not cfg.v_min < cfg.v_max:
        raise UnilabError(
            f"C51 critic support is empty: v_min {cfg.v_min} >= v_max {cfg.v_max}",
            fix="set algo.v_min below algo.v_max",
        )
    return cfg.critic == "c51"


class TwinCritic(nn.Module):
    """Two Q networks. Output [2, B] (mse) or logits [2, B, num_atoms] (c51)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        layer_norm: bool,
        out_dim: int,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = obs_dim + act_dim
        for h in hidden:
            norm = EnsembleLayerNorm(2, h) if layer_norm else nn.Identity()
            layers += [EnsembleLinear(2, d, h), norm, ACTIVATIONS[activation]()]
            d = h
        self.trunk = nn.Sequential(*layers)
        self.head = EnsembleLinear(2, d, out_dim)
        self.out_dim = out_dim

    @classmethod
    def for_spec(cls, obs_dim: int, act_dim: int, cfg: Any) -> TwinCritic:
        """The twin critic an `[algo]` with SAC's critic keys asks for (SAC's, TD3's)."""
        out_dim = cfg.num_atoms if distributional(cfg) else 1
        return cls(obs_dim, act_dim, tuple(cfg.critic_hidden_dims), cfg.layer_norm, out_dim, cfg.activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, action], dim=-1).unsqueeze(0).expand(2, -1, -1)
        out = self.head(self.trunk(x)).float()
        return out.squeeze(-1) if self.out_dim == 1 else out


class TwinCriticFit:
    """SAC's and TD3's twin critic in the update: its expected Q, and its loss against a target
    (cross-entropy to the projected target distribution, or squared error), summed over the two."""

    distributional: bool
    atoms: torch.Tensor

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        """[2, B] expected Q from critic output."""
        return categorical.expectation(out, self.atoms) if self.distributional else out

    def _critic_fit(self, out: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.distributional:
            loss = -(target[None] * torch.log_softmax(out, dim=-1)).sum(-1).mean(-1).sum()
        else:
            loss = (out - target[None]).square().mean(-1).sum()
        return loss, self._q_values(out.detach()).mean()


class SacLearner(TwinCriticFit, ReplayLearner):
    """A squashed-Gaussian actor, a twin critic and a learned entropy temperature; the update
    structure is the module docstring's, the constructor `ReplayLearner`'s."""

    algo = "sac"
    title = "SAC"

    cfg: SacSpec

    def _build(self, seed: int) -> None:
        cfg, obs_dim, act_dim = self.cfg, self.obs_dim, self.act_dim
        self.distributional = distributional(cfg)
        self.target_entropy = float(-act_dim if cfg.target_entropy == "auto" else cfg.target_entropy)
        actor, critic = seeded(
            seed,
            lambda: Actor(self.actor_obs_dim, act_dim, tuple(cfg.actor_hidden_dims), cfg.layer_norm, cfg.activation),
            lambda: TwinCritic.for_spec(obs_dim, act_dim, cfg),
        )
        self.actor = self._observing(actor.to(self.device))
        self.critic = critic.to(self.device)
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), device=self.device, requires_grad=True)
        self.alpha_opt = MaskedAdam([self.log_alpha], cfg.alpha_lr)
        self.atoms = categorical.support(cfg.v_min, cfg.v_max, cfg.num_atoms, self.device)

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def act(self, obs_normalized: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions in [-1, 1] for normalized observations [N, obs_dim]."""
        mean, log_std = self.actor(obs_normalized.to(self.device, torch.float32))
        if deterministic:
            return torch.tanh(mean)
        noise = torch.randn(mean.shape, device=self.device, generator=self.act_gen)
        return squashed_gaussian.sample(mean, log_std, noise)[0]

    @torch.no_grad()
    def q_estimate(self, obs_normalized: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[N] the lower of the twin critics' (expected) values: what the actor maximises. A soft
        Q: it includes the entropy bonus the critic expects along the way."""
        out = self.critic(obs_normalized.to(self.device, torch.float32), action.to(self.device, torch.float32))
        return self._q_values(out).min(0).values

    # ------------------------------------------------------------------ losses (pure)
    def _critic_loss_eager(
        self, batch: Batch, next_noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            mean, log_std = self._actor_w(self._in(batch.next_obs))
            next_a, next_logp = squashed_gaussian.sample(mean, log_std, next_noise)
            t_out = self._critic_target_w(self._in(batch.next_obs), self._in(next_a))
            bonus = alpha * next_logp  # [B]
            if self.distributional:
                t_q = categorical.expectation(t_out, self.atoms)  # [2, B]
                pick = (t_q[0] <= t_q[1])[:, None]
                t_probs = torch.softmax(t_out, dim=-1)
                probs = torch.where(pick, t_probs[0], t_probs[1])
                values = batch.reward[:, None] + batch.discount[:, None] * (self.atoms[None] - bonus[:, None])
                target = categorical.project(probs, values, self.cfg.v_min, self.cfg.v_max)
            else:
                target = batch.reward + batch.discount * (t_out.min(0).values - bonus)
        out = self._critic_w(self._in(batch.obs), self._in(batch.action))
        return self._critic_fit(out, target)

    def _actor_loss_eager(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self._actor_w(self._in(obs))
        a, logp = squashed_gaussian.sample(mean, log_std, noise)
        q = self._q_values(self._critic_w(self._in(obs), self._in(a))).min(0).values
        loss = (alpha * logp - q).mean()
        return loss, logp.detach().mean()

    # ------------------------------------------------------------------ grads / steps
    def optim_groups(self) -> dict[str, list[torch.Tensor]]:
        """Parameters per optimizer, in a fixed order: what a data-parallel layer all-reduces."""
        return {"critic": self._critic_params, "actor": self._actor_params, "alpha": [self.log_alpha]}

    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def critic_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        noise = torch.randn(batch.action.shape, device=self.device, generator=self.update_gen)
        loss, q_mean = self._critic_loss(batch, noise, self.alpha())
        return self._critic_grads(loss, q_mean)

    def actor_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        noise = torch.randn(batch.action.shape, device=self.device, generator=self.update_gen)
        loss, logp_mean = self._actor_loss(batch.obs, noise, self.alpha())
        # Gradients w.r.t. the actor only: the critic's .grad buffers are left as they are.
        set_grads(self._actor_params, torch.autograd.grad(loss, self._actor_w.params, allow_unused=True))
        return {"actor_loss": loss.detach(), "actor_finite": torch.isfinite(loss), "entropy": -logp_mean}

    def alpha_grads(self, entropy: torch.Tensor) -> dict[str, torch.Tensor]:
        """`entropy`: the detached -mean log_pi from `actor_grads` (the same minibatch)."""
        loss = self.log_alpha * (entropy.detach() - self.target_entropy)
        self.log_alpha.grad.copy_(entropy.detach() - self.target_entropy)  # type: ignore[union-attr]
        return {"alpha_loss": loss.detach(), "alpha_finite": torch.isfinite(loss)}

    def alpha_step(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        ok = ok & torch.isfinite(self.log_alpha.grad).all()  # type: ignore[arg-type]
        self.alpha_opt.step(ok)
        return {"alpha": self.alpha(), "alpha_finite": ok}

    def update(self, batch: Batch, sync: GradSyncFn | None = None) -> dict[str, torch.Tensor]:
        """One critic update and, every `actor_update_every` calls, one actor and temperature update.

        Returns 0-dim tensors (no host sync); the actor/alpha keys only on calls that updated them.
        """
        m = self.critic_grads(batch)
        m.update(self.critic_step(agree(sync, "critic", m["critic_finite"])))
        if self._actor_due():
            m.update(self.actor_grads(batch))
            m.update(self.actor_step(agree(sync, "actor", m["actor_finite"])))
            m.update(self.alpha_grads(m["entropy"]))
            m.update(self.alpha_step(agree(sync, "alpha", m["alpha_finite"])))
        return m

    def observe_rewards(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Per-env-step reward hook shared with FlashSAC; SAC does not scale rewards, so it keeps nothing."""

    # ------------------------------------------------------------------ what the runtime asks
    def deterministic_actor(self) -> nn.Module:
        """Normalized observations -> the deterministic action in [-1, 1] (export, eval)."""
        return squashed_gaussian.MeanAction(self.bare_actor)

    def _learned_tensors(self) -> list[torch.Tensor]:
        return [self.log_alpha]

    # ------------------------------------------------------------------ checkpoints
    def optimizers(self) -> dict[str, MaskedAdam]:
        return {**super().optimizers(), "alpha_opt": self.alpha_opt}

    def _extra_state(self) -> dict[str, object]:
        return {"log_alpha": self.log_alpha.detach().clone()}

    def _load_extra_weights(self, state: dict[str, Any]) -> None:
        """The entropy temperature it learned."""
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
