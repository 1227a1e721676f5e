"""TD3 (Fujimoto et al. 2018) with FastTD3's large-batch options (Seo et al. 2025, arXiv:2505.22642).

Pieces, top to bottom:
- actor: deterministic MLP -> tanh, actions in [-1, 1];
- critic: two Q networks evaluated as one batched ensemble (SAC's `TwinCritic`), either scalar
  (`critic = "mse"`) or C51 distributional (`critic = "c51"`, `num_atoms` over [v_min, v_max]);
- actor and critic widths set apart (`actor_hidden_dims`, `critic_hidden_dims`), one activation
  (`relu | silu | elu`) after every hidden layer, optional LayerNorm before it (`layer_norm`);
- critic target: the target actor's action on the next observation plus clipped Gaussian noise
  (target policy smoothing: `clamp(N(0, target_noise_std), +-target_noise_clip)`, the action
  clamped to [-1, 1]), evaluated by the target critic; with `clipped_double_q` the lower of its two
  Q values (c51: the distribution of the critic with the lower mean), else their mean (c51: the
  mean of the two probability vectors), projected onto the support;
- actor loss -Q(s, pi(s)), Q the lower of the two critics' values with `clipped_double_q` (FastTD3),
  else their mean;
- target critic by Polyak averaging (`tau`) after each critic step, target actor likewise after
  each actor step;
- delayed actor: one actor update every `actor_update_every` critic updates (TD3's policy delay);
- exploration: Gaussian noise with one std per env, drawn uniformly in
  [exploration_std_min, exploration_std_max] and redrawn when that env's episode ends (FastTD3).

Inputs are normalized observations (see `unilab.learn.normalizer`); actions are in [-1, 1]. Rewards
and discounts come as the replay's n-step sums (`Batch`), so `gamma` and `n_step` act there.

Precision. As in `unilab.algos.sac.learner`: with `compute_dtype=torch.bfloat16` the update's
network calls run on bfloat16 working copies of the four networks (`unilab.learn.precision`),
outputs back in float32 for the losses; parameters, optimizer state, losses and `act` stay float32.

Update structure. As SAC's without the temperature: `critic_grads` / `critic_step(ok)` and
`actor_grads` / `actor_step(ok)`, a data-parallel layer all-reducing the `optim_groups()` gradients
and the finite flags between the two; `MaskedAdam` steps that are exact no-ops where `ok` (or the
gradient norm) is not finite. No `.item()`, no branches on tensor values, fixed shapes: the only
Python control flow is the actor cadence, a host-side counter. Random noise is drawn from the
learner's own generators outside the loss functions, so those are pure and can be torch.compile'd.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from unilab.algos.sac.learner import TwinCritic, TwinCriticFit, distributional, mlp
from unilab.algos.td3.spec import Td3Spec
from unilab.learn import categorical
from unilab.learn.optim import GradSyncFn, agree, polyak_, set_grads
from unilab.learn.precision import WorkingCopy
from unilab.learn.replay import Batch
from unilab.learn.replay_learner import ReplayLearner, seeded


class DeterministicActor(nn.Module):
    """MLP -> tanh: normalized observations [B, obs_dim] -> actions [B, act_dim] in [-1, 1], float32."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], layer_norm: bool, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.trunk, d = mlp(obs_dim, hidden, layer_norm, activation)
        self.head = nn.Linear(d, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(self.trunk(obs)).float())


class Td3Learner(TwinCriticFit, ReplayLearner):
    """A deterministic actor with its own target, SAC's twin critic and per-env exploration noise
    (module docstring); `ReplayLearner` builds the rest."""

    algo = "td3"
    title = "TD3"

    cfg: Td3Spec

    def _build(self, seed: int) -> None:
        cfg, obs_dim, act_dim = self.cfg, self.obs_dim, self.act_dim
        self.distributional = distributional(cfg)
        actor, critic = seeded(
            seed,
            lambda: DeterministicActor(
                self.actor_obs_dim, act_dim, tuple(cfg.actor_hidden_dims), cfg.layer_norm, cfg.activation
            ),
            lambda: TwinCritic.for_spec(obs_dim, act_dim, cfg),
        )
        self.actor = self._observing(actor.to(self.device))
        self.critic = critic.to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self._actor_target_params = list(self.actor_target.parameters())
        self._actor_target_w = WorkingCopy(self.actor_target, self.compute_dtype)
        self.atoms = categorical.support(cfg.v_min, cfg.v_max, cfg.num_atoms, self.device)
        # Per-env exploration noise std [N, 1], drawn when `act` first sees N rows.
        self.exploration_std: torch.Tensor | None = None

    def _more_copies(self) -> list[WorkingCopy]:
        return [self._actor_target_w]

    # ------------------------------------------------------------------ inference
    def _draw_std(self, n: int) -> torch.Tensor:
        lo, hi = self.cfg.exploration_std_min, self.cfg.exploration_std_max
        u = torch.rand((n, 1), device=self.device, generator=self.act_gen)
        return lo + (hi - lo) * u

    def _stds(self, n: int) -> torch.Tensor:
        """The per-env stds [n, 1]; (re)drawn for every env when the number of rows is new (a host shape check)."""
        if self.exploration_std is None or self.exploration_std.shape[0] != n:
            self.exploration_std = self._draw_std(n)
        return self.exploration_std

    @torch.no_grad()
    def act(self, obs_normalized: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions in [-1, 1] for normalized observations [N, obs_dim]: the actor's, plus Gaussian
        noise with row i's own std unless `deterministic`, clamped to [-1, 1]."""
        a = self.actor(obs_normalized.to(self.device, torch.float32))
        if deterministic:
            return a
        std = self._stds(a.shape[0])
        noise = torch.randn(a.shape, device=self.device, generator=self.act_gen)
        return (a + noise * std).clamp(-1.0, 1.0)

    @torch.no_grad()
    def q_estimate(self, obs_normalized: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[N] the critics' (expected) value as the actor's loss reads it: the lower of the two with
        `clipped_double_q`, else their mean."""
        out = self.critic(obs_normalized.to(self.device, torch.float32), action.to(self.device, torch.float32))
        q2 = self._q_values(out)
        return q2.min(0).values if self.cfg.clipped_double_q else q2.mean(0)

    def exploration_metrics(self) -> dict[str, torch.Tensor]:
        """The mean of the per-env exploration noise stds (none before the first `act`)."""
        std = self.exploration_std
        return {} if std is None else {"exploration_std": std.mean()}

    def observe_rewards(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Every env step [num_envs]: envs whose episode ended get a fresh exploration std (no host sync)."""
        done = terminated.to(self.device).bool() | truncated.to(self.device).bool()
        std = self._stds(done.shape[0])
        self.exploration_std = torch.where(done[:, None], self._draw_std(done.shape[0]), std)

    # ------------------------------------------------------------------ losses (pure)
    def _critic_loss_eager(self, batch: Batch, smoothing: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`smoothing`: the clipped target policy noise [B, act_dim]."""
        with torch.no_grad():
            next_a = (self._actor_target_w(self._in(batch.next_obs)) + smoothing).clamp(-1.0, 1.0)
            t_out = self._critic_target_w(self._in(batch.next_obs), self._in(next_a))
            if self.distributional:
                t_probs = torch.softmax(t_out, dim=-1)  # [2, B, K]
                if self.cfg.clipped_double_q:
                    t_q = categorical.expectation(t_out, self.atoms)  # [2, B]
                    probs = torch.where((t_q[0] <= t_q[1])[:, None], t_probs[0], t_probs[1])
                else:
                    probs = t_probs.mean(0)
                values = batch.reward[:, None] + batch.discount[:, None] * self.atoms[None]
                target = categorical.project(probs, values, self.cfg.v_min, self.cfg.v_max)
            else:
                t_q = t_out.min(0).values if self.cfg.clipped_double_q else t_out.mean(0)
                target = batch.reward + batch.discount * t_q
        out = self._critic_w(self._in(batch.obs), self._in(batch.action))
        return self._critic_fit(out, target)

    def _actor_loss_eager(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self._actor_w(self._in(obs))
        q2 = self._q_values(self._critic_w(self._in(obs), self._in(a)))  # [2, B]
        q = q2.min(0).values if self.cfg.clipped_double_q else q2.mean(0)
        return -q.mean(), a.detach().abs().mean()

    # ------------------------------------------------------------------ grads / steps
    def optim_groups(self) -> dict[str, list[torch.Tensor]]:
        """Parameters per optimizer, in a fixed order: what a data-parallel layer all-reduces."""
        return {"critic": self._critic_params, "actor": self._actor_params}

    def critic_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        noise = torch.randn(batch.action.shape, device=self.device, generator=self.update_gen)
        clip = self.cfg.target_noise_clip
        smoothing = (noise * self.cfg.target_noise_std).clamp(-clip, clip)
        loss, q_mean = self._critic_loss(batch, smoothing)
        return self._critic_grads(loss, q_mean)

    def actor_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        loss, abs_action = self._actor_loss(batch.obs)
        # Gradients w.r.t. the actor only: the critic's .grad buffers are left as they are.
        set_grads(self._actor_params, torch.autograd.grad(loss, self._actor_w.params, allow_unused=True))
        return {"actor_loss": loss.detach(), "actor_finite": torch.isfinite(loss), "action_abs_mean": abs_action}

    def _actor_stepped(self, ok: torch.Tensor) -> None:
        polyak_(self._actor_target_params, self._actor_params, self.cfg.tau, ok)
        self._actor_target_w.refresh()

    def update(self, batch: Batch, sync: GradSyncFn | None = None) -> dict[str, torch.Tensor]:
        """One critic update and, every `actor_update_every` calls, one actor update.

        Returns 0-dim tensors (no host sync); the actor keys only on calls that updated it.
        """
        m = self.critic_grads(batch)
        m.update(self.critic_step(agree(sync, "critic", m["critic_finite"])))
        if self._actor_due():
            m.update(self.actor_grads(batch))
            m.update(self.actor_step(agree(sync, "actor", m["actor_finite"])))
        return m

    # ------------------------------------------------------------------ what the runtime reads
    def deterministic_actor(self) -> nn.Module:
        """Normalized observations [B, obs_dim] -> actions [B, act_dim] in [-1, 1]: the float32 actor."""
        return self.bare_actor

    # ------------------------------------------------------------------ checkpoints
    def networks(self) -> dict[str, nn.Module]:
        return {**super().networks(), "actor_target": self.actor_target}

    def _extra_state(self) -> dict[str, object]:
        std = self.exploration_std
        return {"exploration_std": None if std is None else std.clone()}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        std = state.get("exploration_std")
        self.exploration_std = None if std is None else std.to(self.device, torch.float32).clone()
