"""The tanh-squashed Gaussian policy distribution of SAC, sampled with caller-provided noise.

Noise comes in as a tensor drawn by the learner's own generator, outside any compiled or captured
region: the sampling function stays pure, and a restored generator state replays the same noise.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

_LOG2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def sample(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Action tanh(mean + std * noise) and its log-probability summed over action dims.

    The action lies in [-1, 1]: float32 tanh rounds to exactly +-1 once |u| > ~9.
    """
    mean = mean.float()
    log_std = log_std.float()
    u = mean + log_std.exp() * noise
    gauss = -0.5 * noise.square() - log_std - _HALF_LOG_2PI
    # log(1 - tanh(u)^2) written so it stays finite for large |u|.
    log_det = 2.0 * (_LOG2 - u - F.softplus(-2.0 * u))
    return torch.tanh(u), (gauss - log_det).sum(-1)


def gaussian_entropy_target(act_dim: int, std: float) -> float:
    """Entropy of a diagonal Gaussian with standard deviation `std` in every one of `act_dim` dims."""
    return 0.5 * act_dim * math.log(2.0 * math.pi * math.e * std * std)


class MeanAction(nn.Module):
    """The deterministic policy of a Gaussian actor: tanh of its mean, in [-1, 1]."""

    def __init__(self, actor: nn.Module, *args: object) -> None:
        super().__init__()
        self.actor = actor
        self.args = args  # FlashSAC's actor takes its train flag

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.actor(obs, *self.args)[0])
