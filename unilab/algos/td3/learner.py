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

import torch
from torch import nn

from unilab.algos.sac.learner import ACTIVATIONS, TwinCritic
from unilab.errors import UnilabError
from unilab.learn import categorical
from unilab.learn.optim import GradSyncFn, MaskedAdam, agree, grad_norm_and_clip, polyak_, set_grads
from unilab.learn.precision import WorkingCopy
from unilab.learn.replay import Batch
from unilab.spec.models import Td3Spec


class DeterministicActor(nn.Module):
    """MLP -> tanh: normalized observations [B, obs_dim] -> actions [B, act_dim] in [-1, 1], float32."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], layer_norm: bool, activation: str = "relu"
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.LayerNorm(h) if layer_norm else nn.Identity(), ACTIVATIONS[activation]()]
            d = h
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(d, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(self.trunk(obs)).float())


class Td3Learner:
    """TD3 learner: `act`, `update`, `state_dict`; see the module docstring for the update structure.

    `seed` fixes the initial weights (without touching the caller's global RNG) and the learner's
    own noise generators. `compute_dtype` is the precision of the update's network calls
    (float32 or the plan's bfloat16); parameters, optimizer state, losses and `act` stay float32.
    `compile_mode` wraps the two loss functions in torch.compile (forward and backward).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        cfg: Td3Spec,
        device: torch.device | str = "cpu",
        seed: int = 0,
        *,
        compute_dtype: torch.dtype = torch.float32,
        compile_mode: str | None = None,
    ) -> None:
        if obs_dim < 1 or act_dim < 1:
            raise UnilabError(f"TD3 needs positive observation and action sizes, got {obs_dim} and {act_dim}")
        if cfg.critic == "c51" and not cfg.v_min < cfg.v_max:
            raise UnilabError(
                f"C51 critic support is empty: v_min {cfg.v_min} >= v_max {cfg.v_max}",
                fix="set algo.v_min below algo.v_max",
            )
        self.cfg = cfg
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.device = torch.device(device)
        self.distributional = cfg.critic == "c51"
        self.compute_dtype = compute_dtype
        out_dim = cfg.num_atoms if self.distributional else 1
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.manual_seed(seed)
            actor = DeterministicActor(obs_dim, act_dim, tuple(cfg.actor_hidden_dims), cfg.layer_norm, cfg.activation)
            critic = TwinCritic(
                obs_dim, act_dim, tuple(cfg.critic_hidden_dims), cfg.layer_norm, out_dim, cfg.activation
            )
        self.actor = actor.to(self.device)
        self.critic = critic.to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.atoms = categorical.support(cfg.v_min, cfg.v_max, cfg.num_atoms, self.device)
        # What the update's network calls run on (the networks themselves in float32).
        self._actor_w = WorkingCopy(self.actor, compute_dtype)
        self._critic_w = WorkingCopy(self.critic, compute_dtype)
        self._actor_target_w = WorkingCopy(self.actor_target, compute_dtype)
        self._critic_target_w = WorkingCopy(self.critic_target, compute_dtype)
        self._actor_target_params = list(self.actor_target.parameters())
        self._critic_target_params = list(self.critic_target.parameters())

        self._actor_params: list[torch.Tensor] = list(self.actor.parameters())
        self._critic_params: list[torch.Tensor] = list(self.critic.parameters())
        self.actor_opt = MaskedAdam(self._actor_params, cfg.actor_lr)
        self.critic_opt = MaskedAdam(self._critic_params, cfg.critic_lr)

        # Separate streams: inference calls between updates do not change the update's noise.
        self.update_gen = torch.Generator(device=self.device).manual_seed(seed * 2 + 1)
        self.act_gen = torch.Generator(device=self.device).manual_seed(seed * 2 + 2)
        self.num_critic_updates = 0
        self.num_actor_updates = 0
        # Per-env exploration noise std [N, 1], drawn when `act` first sees N rows.
        self.exploration_std: torch.Tensor | None = None

        self._critic_loss = self._critic_loss_eager
        self._actor_loss = self._actor_loss_eager
        if compile_mode is not None:
            self._critic_loss = torch.compile(self._critic_loss_eager, mode=compile_mode, dynamic=False)
            self._actor_loss = torch.compile(self._actor_loss_eager, mode=compile_mode, dynamic=False)

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

    def observe_rewards(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """Every env step [num_envs]: envs whose episode ended get a fresh exploration std (no host sync)."""
        done = terminated.to(self.device).bool() | truncated.to(self.device).bool()
        std = self._stds(done.shape[0])
        self.exploration_std = torch.where(done[:, None], self._draw_std(done.shape[0]), std)

    # ------------------------------------------------------------------ losses (pure)
    def _in(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.compute_dtype)

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        """[2, B] expected Q from critic output."""
        return categorical.expectation(out, self.atoms) if self.distributional else out

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
        if self.distributional:
            loss = -(target[None] * torch.log_softmax(out, dim=-1)).sum(-1).mean(-1).sum()
        else:
            loss = (out - target[None]).square().mean(-1).sum()
        return loss, self._q_values(out.detach()).mean()

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
        grads = torch.autograd.grad(loss, self._critic_w.params, allow_unused=True)
        set_grads(self._critic_params, grads)  # converted to float32 by the copy
        return {"critic_loss": loss.detach(), "critic_finite": torch.isfinite(loss), "q_mean": q_mean}

    def critic_step(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        norm = grad_norm_and_clip(self._critic_params, self.cfg.max_grad_norm)
        ok = ok & torch.isfinite(norm)
        self.critic_opt.step(ok)
        polyak_(self._critic_target_params, self._critic_params, self.cfg.tau, ok)
        self._critic_w.refresh()
        self._critic_target_w.refresh()
        self.num_critic_updates += 1
        return {"critic_grad_norm": norm, "critic_finite": ok}

    def actor_grads(self, batch: Batch) -> dict[str, torch.Tensor]:
        loss, abs_action = self._actor_loss(batch.obs)
        # Gradients w.r.t. the actor only: the critic's .grad buffers are left as they are.
        set_grads(self._actor_params, torch.autograd.grad(loss, self._actor_w.params, allow_unused=True))
        return {"actor_loss": loss.detach(), "actor_finite": torch.isfinite(loss), "action_abs_mean": abs_action}

    def actor_step(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        norm = grad_norm_and_clip(self._actor_params, self.cfg.max_grad_norm)
        ok = ok & torch.isfinite(norm)
        self.actor_opt.step(ok)
        polyak_(self._actor_target_params, self._actor_params, self.cfg.tau, ok)
        self._actor_w.refresh()
        self._actor_target_w.refresh()
        self.num_actor_updates += 1
        return {"actor_grad_norm": norm, "actor_finite": ok}

    def cycle_kind(self) -> str:
        """What the next `update` runs: the actor too, or the critic alone (a host counter, no sync);
        a CUDA graph of the learner keeps one graph per kind."""
        return "critic+actor" if self.num_critic_updates % self.cfg.actor_update_every == 0 else "critic"

    def update(self, batch: Batch, sync: GradSyncFn | None = None) -> dict[str, torch.Tensor]:
        """One critic update and, every `actor_update_every` calls, one actor update.

        Returns 0-dim tensors (no host sync); the actor keys only on calls that updated it.
        """
        m = self.critic_grads(batch)
        m.update(self.critic_step(agree(sync, "critic", m["critic_finite"])))
        if (self.num_critic_updates - 1) % self.cfg.actor_update_every == 0:
            m.update(self.actor_grads(batch))
            m.update(self.actor_step(agree(sync, "actor", m["actor_finite"])))
        return m

    def refresh_working_copies(self) -> None:
        """After the float32 networks were written from outside the update (a checkpoint loaded, a
        data-parallel broadcast), so the update's working copies hold the same weights."""
        self._actor_w.refresh()
        self._critic_w.refresh()
        self._actor_target_w.refresh()
        self._critic_target_w.refresh()

    # ------------------------------------------------------------------ what the runtime reads
    def deterministic_actor(self) -> nn.Module:
        """Normalized observations [B, obs_dim] -> actions [B, act_dim] in [-1, 1]: the float32 actor."""
        return self.actor

    def replicated(self) -> list[nn.Module]:
        """What must agree across data-parallel ranks."""
        return [self.actor, self.actor_target, self.critic, self.critic_target]

    def running_stat_modules(self) -> list[nn.Module]:
        """Modules with running statistics (BatchNorm): none."""
        return []

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, object]:
        std = self.exploration_std
        return {
            "algo": "td3",
            "actor": self.actor.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "update_gen": self.update_gen.get_state(),
            "act_gen": self.act_gen.get_state(),
            "num_critic_updates": self.num_critic_updates,
            "num_actor_updates": self.num_actor_updates,
            "exploration_std": None if std is None else std.clone(),
        }

    def load_weights(self, state: dict[str, object]) -> None:
        """What a run started from this checkpoint takes (run.init_from): the networks and their
        targets; optimizers, generators, counters and exploration stds stay fresh."""
        if state.get("algo") != "td3":
            raise UnilabError(
                f"checkpoint holds a {state.get('algo')!r} learner, this run uses 'td3'",
                fix="resume with the algo.name that wrote the checkpoint",
            )
        self.actor.load_state_dict(state["actor"])  # type: ignore[arg-type]
        self.actor_target.load_state_dict(state["actor_target"])  # type: ignore[arg-type]
        self.critic.load_state_dict(state["critic"])  # type: ignore[arg-type]
        self.critic_target.load_state_dict(state["critic_target"])  # type: ignore[arg-type]
        self.refresh_working_copies()

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.load_weights(state)
        self.actor_opt.load_state_dict(state["actor_opt"])  # type: ignore[arg-type]
        self.critic_opt.load_state_dict(state["critic_opt"])  # type: ignore[arg-type]
        self.update_gen.set_state(state["update_gen"])  # type: ignore[arg-type]
        self.act_gen.set_state(state["act_gen"])  # type: ignore[arg-type]
        self.num_critic_updates = int(state["num_critic_updates"])  # type: ignore[arg-type]
        self.num_actor_updates = int(state["num_actor_updates"])  # type: ignore[arg-type]
        std = state.get("exploration_std")
        self.exploration_std = None if std is None else std.to(self.device, torch.float32).clone()  # type: ignore[attr-defined]
