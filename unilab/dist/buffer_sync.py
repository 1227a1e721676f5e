"""Average the floating-point buffers of learner replicas (BatchNorm running statistics) across ranks.

Gradients are averaged by `GradSync`, but buffers that a forward pass advances from rank-local data
(FlashSAC's BatchNorm `running_mean` / `running_var`, in the online and the target critic and the
actor) drift apart between ranks. `BufferSync.sync()` replaces each with the mean over ranks, so the
replicas stay identical. Call it after each update: for FlashSAC at width 256 that is about 107 kB,
small next to its gradients.

The running mean averages exactly (the EMA is linear in the batch means). The running variance
becomes the mean of the per-rank variance EMAs, which leaves out the spread of the batch means
between ranks: an approximation (torch DDP instead broadcasts rank 0's buffers, which drops the
other ranks' data entirely).

A rank whose buffers are not finite (a non-finite batch went through a BatchNorm in train mode)
contributes nothing. Every rank takes the mean of the valid ranks, so the invalid rank is repaired.
If no rank is valid, every rank keeps its own values. As in `GradSync`, there is no host sync.
Integer buffers (e.g. torch BatchNorm's `num_batches_tracked`) advance identically on every rank
and are left alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn

from unilab.errors import UnilabError


class BufferSync:
    """Average the floating buffers of `modules` over ranks: one FP32 all-reduce into a flat buffer."""

    def __init__(self, modules: Iterable[nn.Module], process_group: dist.ProcessGroup | None = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise UnilabError(
                "buffer sync needs an initialized torch.distributed process group",
                fix="call torch.distributed.init_process_group first (unilab apply does)",
            )
        seen: set[int] = set()
        self.buffers: list[torch.Tensor] = []
        for m in modules:
            for b in m.buffers():
                if b.is_floating_point() and id(b) not in seen:
                    seen.add(id(b))
                    self.buffers.append(b)
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.syncs = 0
        self.seconds = 0.0
        if not self.buffers:
            self.flat = None
            return
        n = sum(b.numel() for b in self.buffers)
        # Averaged in FP32 (BatchNorm statistics are FP32); the last element counts the valid ranks.
        self.flat = torch.zeros(n + 1, dtype=torch.float32, device=self.buffers[0].device)
        self.views = self._views_of(self.flat)
        self.count = self.flat[n:]

    @property
    def wire_bytes_per_sync(self) -> int:
        return 0 if self.flat is None else self.flat.numel() * 4

    @torch.no_grad()
    def sync(self) -> None:
        """Replace every floating buffer with its mean over the ranks whose buffers are finite."""
        if self.flat is None:
            return
        t0 = time.perf_counter()
        torch._foreach_copy_(self.views, self.buffers)
        self.count.fill_(1.0)
        valid = torch.isfinite(self.flat).all()
        self.flat.masked_fill_(~valid, 0.0)
        dist.all_reduce(self.flat, op=dist.ReduceOp.SUM, group=self.process_group)
        count = self.count.clone()
        mean = self.flat / count.clamp(min=1.0)
        keep = count < 0.5  # no valid rank anywhere: leave each rank's buffers as they are
        merged = [torch.where(keep, b, v) for b, v in zip(self.buffers, self._views_of(mean), strict=True)]
        torch._foreach_copy_(self.buffers, merged)
        self.syncs += 1
        self.seconds += time.perf_counter() - t0

    def _views_of(self, flat: torch.Tensor) -> list[torch.Tensor]:
        out, off = [], 0
        for b in self.buffers:
            out.append(flat[off : off + b.numel()].view(b.shape))
            off += b.numel()
        return out
