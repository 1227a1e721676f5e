"""rsl-rl's `VecEnv` over a rank's collector channel, so rsl-rl's on-policy runner steps unilab's
collector process exactly as the off-policy loop does: one sync per `step` (K = 1).

- Observations come back as a TensorDict: the group "policy" holds the actor's columns, all of the
  observation unless the task keeps privileged observations for the critic
  (`task.privileged_observations`, `actor_cols`); then the group "critic" holds the whole
  observation. The runner's `obs_groups` (`unilab.algos.ppo.runner.obs_groups`) give the actor
  "policy" and the critic "critic" where it exists, "policy" otherwise.
- Actions: rsl-rl's Gaussian policy samples unbounded actions. They are clipped to [-1, 1] (the
  collector's normalized action range) before they reach the collector; PPO keeps the unclipped
  sample for its log-probabilities, the usual treatment of a clipped Gaussian.
- `step` returns the post-reset observation for worlds that ended (what the channel's obs slot
  holds), `dones = terminated | truncated`, and `extras["time_outs"] = truncated` so PPO
  bootstraps time-limit ends from V(s_t).
- A world the collector flags non-finite has already been reset, its reward zeroed and reported
  truncated: in the rollout it is a neutral time-limit end that carries nothing of the broken
  step. It is counted in `transitions_nonfinite`, not as stored.
- `episode_length_buf` mirrors the collector's episode counters for rsl-rl; writing it (rsl-rl's
  `init_at_random_ep_len`) does not change the collector's episodes, so unilab never asks for that.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from unilab.algos.ppo.runner import CRITIC_GROUP, POLICY_GROUP
from unilab.collect import channel as ch
from unilab.collect.collector_client import CollectorClient


class RolloutStopped(Exception):
    """A stop was requested while waiting for the collector; the rollout in progress is abandoned."""


class CollectorVecEnv(VecEnv):
    def __init__(
        self,
        collector: CollectorClient,
        hello: ch.Hello,
        max_episode_length: int,
        should_stop: Callable[[], bool],
        cfg: dict[str, Any] | None = None,
        actor_cols: Sequence[int] | None = None,
    ) -> None:
        """`collector` must already have published its first observation (the caller waited for
        it). `should_stop` is polled while waiting for each step; when it turns true `step` raises
        `RolloutStopped`. `actor_cols`: the observation's columns the actor reads
        (`unilab.algos.columns.actor_columns`; None: all, and no "critic" group)."""
        self.collector, self.bufs = collector, hello.buffers
        self.num_envs = hello.num_envs
        self.num_actions = hello.act_dim
        self.num_obs = hello.obs_dim
        self.max_episode_length = max_episode_length
        self.device = "cpu"  # the channel's shared-memory tensors; the runner moves data to the learner
        self.cfg = cfg or {}
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self.should_stop = should_stop
        self.t = 0  # syncs this session: the collector's obs slot index
        self.wait_s = 0.0
        self.transitions_nonfinite = 0
        self.actor_cols = (
            torch.tensor(list(actor_cols), dtype=torch.long, device=self.bufs.obs.device)
            if actor_cols is not None
            else None
        )

    def _obs(self) -> TensorDict:
        # Copies: the slot is rewritten two syncs later, after rsl-rl may still hold this TensorDict.
        obs = self.bufs.obs[self.t % 2]
        if self.actor_cols is None:
            return TensorDict({POLICY_GROUP: obs.clone()}, batch_size=[self.num_envs])
        groups = {POLICY_GROUP: obs.index_select(1, self.actor_cols), CRITIC_GROUP: obs.clone()}
        return TensorDict(groups, batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        return self._obs()

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        b = self.bufs
        b.action.copy_(actions.detach().to("cpu").clamp(-1.0, 1.0))
        self.collector.post_action()
        t0 = time.perf_counter()
        if not self.collector.wait_obs(self.should_stop):
            raise RolloutStopped
        self.wait_s += time.perf_counter() - t0
        self.t += 1
        rewards = b.reward.clone()
        terminated, truncated = b.terminated.clone(), b.truncated.clone()
        if bool(b.nonfinite.any()):
            self.transitions_nonfinite += int(b.nonfinite.sum())
        done = terminated | truncated
        self.episode_length_buf += 1
        self.episode_length_buf.masked_fill_(done, 0)
        return self._obs(), rewards, done.to(torch.long), {"time_outs": truncated}
