"""Running mean/std observation normalizer, shared by collector inference and the learner.

Statistics are merged batch by batch with the parallel (Chan et al.) update in float64, so that a
million small batches do not drift the way a float32 Welford sum would. `normalize` uses float32
copies of mean and 1/std that are refreshed after each update, so inference pays no float64 cost.
Normalized values are clipped to +-`clip` (10 by default): one wild observation cannot saturate a
network. Everything stays on the normalizer's device and nothing reads a value back to the host,
so an update can sit inside a captured CUDA graph.
"""

from __future__ import annotations

import torch

from unilab.errors import UnilabError


class ObsNormalizer:
    """Per-feature running mean and variance of observations; `normalize` maps to about N(0, 1)."""

    def __init__(self, dim: int, device: torch.device | str = "cpu", *, clip: float = 10.0, eps: float = 1e-8) -> None:
        if dim < 1:
            raise UnilabError(f"observation normalizer needs a positive dimension, got {dim}")
        self.dim = dim
        self.device = torch.device(device)
        self.clip = float(clip)
        self.eps = float(eps)
        self.mean = torch.zeros(dim, dtype=torch.float64, device=self.device)
        self.var = torch.ones(dim, dtype=torch.float64, device=self.device)
        # A tensor, not a Python int, so that update never syncs with the host.
        self.count = torch.zeros((), dtype=torch.float64, device=self.device)
        self._mean32 = torch.zeros(dim, dtype=torch.float32, device=self.device)
        self._inv_std32 = torch.ones(dim, dtype=torch.float32, device=self.device)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch `x` of shape [..., dim] into the running statistics."""
        if x.shape[-1] != self.dim:
            raise UnilabError(f"observation normalizer expects last dimension {self.dim}, got shape {tuple(x.shape)}")
        xb = x.reshape(-1, self.dim).to(device=self.device, dtype=torch.float64)
        n = xb.shape[0]
        if n == 0:
            return
        b_mean = xb.mean(dim=0)
        b_m2 = ((xb - b_mean) ** 2).sum(dim=0)
        total = self.count + n
        delta = b_mean - self.mean
        new_mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + b_m2 + delta.square() * (self.count * n / total)
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)  # population variance, as numpy's default
        self.count.copy_(total)
        self._refresh()

    def _refresh(self) -> None:
        self._mean32.copy_(self.mean)
        self._inv_std32.copy_(torch.rsqrt(self.var + self.eps))

    @property
    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var + self.eps)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std, clipped to +-clip, in float32, on the normalizer's device (a GPU learner
        normalizes the CPU collector's observations). Before any update it returns x clipped."""
        y = (x.to(device=self.device, dtype=torch.float32) - self._mean32) * self._inv_std32
        return y.clamp_(-self.clip, self.clip)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        mean = state["mean"]
        if tuple(mean.shape) != (self.dim,):
            raise UnilabError(
                f"observation normalizer checkpoint has dimension {tuple(mean.shape)}, this run uses ({self.dim},)",
                fix="resume with the same task (observation layout) that wrote the checkpoint",
            )
        self.mean.copy_(mean)
        self.var.copy_(state["var"])
        self.count.copy_(state["count"])
        self._refresh()
