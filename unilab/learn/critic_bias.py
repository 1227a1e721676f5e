"""The critic's bias, measured on the episodes a run actually plays.

At the first env step of each episode the learner's critic predicts Q(s0, a0) for the action the
world took (`ReplayLearner.q_estimate`); the episode then collects the discounted return
G0 = sum_k gamma^k r_k to its end. Over the episodes completed between two logs, the mean of Q
minus the mean of G0 is the critic's bias: it grows when the critic over-estimates (the usual
failure of a bootstrapped critic, which a policy then exploits, e.g. by standing for a value it
never collects).

What it is not: G0 follows the behaviour policy (exploration noise included) and SAC's soft Q
also counts the entropy bonus it expects, so even a perfect critic shows a small offset; read
the trend, not the level. A time-out cuts G0 short of the infinite sum the critic estimates, but
the G1 tasks' episodes are 20 s (1000 env steps at 50 Hz): the missing tail is weighted
gamma^1000 < 5e-5 for gamma <= 0.99, negligible.

Everything stays on the device: the per-world accumulators are updated with a few fixed-shape ops
per env step; `read` is the one host read, at the log interval.
"""

from __future__ import annotations

import torch


class StartValueBias:
    """Per world: Q(s0, a0) of its current episode, the discounted return so far and gamma^k."""

    def __init__(self, num_envs: int, gamma: float, device: torch.device | str = "cpu") -> None:
        n, dev = num_envs, torch.device(device)
        self.gamma = float(gamma)
        self.q_start = torch.zeros(n, device=dev)
        self.ret = torch.zeros(n, device=dev)
        self.discount = torch.ones(n, device=dev)
        # Whether the world's episode began with a measured Q (every episode the driver starts).
        self.measured = torch.zeros(n, dtype=torch.bool, device=dev)
        self._counted = torch.zeros(n, dtype=torch.bool, device=dev)
        self._totals = torch.zeros(3, device=dev)  # [episodes, sum of Q(s0, a0), sum of G0]
        self._row = torch.zeros(3, device=dev)

    def start(self, rows: torch.Tensor, q: torch.Tensor) -> None:
        """Episodes begin now in worlds `rows` [k] (indices on the device), with Q(s0, a0) `q` [k]."""
        self.q_start.index_copy_(0, rows, q.to(self.q_start.dtype))
        self.ret.index_fill_(0, rows, 0.0)
        self.discount.index_fill_(0, rows, 1.0)
        self.measured.index_fill_(0, rows, True)

    def step(self, reward: torch.Tensor, ended: torch.Tensor | None, dropped: torch.Tensor | None = None) -> None:
        """One env step: `reward` [N], the raw rewards (as the replay stores them); `ended` [N] bool,
        the worlds whose episode ended with this step, or None when none did (the caller knows on
        the host: it skips the totals); `dropped` [N] bool, ended worlds to leave out (non-finite)."""
        self.ret.addcmul_(self.discount, reward)
        self.discount.mul_(self.gamma)
        if ended is None:
            return
        counted = torch.logical_and(ended, self.measured, out=self._counted)
        if dropped is not None:
            counted &= ~dropped
        w = counted.to(self.ret.dtype)
        row = self._row
        row[0] = w.sum()
        row[1] = (self.q_start * w).sum()
        row[2] = (self.ret * w).sum()
        self._totals += row
        self.measured &= ~ended

    def read(self) -> dict[str, float]:
        """Means over the episodes completed since the previous read (one host read; clears them):
        `q_start`, `mc_return_start` and `q_bias` = their difference; empty when none completed."""
        count, q, g = self._totals.cpu().tolist()
        self._totals.zero_()
        if count == 0:
            return {}
        return {"q_start": q / count, "mc_return_start": g / count, "q_bias": (q - g) / count}
