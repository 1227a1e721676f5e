"""Replay buffer on the learner's device: preallocated ring storage, batched adds, n-step returns.

Layout. One slot per transition: obs, action, reward, next_obs and `discount`, where `discount` is
the multiplier of the bootstrap value: gamma**k when the n-step window ran k steps without a
termination, 0 when it ended in a termination. A learner's target is then simply
`reward + discount * V(next_obs)`, whatever n is, and a truncated (time-limit) episode still
bootstraps from its true final observation with the right power of gamma.

n-step. `add_batch` receives one env step of all `num_envs` streams. The last n raw steps are
kept in a small pending window per env; once it holds n steps, the oldest becomes an n-step
transition: rewards are summed with discounting until the window ends or the episode ends
(terminated or truncated), and next_obs / discount come from the step that closed it. Steps
after an episode end in the window belong to the next episode and are never mixed in. Hence a
transition lands in storage n-1 env steps after it happened. With n = 1 the window is a
pass-through. Checkpoints do not hold the buffer (it can be gigabytes): a resumed run refills it
from the resumed policy (docs/running.md).

next_obs must be the observation the step actually produced, before any auto-reset (the final
observation of an episode), or truncated episodes bootstrap from the wrong state.

Size. Per transition (float32): 4 * (2 * obs_dim + act_dim + 2) bytes; obs_dim 99, act_dim 29
(g1_walk): 916 bytes, so 1M transitions hold 0.92 GB on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unilab.errors import UnilabError
from unilab.learn.normalizer import ObsNormalizer


@dataclass(frozen=True)
class Batch:
    """A minibatch of transitions. reward: n-step discounted sum; discount: gamma**k, or 0 on termination."""

    obs: torch.Tensor  # [B, obs_dim] float32
    action: torch.Tensor  # [B, act_dim] float32, in [-1, 1]
    reward: torch.Tensor  # [B] float32
    next_obs: torch.Tensor  # [B, obs_dim] float32
    discount: torch.Tensor  # [B] float32

    def normalized(self, normalizer: ObsNormalizer) -> Batch:
        """The same batch with obs and next_obs passed through the normalizer (as the collector's obs are)."""
        norm = normalizer.normalize
        return Batch(norm(self.obs), self.action, self.reward, norm(self.next_obs), self.discount)


class ReplayBuffer:
    """Ring buffer of `capacity` transitions fed by `num_envs` parallel env streams."""

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        act_dim: int,
        num_envs: int,
        *,
        n_step: int = 1,
        gamma: float = 0.99,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < num_envs:
            raise UnilabError(
                f"replay capacity {capacity} is smaller than one env step of {num_envs} envs",
                fix="raise algo.buffer_size to at least task.num_envs",
            )
        if n_step < 1 or num_envs < 1 or obs_dim < 1 or act_dim < 1:
            raise UnilabError(
                f"replay buffer needs positive sizes, got n_step={n_step} num_envs={num_envs} "
                f"obs_dim={obs_dim} act_dim={act_dim}"
            )
        self.capacity = capacity
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self.num_envs = num_envs
        self.n_step = n_step
        self.gamma = float(gamma)
        self.device = torch.device(device)
        f32 = {"dtype": torch.float32, "device": self.device}
        try:
            self._obs = torch.empty(capacity, obs_dim, **f32)
            self._action = torch.empty(capacity, act_dim, **f32)
            self._reward = torch.empty(capacity, **f32)
            self._next_obs = torch.empty(capacity, obs_dim, **f32)
            self._discount = torch.empty(capacity, **f32)
        except (RuntimeError, MemoryError) as exc:  # torch's out-of-memory errors are RuntimeErrors
            gib = capacity * (2 * obs_dim + act_dim + 2) * 4 / 2**30
            raise UnilabError(
                f"the replay buffer (algo.buffer_size = {capacity:,} transitions of {obs_dim} observations and "
                f"{act_dim} actions) needs {gib:,.1f} GiB on {self.device}, more than can be allocated",
                detail=str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__,
                fix=f"lower algo.buffer_size (e.g. --set algo.buffer_size={max(num_envs, capacity // 10):_})",
            ) from None
        # Pending window of raw steps: slot (head + i) % n is the i-th oldest.
        n, e = n_step, num_envs
        self._p_obs = torch.zeros(n, e, obs_dim, **f32)
        self._p_action = torch.zeros(n, e, act_dim, **f32)
        self._p_reward = torch.zeros(n, e, **f32)
        self._p_next_obs = torch.zeros(n, e, obs_dim, **f32)
        self._p_terminated = torch.zeros(n, e, dtype=torch.bool, device=self.device)
        self._p_done = torch.zeros(n, e, dtype=torch.bool, device=self.device)
        self._p_keep = torch.ones(n, e, dtype=torch.bool, device=self.device)
        self._p_all_kept = [True] * n  # host-side: lets the common case skip a row selection
        self._p_head = 0
        self._p_len = 0
        self._ptr = 0  # next storage row to write
        self._size = 0  # rows holding a transition
        self.total_added = 0  # transitions written to storage since construction (or restored)

    def __len__(self) -> int:
        return self._size

    @property
    def pending(self) -> int:
        """Env steps per env held in the n-step window, not yet sampleable."""
        return self._p_len

    @torch.no_grad()
    def add_batch(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        keep: torch.Tensor | None = None,
    ) -> None:
        """Add one env step of every env: obs/next_obs [E, obs_dim], action [E, act_dim], the rest [E].

        `keep` [E] bool (optional): False drops that env's step, e.g. a world whose physics went
        non-finite. The step is never stored and n-step windows of that env's earlier steps end
        before it, bootstrapping from the last good observation with gamma**k (as a truncation);
        its values may be NaN, they are never read. Passing `keep` costs one host read.
        """
        e = self.num_envs
        if obs.shape != (e, self.obs_dim) or next_obs.shape != (e, self.obs_dim) or action.shape != (e, self.act_dim):
            raise UnilabError(
                f"replay add_batch expects obs/next_obs ({e}, {self.obs_dim}) and action ({e}, {self.act_dim}), "
                f"got {tuple(obs.shape)}, {tuple(next_obs.shape)}, {tuple(action.shape)}"
            )
        if reward.shape != (e,) or terminated.shape != (e,) or truncated.shape != (e,):
            raise UnilabError(
                f"replay add_batch expects reward/terminated/truncated of shape ({e},), got "
                f"{tuple(reward.shape)}, {tuple(terminated.shape)}, {tuple(truncated.shape)}"
            )
        slot = (self._p_head + self._p_len) % self.n_step
        dev = self.device
        self._p_obs[slot].copy_(obs)
        self._p_action[slot].copy_(action)
        self._p_reward[slot].copy_(reward)
        self._p_next_obs[slot].copy_(next_obs)
        term = terminated.to(device=dev, dtype=torch.bool)
        self._p_terminated[slot].copy_(term)
        self._p_done[slot].copy_(term | truncated.to(device=dev, dtype=torch.bool))
        if keep is None:
            self._p_keep[slot].fill_(True)
            self._p_all_kept[slot] = True
        else:
            if keep.shape != (e,):
                raise UnilabError(f"replay add_batch expects keep of shape ({e},), got {tuple(keep.shape)}")
            self._p_keep[slot].copy_(keep.to(device=dev, dtype=torch.bool))
            self._p_all_kept[slot] = bool(self._p_keep[slot].all())
        self._p_len += 1
        if self._p_len == self.n_step:
            self._emit_oldest()

    def _emit_oldest(self) -> None:
        n, g = self.n_step, self.gamma
        h = self._p_head
        ret = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        disc = torch.ones_like(ret)
        alive = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        next_obs = self._p_next_obs[h].clone()
        terminated = self._p_terminated[h].clone()
        for i in range(n):
            s = (h + i) % n
            use = alive & self._p_keep[s]  # a dropped step ends the window before it
            ret += torch.where(use, disc * self._p_reward[s], 0.0)
            next_obs = torch.where(use[:, None], self._p_next_obs[s], next_obs)
            terminated = torch.where(use, self._p_terminated[s], terminated)
            disc = torch.where(use, disc * g, disc)
            alive = use & ~self._p_done[s]
        discount = torch.where(terminated, 0.0, disc)
        if self._p_all_kept[h]:
            self._write(self._p_obs[h], self._p_action[h], ret, next_obs, discount)
        else:
            rows = self._p_keep[h].nonzero().squeeze(1)
            sel = [t.index_select(0, rows) for t in (self._p_obs[h], self._p_action[h], ret, next_obs, discount)]
            self._write(*sel)
        self._p_head = (h + 1) % n
        self._p_len -= 1

    def _write(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        discount: torch.Tensor,
    ) -> None:
        e = obs.shape[0]
        if e == 0:
            return
        end = self._ptr + e
        if end <= self.capacity:
            rows: slice | torch.Tensor = slice(self._ptr, end)
        else:
            rows = torch.arange(self._ptr, end, device=self.device) % self.capacity
        self._obs[rows] = obs
        self._action[rows] = action
        self._reward[rows] = reward
        self._next_obs[rows] = next_obs
        self._discount[rows] = discount
        self._ptr = end % self.capacity
        self._size = min(self._size + e, self.capacity)
        self.total_added += e

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Uniform sample with replacement. `generator` must live on the buffer's device."""
        if self._size == 0:
            raise UnilabError(
                "replay buffer is empty: nothing to sample",
                detail=f"n-step transitions appear after {self.n_step} env steps",
            )
        idx = torch.randint(0, self._size, (batch_size,), device=self.device, generator=generator)
        return Batch(
            obs=self._obs.index_select(0, idx),
            action=self._action.index_select(0, idx),
            reward=self._reward.index_select(0, idx),
            next_obs=self._next_obs.index_select(0, idx),
            discount=self._discount.index_select(0, idx),
        )
