"""Mirror-symmetry augmentation of replay batches (`algo.mirror_augmentation`): half of each batch
is sampled, the other half is its mirror image (`unilab.tasks.mirror.Mirror`, the task's
left-right reflection of observations and actions). A mirrored transition is one the task could
have produced, with the same reward and discount, so the learner sees both sides of every gait
at the cost of one batch (holosoma's FastSAC G1 trains with mirrored batches by default)."""

from __future__ import annotations

import torch

from unilab.learn.replay import Batch
from unilab.tasks.mirror import Mirror


class BatchMirror:
    def __init__(self, mirror: Mirror, device: torch.device | str) -> None:
        self.obs_index = torch.tensor(mirror.obs_index, dtype=torch.long, device=device)
        self.obs_sign = torch.tensor(mirror.obs_sign, dtype=torch.float32, device=device)
        self.act_index = torch.tensor(mirror.act_index, dtype=torch.long, device=device)
        self.act_sign = torch.tensor(mirror.act_sign, dtype=torch.float32, device=device)

    def obs(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(-1, self.obs_index).mul_(self.obs_sign)

    def action(self, a: torch.Tensor) -> torch.Tensor:
        return a.index_select(-1, self.act_index).mul_(self.act_sign)

    @staticmethod
    def sampled(batch_size: int) -> int:
        """Transitions to sample for a batch of ``batch_size`` (the rest are their mirror images)."""
        return (batch_size + 1) // 2

    def augment(self, half: Batch, batch_size: int) -> Batch:
        """``half`` followed by its mirror image, cut to ``batch_size`` rows (an odd batch size
        leaves out the last mirrored row)."""
        b = batch_size
        return Batch(
            torch.cat([half.obs, self.obs(half.obs)])[:b],
            torch.cat([half.action, self.action(half.action)])[:b],
            torch.cat([half.reward, half.reward])[:b],
            torch.cat([half.next_obs, self.obs(half.next_obs)])[:b],
            torch.cat([half.discount, half.discount])[:b],
        )
