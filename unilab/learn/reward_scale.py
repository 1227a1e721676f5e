"""Adaptive reward scaling (FlashSAC): divide rewards so discounted returns fit the critic's support.

Each env's running discounted return G <- gamma * G + r is tracked as steps arrive (reset after an
episode ends). Rewards are divided by max(std(G), max|G| / g_max): the first term gives returns
about unit scale, the second keeps the largest return seen within +-g_max, the edge of the
distributional critic's support. Scaling is linear, so it applies to an n-step discounted reward
sum as well. All state is on the device; `scale` is a tensor and nothing syncs with the host.
Data parallel: each rank keeps its own statistics (a later layer may all-reduce `g_abs_max`).
"""

from __future__ import annotations

import torch

from unilab.learn.normalizer import ObsNormalizer


class RewardScaler:
    def __init__(self, gamma: float, g_max: float, device: torch.device | str = "cpu", eps: float = 1e-8) -> None:
        self.gamma = float(gamma)
        self.g_max = float(g_max)
        self.eps = float(eps)
        self.device = torch.device(device)
        self.returns = torch.zeros(0, dtype=torch.float32, device=self.device)  # per env, sized on first use
        self.g_abs_max = torch.zeros((), dtype=torch.float32, device=self.device)
        self.stats = ObsNormalizer(1, self.device)

    @torch.no_grad()
    def observe(self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor) -> None:
        """One env step of every env: reward, terminated, truncated all [num_envs]."""
        r = reward.to(self.device, torch.float32)
        if self.returns.shape != r.shape:
            self.returns = torch.zeros_like(r)
        # A non-finite reward (a world whose physics blew up) must not poison the scale forever:
        # it counts as 0 and that env's running return restarts.
        finite = torch.isfinite(r)
        self.returns.mul_(self.gamma).add_(torch.where(finite, r, 0.0))
        torch.maximum(self.g_abs_max, self.returns.abs().max(), out=self.g_abs_max)
        self.stats.update(self.returns[:, None])
        done = terminated.to(self.device, torch.bool) | truncated.to(self.device, torch.bool) | ~finite
        self.returns.masked_fill_(done, 0.0)

    def scale(self) -> torch.Tensor:
        """Multiplier for rewards (0-dim tensor); 1 before any observation."""
        std = torch.sqrt(self.stats.var[0].to(torch.float32) + self.eps)
        return 1.0 / torch.maximum(std, self.g_abs_max / self.g_max)

    def state_dict(self) -> dict[str, object]:
        return {"returns": self.returns.clone(), "g_abs_max": self.g_abs_max.clone(), "stats": self.stats.state_dict()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.returns = state["returns"].to(self.device).clone()  # type: ignore[attr-defined]
        self.g_abs_max.copy_(state["g_abs_max"])  # type: ignore[arg-type]
        self.stats.load_state_dict(state["stats"])  # type: ignore[arg-type]
