"""What the replay learners (SAC, FlashSAC, TD3) share, so that each of their modules holds only
its networks and losses: the checks and fields every constructor starts with, the optimizers,
noise streams and counters it ends with, the masked optimizer step, the actor cadence, the
working-copy refresh and the checkpoint state.

A subclass builds `actor` and `critic` (and whatever else it learns) in `_build`, writes its
losses, names what it saves in `networks()` and `optimizers()`, and adds what is its own through
`_extra_state`, `_load_extra_weights` and `_load_extra_state`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from unilab.errors import UnilabError
from unilab.learn.optim import MaskedAdam, grad_norm_and_clip, polyak_, set_grads
from unilab.learn.precision import WorkingCopy


class ActorInputs(nn.Module):
    """An actor that reads its own columns of the task's observation (`task.privileged_observations`:
    the critic reads them all). The columns are not saved: the run's plan and observation layout
    give them, and the deployed policy is the inner actor on its columns alone."""

    def __init__(self, actor: nn.Module, cols: Sequence[int]) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("cols", torch.tensor(list(cols), dtype=torch.long), persistent=False)

    def forward(self, obs: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return self.actor(obs.index_select(-1, self.cols), *args, **kwargs)


def seeded(seed: int, *build: Callable[[], nn.Module]) -> list[nn.Module]:
    """The networks `build` makes, in order, from `seed`, without touching the caller's RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [b() for b in build]


class ReplayLearner(ABC):
    algo: ClassVar[str]  # the checkpoint's "algo": the spec's algo.name
    title: ClassVar[str]  # how messages name it

    actor: nn.Module
    critic: nn.Module
    critic_target: nn.Module
    cfg: Any
    # The update's working copies (unilab.learn.precision) and the critic target's parameters.
    _actor_w: WorkingCopy
    _critic_w: WorkingCopy
    _critic_target_w: WorkingCopy
    _critic_target_params: list[torch.Tensor]
    # The subclass's pure loss functions (wrapped in torch.compile where asked).
    _critic_loss_eager: Callable[..., Any]
    _actor_loss_eager: Callable[..., Any]

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        cfg: Any,
        device: torch.device | str = "cpu",
        seed: int = 0,
        *,
        compute_dtype: torch.dtype = torch.float32,
        compile_mode: str | None = None,
        actor_cols: Sequence[int] | None = None,
    ) -> None:
        """`seed` fixes the initial weights (without touching the caller's global RNG) and the
        learner's own noise generators. `compute_dtype` is the precision of the update's network
        calls (float32 or the plan's bfloat16); parameters, optimizer state, losses and `act` stay
        float32. `compile_mode` wraps the two loss functions in torch.compile (forward and
        backward), measured slower than eager on CPU (tools/bench_learner.py --compile).
        `actor_cols`: the observation's columns the actor reads (None: all of them; the critic
        always reads all)."""
        if obs_dim < 1 or act_dim < 1:
            raise UnilabError(f"{self.title} needs positive observation and action sizes, got {obs_dim} and {act_dim}")
        self.cfg = cfg
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.actor_cols = list(actor_cols) if actor_cols is not None else None
        if self.actor_cols is not None and not (self.actor_cols and all(0 <= c < obs_dim for c in self.actor_cols)):
            raise UnilabError(
                f"the actor's observation columns {self.actor_cols} do not fit an observation of {obs_dim}"
            )
        self.actor_obs_dim = len(self.actor_cols) if self.actor_cols is not None else obs_dim
        self.device = torch.device(device)
        self.compute_dtype = compute_dtype
        self._build(seed)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self._critic_target_params = list(self.critic_target.parameters())
        # What the update's network calls run on (the networks themselves in float32).
        self._actor_w = WorkingCopy(self.actor, compute_dtype)
        self._critic_w = WorkingCopy(self.critic, compute_dtype)
        self._critic_target_w = WorkingCopy(self.critic_target, compute_dtype)
        self._copies = [self._actor_w, self._critic_w, self._critic_target_w, *self._more_copies()]
        self._actor_params: list[torch.Tensor] = list(self.actor.parameters())
        self._critic_params: list[torch.Tensor] = list(self.critic.parameters())
        self.actor_opt = MaskedAdam(self._actor_params, cfg.actor_lr)
        self.critic_opt = MaskedAdam(self._critic_params, cfg.critic_lr)
        # Separate streams: inference calls between updates do not change the update's noise.
        self.update_gen = torch.Generator(device=self.device).manual_seed(seed * 2 + 1)
        self.act_gen = torch.Generator(device=self.device).manual_seed(seed * 2 + 2)
        self.num_critic_updates = 0
        self.num_actor_updates = 0
        self._critic_loss = self._critic_loss_eager
        self._actor_loss = self._actor_loss_eager
        if compile_mode is not None:
            self._critic_loss = torch.compile(self._critic_loss_eager, mode=compile_mode, dynamic=False)
            self._actor_loss = torch.compile(self._actor_loss_eager, mode=compile_mode, dynamic=False)

    def _observing(self, actor: nn.Module) -> nn.Module:
        """`actor` (built for `actor_obs_dim` inputs) as the update and `act` call it: on the whole
        observation, of which it reads its own columns."""
        return actor if self.actor_cols is None else ActorInputs(actor, self.actor_cols).to(self.device)

    @property
    def bare_actor(self) -> nn.Module:
        """The actor on its own columns alone: what a deployment feeds (export, eval)."""
        return self.actor.actor if isinstance(self.actor, ActorInputs) else self.actor

    @abstractmethod
    def _build(self, seed: int) -> None:
        """`actor`, `critic` (from `seed`: `seeded`) and what else the learner learns."""

    @abstractmethod
    def q_estimate(self, obs_normalized: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """[N] the critic's value of `action` [N, act_dim] in normalized observations [N, obs_dim],
        in the units of the task's reward (the critic-bias figures, `unilab.learn.critic_bias`):
        the float32 critic, no autograd, outside the update (and its graph)."""

    def exploration_metrics(self) -> dict[str, torch.Tensor]:
        """0-dim tensors of how the learner explores now, read at a log (TD3's noise std); what its
        update measures (SAC's entropy and temperature) comes with the update's metrics."""
        return {}

    def _more_copies(self) -> list[WorkingCopy]:
        """Working copies `_build` made beyond the actor's, the critic's and its target's (TD3's
        target actor), refreshed with them."""
        return []

    def _in(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.compute_dtype)

    # ------------------------------------------------------------------ steps
    def _critic_grads(self, loss: torch.Tensor, q_mean: torch.Tensor) -> dict[str, torch.Tensor]:
        """The critic loss's gradients into the float32 critic's `.grad` (through its working copy)."""
        set_grads(self._critic_params, torch.autograd.grad(loss, self._critic_w.params, allow_unused=True))
        return {"critic_loss": loss.detach(), "critic_finite": torch.isfinite(loss), "q_mean": q_mean}

    def critic_step(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        norm, ok = self._masked_step(self._critic_params, self.critic_opt, ok)
        self._constrain(self.critic, ok)
        polyak_(self._critic_target_params, self._critic_params, self.cfg.tau, ok)
        self._critic_w.refresh()
        self._critic_target_w.refresh()
        self.num_critic_updates += 1
        return {"critic_grad_norm": norm, "critic_finite": ok}

    def actor_step(self, ok: torch.Tensor) -> dict[str, torch.Tensor]:
        norm, ok = self._masked_step(self._actor_params, self.actor_opt, ok)
        self._constrain(self.actor, ok)
        self._actor_stepped(ok)
        self._actor_w.refresh()
        self.num_actor_updates += 1
        return {"actor_grad_norm": norm, "actor_finite": ok}

    def _constrain(self, net: nn.Module, ok: torch.Tensor) -> None:  # noqa: B027  (an optional hook)
        """After a network's optimizer step (FlashSAC projects its weights back onto their sphere)."""

    def _actor_stepped(self, ok: torch.Tensor) -> None:  # noqa: B027  (an optional hook)
        """After the actor's step, before its working copy is refreshed (TD3's target actor)."""

    def _masked_step(
        self, params: list[torch.Tensor], opt: MaskedAdam, ok: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Clip and measure the gradient norm, then one Adam step where `ok` and the norm are finite
        (an exact no-op elsewhere). Returns the norm and the verdict the step took."""
        norm = grad_norm_and_clip(params, self.cfg.max_grad_norm)
        ok = ok & torch.isfinite(norm)
        opt.step(ok)
        return norm, ok

    def cycle_kind(self) -> str:
        """What the next `update` runs: the actor too, or the critic alone (a host counter, no sync);
        a CUDA graph of the learner keeps one graph per kind."""
        return "critic+actor" if self.num_critic_updates % self.cfg.actor_update_every == 0 else "critic"

    def _actor_due(self) -> bool:
        """After a critic step: this update cycle updates the actor too."""
        return (self.num_critic_updates - 1) % self.cfg.actor_update_every == 0

    def refresh_working_copies(self) -> None:
        """After the float32 networks were written from outside the update (a checkpoint loaded, a
        data-parallel broadcast), so the update's working copies hold the same weights."""
        for c in self._copies:
            c.refresh()

    # ------------------------------------------------------------------ what the runtime asks
    def replicated(self) -> list[nn.Module | torch.Tensor]:
        """What every data-parallel rank must hold alike (broadcast at start, digested at the end):
        the networks and the learned tensors beside them."""
        return [*self.networks().values(), *self._learned_tensors()]

    def _learned_tensors(self) -> list[torch.Tensor]:
        return []

    def running_stat_modules(self) -> list[nn.Module]:
        """Modules whose buffers each rank updates from its own batch (averaged under data parallel)."""
        return []

    # ------------------------------------------------------------------ checkpoints
    def networks(self) -> dict[str, nn.Module]:
        """The networks a checkpoint holds, by key."""
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def optimizers(self) -> dict[str, MaskedAdam]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt}

    def _extra_state(self) -> dict[str, object]:
        return {}

    def _load_extra_weights(self, state: dict[str, Any]) -> None:  # noqa: B027  (an optional hook)
        """What else a run started from a checkpoint takes besides the networks."""

    def _load_extra_state(self, state: dict[str, Any]) -> None:  # noqa: B027  (an optional hook)
        """What else a resumed run restores, after the weights."""

    def state_dict(self) -> dict[str, object]:
        return {
            "algo": self.algo,
            **{k: m.state_dict() for k, m in self.networks().items()},
            **self._extra_state(),
            **{k: o.state_dict() for k, o in self.optimizers().items()},
            "update_gen": self.update_gen.get_state(),
            "act_gen": self.act_gen.get_state(),
            "num_critic_updates": self.num_critic_updates,
            "num_actor_updates": self.num_actor_updates,
        }

    def load_weights(self, state: dict[str, Any]) -> None:
        """What a run started from this checkpoint takes (run.init_from): the networks and what
        `_load_extra_weights` adds; optimizers, generators and counters stay fresh."""
        if state.get("algo") != self.algo:
            raise UnilabError(
                f"checkpoint holds a {state.get('algo')!r} learner, this run uses {self.algo!r}",
                fix="resume with the algo.name that wrote the checkpoint",
            )
        for k, m in self.networks().items():
            m.load_state_dict(state[k])
        self._load_extra_weights(state)
        self.refresh_working_copies()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_weights(state)
        self._load_extra_state(state)
        for k, o in self.optimizers().items():
            o.load_state_dict(state[k])
        self.update_gen.set_state(state["update_gen"])
        self.act_gen.set_state(state["act_gen"])
        self.num_critic_updates = int(state["num_critic_updates"])
        self.num_actor_updates = int(state["num_actor_updates"])
