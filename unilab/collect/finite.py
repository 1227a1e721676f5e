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
        entries overflow float32 (|x| ~ 1e38), which flags a world that has diverged anyway. One
        sum per tensor is several times cheaper than ``isfinite(x).all(dim=1)`` on CPU.
        """
        acc = self._acc
        torch.sum(obs, dim=1, out=acc)
        acc += reward
        acc += qpos.sum(dim=1)
        acc += qvel.sum(dim=1)
        acc += actions.sum(dim=1)
        self.bad.copy_(acc.isfinite()).logical_not_()
        self.seen |= self.bad
        self.events += self.bad.sum()
        return self.bad

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
