"""Deferred finite verdict: per-world finite flags kept on the device, read on the host at an interval.

Every step the collector computes which worlds produced a non-finite action, physics state,
observation or reward (one fused device expression, no host read). Those worlds are sanitized
and reset on the device in the same step (their flag joins the done mask), so a NaN never
reaches a learner or a second step. The host learns about them only every ``interval`` steps,
when ``read`` fetches the sticky per-world flags and the count in one transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FiniteVerdict:
    """What the host learned at one interval boundary."""

    step: int  # collector step count at the read
    worlds: tuple[int, ...]  # worlds flagged non-finite at least once since the previous read
    events: int  # world-steps flagged since the previous read (a world flagged twice counts twice)

    @property
    def ok(self) -> bool:
        return self.events == 0


class FiniteMonitor:
    def __init__(self, num_envs: int, device: torch.device, interval: int) -> None:
        if interval < 1:
            raise ValueError(f"finite check interval must be >= 1 step, got {interval}")
        self.interval = interval
        self.bad = torch.zeros(num_envs, dtype=torch.bool, device=device)  # this step
        self.seen = torch.zeros(num_envs, dtype=torch.bool, device=device)  # since the last read
        self.events = torch.zeros((), dtype=torch.int64, device=device)
        self._acc = torch.zeros(num_envs, device=device)
        self._ones: dict[int, torch.Tensor] = {}
        self._zero = torch.zeros((), device=device)  # cheaper operand than the number 0.0
        self.total_events = 0  # host-side, updated at reads
        self.total_worlds = 0
        self.last: FiniteVerdict | None = None

    def record(
        self,
        actions: torch.Tensor,
        qpos: torch.Tensor,
        qvel: torch.Tensor,
        obs: torch.Tensor,
        reward: torch.Tensor,
    ) -> torch.Tensor:
        """Set ``bad`` [N] for this step and fold it into the sticky flags; returns ``bad``.

        A row sum is finite exactly when every entry is (NaN and inf propagate), unless finite
        entries overflow float32 (|x| ~ 1e38), which flags a world that has diverged anyway. The
        row sums of all five inputs accumulate in one buffer through matrix-vector products with
        ones (one op per input; BLAS propagates NaN and inf like a sum), and ``x * 0`` is NaN
        exactly when x is not finite, so ``bad`` is ``x * 0 != x * 0``: eight small ops in all,
        against about sixteen for ``isfinite(x).all(dim=1)`` per tensor (each op costs microseconds).
        """
        acc = self._acc
        torch.addmv(reward, obs, self._ones_like(obs), out=acc)
        acc.addmv_(qpos, self._ones_like(qpos))
        acc.addmv_(qvel, self._ones_like(qvel))
        acc.addmv_(actions, self._ones_like(actions))
        acc.mul_(self._zero)
        torch.ne(acc, acc, out=self.bad)
        self.seen |= self.bad
        self.events += torch.count_nonzero(self.bad)
        return self.bad

    def _ones_like(self, x: torch.Tensor) -> torch.Tensor:
        """A persistent vector of ones as long as ``x``'s rows, for the row sums."""
        ones = self._ones.get(x.shape[1])
        if ones is None or ones.dtype != x.dtype:
            ones = self._ones[x.shape[1]] = torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
        return ones

    def due(self, step: int) -> bool:
        return step % self.interval == 0

    def read(self, step: int) -> FiniteVerdict:
        """One host read of the flags gathered since the previous call; clears them."""
        packed = torch.cat((self.events.reshape(1), self.seen.to(torch.int64))).cpu()
        events = int(packed[0])
        worlds = tuple(int(i) for i in torch.nonzero(packed[1:]).flatten()) if events else ()
        self.seen.zero_()
        self.events.zero_()
        self.total_events += events
        self.total_worlds += len(worlds)
        self.last = FiniteVerdict(step, worlds, events)
        return self.last
