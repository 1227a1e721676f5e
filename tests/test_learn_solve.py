"""Learning is real: SAC and FlashSAC each solve a small continuous-control task written in torch.

The task: a point on a line must reach a goal. obs = (position, goal), both start uniform in
[-1, 1]; action in [-1, 1] moves the point by 0.25 * action; reward -|position - goal| per step;
episodes are truncated after 20 steps (so the replay's truncation path is exercised). A random
policy scores about -16 per episode, standing still about -14, the optimal policy about -1.1.
The whole loop is the runtime's: normalizer, replay (n-step for FlashSAC), act, update.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from unilab.algos.flashsac.learner import FlashSacLearner
from unilab.algos.flashsac.spec import FlashSacSpec
from unilab.algos.sac.learner import SacLearner
from unilab.algos.sac.spec import SacSpec
from unilab.learn.normalizer import ObsNormalizer
from unilab.learn.replay import ReplayBuffer

HORIZON = 20


class Reach:
    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.g = torch.Generator().manual_seed(seed)
        self.x, self.goal = torch.zeros(n), torch.zeros(n)
        self.t = torch.zeros(n, dtype=torch.long)
        self._reset(torch.ones(n, dtype=torch.bool))

    def _reset(self, mask: torch.Tensor) -> None:
        k = int(mask.sum())
        self.x[mask] = torch.rand(k, generator=self.g) * 2 - 1
        self.goal[mask] = torch.rand(k, generator=self.g) * 2 - 1
        self.t[mask] = 0

    def obs(self) -> torch.Tensor:
        return torch.stack([self.x, self.goal], -1)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns (final next obs, reward, terminated, truncated) and auto-resets finished envs."""
        self.x = (self.x + 0.25 * action[:, 0].clamp(-1, 1)).clamp(-2, 2)
        self.t += 1
        reward = -(self.x - self.goal).abs()
        truncated = self.t >= HORIZON
        next_obs = self.obs()
        self._reset(truncated)
        return next_obs, reward, torch.zeros(self.n, dtype=torch.bool), truncated


def episode_return(policy: Callable[[torch.Tensor], torch.Tensor], episodes: int = 200) -> float:
    env = Reach(episodes, seed=12345)
    total = torch.zeros(episodes)
    for _ in range(HORIZON):
        total += env.step(policy(env.obs()))[1]
    return float(total.mean())


def train(learner: SacLearner | FlashSacLearner, batch_size: int, n_step: int, gamma: float, env_steps: int) -> float:
    num_envs, warmup = 8, 64
    rb = ReplayBuffer(50_000, 2, 1, num_envs, n_step=n_step, gamma=gamma)
    norm = ObsNormalizer(2)
    env = Reach(num_envs, seed=0)
    g = torch.Generator().manual_seed(0)
    obs = env.obs()
    for step in range(env_steps):
        norm.update(obs)
        if step < warmup:
            action = torch.rand(num_envs, 1, generator=g) * 2 - 1
        else:
            action = learner.act(norm.normalize(obs))
        next_obs, reward, terminated, truncated = env.step(action)
        rb.add_batch(obs, action, reward, next_obs, terminated, truncated)
        learner.observe_rewards(reward, terminated, truncated)
        obs = env.obs()
        if step >= warmup:
            m = learner.update(rb.sample(batch_size, g).normalized(norm))
    assert bool(m["critic_finite"])
    return episode_return(lambda o: learner.act(norm.normalize(o), deterministic=True))


pytestmark = pytest.mark.usefixtures("one_thread")


def test_reference_policies_bracket_the_thresholds() -> None:
    """The thresholds below are far from what not learning scores."""
    assert episode_return(lambda o: torch.rand(len(o), 1) * 2 - 1) < -12
    assert episode_return(lambda o: torch.zeros(len(o), 1)) < -12
    assert episode_return(lambda o: ((o[:, 1:] - o[:, :1]) / 0.25).clamp(-1, 1)) > -1.5


@pytest.mark.slow
def test_sac_solves_reach() -> None:
    cfg = SacSpec(name="sac", hidden_dims=(64, 64), batch_size=128, gamma=0.9)
    learner = SacLearner(2, 1, cfg, seed=0)
    assert train(learner, cfg.batch_size, 1, cfg.gamma, env_steps=700) > -5.0


@pytest.mark.slow
def test_sac_c51_layernorm_solves_reach() -> None:
    cfg = SacSpec(
        name="sac",
        hidden_dims=(64, 64),
        batch_size=128,
        gamma=0.9,
        critic="c51",
        layer_norm=True,
        num_atoms=51,
        v_min=-10.0,
        v_max=0.0,
    )
    learner = SacLearner(2, 1, cfg, seed=0)
    assert train(learner, cfg.batch_size, 1, cfg.gamma, env_steps=700) > -5.0


@pytest.mark.slow
def test_flashsac_solves_reach() -> None:
    # Paper architecture and update; small widths, and a learning rate and initial temperature
    # (the paper's 0.01) suited to a few hundred updates instead of millions.
    cfg = FlashSacSpec(
        name="flashsac",
        hidden_dims=(32,),
        batch_size=128,
        gamma=0.9,
        v_min=-5.0,
        v_max=5.0,
        updates_per_step=1.0,
        alpha_init=0.01,
        actor_lr=1e-3,
        critic_lr=1e-3,
        alpha_lr=1e-3,
    )
    learner = FlashSacLearner(2, 1, cfg, seed=0)
    assert train(learner, cfg.batch_size, cfg.n_step, cfg.gamma, env_steps=700) > -7.0
