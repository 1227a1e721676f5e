"""Data-parallel gradient averaging between a learner's `*_grads` and its `*_step`.

Wire layout. For each optimizer group (`learner.optim_groups()`), built once: every gradient is
assigned a wire dtype and a slot in a preallocated flat buffer of that dtype; buffers are split
into buckets of at most `bucket_bytes` (a tensor is never split; one larger than a bucket gets a
bucket of its own). With the `float32` wire every tensor travels in its own dtype. With the
`bfloat16` wire, FP32 gradients of at least `bf16_min_elements` (1024) elements travel as BF16;
smaller ones and non-FP32 ones keep their dtype. The first FP32 bucket of each group starts with
one extra element, the loss-validity sentinel, so it always exists and always travels in FP32.

One `sync(name, ok)`:
1. pack the gradients (a `.grad` of None is allocated as zeros, so shapes never change);
2. local verdict = `ok` and every packed value finite; where it is false the whole local payload
   is zeroed, so a NaN on one rank cannot reach the others and every rank gets a finite average;
3. sentinel = 1.0 where the local verdict holds, else 0.0;
4. all-reduce every bucket with SUM;
5. global verdict = summed sentinel == world size (every rank valid);
6. restore to at least FP32 (BF16 -> FP32 copy), divide by world size there, copy into `.grad`.

Parameters and optimizer state are never touched: the learner's masked `*_step(global_ok)` then
steps, or skips, identically on every rank. Nothing in `sync` reads a tensor on the host (no
`.item()`, no branch on values), so it can be captured in a CUDA graph with the collectives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.distributed as dist

from unilab.errors import UnilabError
from unilab.plan.models import BF16_MIN_GROUP_ELEMENTS, WirePlan

WireDtype = Literal["float32", "bfloat16"]
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024  # as torch DDP: large enough to amortise launch cost, small enough to pipeline
_SENTINEL = 1  # elements reserved at the head of each group's first FP32 bucket


@dataclass
class SyncCounters:
    """Per optimizer group. `wire_bytes_per_sync` is this rank's all-reduce payload (sentinel included)."""

    wire_bytes_per_sync: int
    tensors: int
    buckets: int
    syncs: int = 0
    seconds: float = 0.0  # host wall time in `sync` (perf_counter); on CUDA mostly launch time

    @property
    def wire_bytes_total(self) -> int:
        return self.syncs * self.wire_bytes_per_sync


@dataclass
class _Bucket:
    buf: torch.Tensor  # flat, wire dtype
    work: torch.Tensor  # where the average is computed: `buf` itself, or an FP32 copy of a narrower wire
    params: list[torch.Tensor] = field(default_factory=list)
    wire_views: list[torch.Tensor] = field(default_factory=list)  # into buf, shaped like the params
    work_views: list[torch.Tensor] = field(default_factory=list)  # into work, shaped like the params


@dataclass
class _Group:
    params: list[torch.Tensor]
    buckets: list[_Bucket]
    sentinel: torch.Tensor  # 1-element view at the head of the first FP32 bucket
    wire_dtypes: list[torch.dtype]  # per param, in the group's order


class GradSync:
    """All-reduce-average the gradients of each optimizer group, with a loss-validity sentinel."""

    def __init__(
        self,
        groups: dict[str, list[torch.Tensor]],
        wire_dtype: WireDtype = "float32",
        process_group: dist.ProcessGroup | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        *,
        bf16_min_elements: int = BF16_MIN_GROUP_ELEMENTS,
    ) -> None:
        if wire_dtype not in ("float32", "bfloat16"):
            raise UnilabError(
                f"unknown gradient wire dtype {wire_dtype!r}",
                fix='set training.dp_gradient_wire_dtype to "float32" or "bfloat16"',
            )
        if bucket_bytes < 1:
            raise UnilabError(f"gradient bucket size must be positive, got {bucket_bytes} bytes")
        if not (dist.is_available() and dist.is_initialized()):
            raise UnilabError(
                "gradient sync needs an initialized torch.distributed process group",
                detail="GradSync all-reduces across ranks; build it only where the plan's gradient_wire is active.",
                fix="call torch.distributed.init_process_group before building GradSync (unilab apply does)",
            )
        self.wire_dtype: WireDtype = wire_dtype
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.bucket_bytes = int(bucket_bytes)
        self.bf16_min_elements = int(bf16_min_elements)
        self._groups = {name: self._layout(name, list(params)) for name, params in groups.items()}
        self.counters = {
            name: SyncCounters(
                wire_bytes_per_sync=sum(b.buf.numel() * b.buf.element_size() for b in g.buckets),
                tensors=len(g.params),
                buckets=len(g.buckets),
            )
            for name, g in self._groups.items()
        }

    @classmethod
    def from_plan(
        cls,
        groups: dict[str, list[torch.Tensor]],
        wire: WirePlan,
        process_group: dist.ProcessGroup | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> GradSync:
        """Built from the plan's `gradient_wire` section (dtype and BF16 threshold)."""
        return cls(groups, wire.dtype, process_group, bucket_bytes, bf16_min_elements=wire.bf16_min_group_elements)

    # ------------------------------------------------------------------ layout (once)
    def _wire_dtype_for(self, p: torch.Tensor) -> torch.dtype:
        narrow = self.wire_dtype == "bfloat16" and p.dtype == torch.float32 and p.numel() >= self.bf16_min_elements
        return torch.bfloat16 if narrow else p.dtype

    def _layout(self, name: str, params: list[torch.Tensor]) -> _Group:
        if not params:
            raise UnilabError(f"optimizer group {name!r} has no parameters to synchronise")
        device = params[0].device
        for p in params:
            if not p.is_floating_point():
                raise UnilabError(f"optimizer group {name!r} holds a {p.dtype} tensor; gradients must be floating")
            if p.device != device:
                raise UnilabError(f"optimizer group {name!r} spans devices {device} and {p.device}; use one per group")
        wire_dtypes = [self._wire_dtype_for(p) for p in params]
        # Plan slots per wire dtype, first-seen order; FP32 always present for the sentinel.
        order = [torch.float32, *dict.fromkeys(d for d in wire_dtypes if d != torch.float32)]
        planned: list[tuple[torch.dtype, int, list[tuple[int, int]]]] = []  # (dtype, numel, [(param idx, offset)])
        for dtype in order:
            cap = max(1, self.bucket_bytes // torch.empty((), dtype=dtype).element_size())
            used = _SENTINEL if dtype == torch.float32 else 0
            slots: list[tuple[int, int]] = []
            for i, p in enumerate(params):
                if wire_dtypes[i] != dtype:
                    continue
                if slots and used + p.numel() > cap:
                    planned.append((dtype, used, slots))
                    used, slots = 0, []
                slots.append((i, used))
                used += p.numel()
            if used:
                planned.append((dtype, used, slots))
        buckets: list[_Bucket] = []
        for dtype, numel, slots in planned:
            buf = torch.zeros(numel, dtype=dtype, device=device)
            # Average in at least FP32: a BF16 (or FP16) wire is restored into an FP32 copy first.
            work_dtype = torch.promote_types(dtype, torch.float32)
            work = buf if work_dtype == dtype else torch.zeros(numel, dtype=work_dtype, device=device)
            b = _Bucket(buf, work)
            for i, off in slots:
                p = params[i]
                b.params.append(p)
                b.wire_views.append(buf[off : off + p.numel()].view(p.shape))
                b.work_views.append(work[off : off + p.numel()].view(p.shape))
            buckets.append(b)
        return _Group(params, buckets, buckets[0].buf[:_SENTINEL], wire_dtypes)

    # ------------------------------------------------------------------ introspection
    def wire_dtypes(self, name: str) -> list[torch.dtype]:
        """The dtype each of the group's gradients travels in, in the group's parameter order."""
        return list(self._group(name).wire_dtypes)

    def summary(self) -> dict[str, dict[str, object]]:
        """Counters and layout per group, JSON-ready (for the manifest)."""
        return {
            name: {
                "wire_dtype": self.wire_dtype,
                "world_size": self.world_size,
                "tensors": c.tensors,
                "buckets": c.buckets,
                "bf16_tensors": sum(d == torch.bfloat16 for d in self._groups[name].wire_dtypes),
                "syncs": c.syncs,
                "wire_bytes_per_sync": c.wire_bytes_per_sync,
                "wire_bytes_total": c.wire_bytes_total,
                "seconds": c.seconds,
            }
            for name, c in self.counters.items()
        }

    def _group(self, name: str) -> _Group:
        g = self._groups.get(name)
        if g is None:
            raise UnilabError(f"no optimizer group {name!r} in this gradient sync (groups: {', '.join(self._groups)})")
        return g

    # ------------------------------------------------------------------ the sync
    @torch.no_grad()
    def sync(self, name: str, ok: torch.Tensor) -> torch.Tensor:
        """Average group `name`'s gradients over ranks in place; return the global verdict (0-dim bool).

        `ok` is this rank's loss-validity flag (0-dim bool tensor). The verdict is true only if every
        rank's `ok` was true and its packed gradients were finite. The counters are host-side: a CUDA
        graph replay of a captured `sync` does not advance them.
        """
        t0 = time.perf_counter()
        g = self._group(name)
        for p in g.params:
            if p.grad is None:  # host-side attribute check: counts as zeros, allocated once
                p.grad = torch.zeros_like(p)
        local_ok = ok.to(device=g.sentinel.device, dtype=torch.bool).reshape(())
        g.sentinel.copy_(local_ok)  # 1.0 / 0.0; zeroed below too if a packed gradient is not finite
        for b in g.buckets:
            torch._foreach_copy_(b.wire_views, [p.grad for p in b.params])
            local_ok = local_ok & torch.isfinite(b.buf).all()
        bad = ~local_ok
        for b in g.buckets:
            b.buf.masked_fill_(bad, 0)  # an invalid rank contributes nothing (and no NaN) to the sum
        for b in g.buckets:
            dist.all_reduce(b.buf, op=dist.ReduceOp.SUM, group=self.process_group)
        # Integers up to 2**24 are exact in FP32; half a unit of margin makes the test robust anyway.
        global_ok = g.sentinel[0] > self.world_size - 0.5
        for b in g.buckets:
            if b.work is not b.buf:
                b.work.copy_(b.buf)  # restore BF16 -> FP32 before dividing
            b.work.div_(self.world_size)
            torch._foreach_copy_([p.grad for p in b.params], b.work_views)
        c = self.counters[name]
        c.syncs += 1
        c.seconds += time.perf_counter() - t0
        return global_ok
