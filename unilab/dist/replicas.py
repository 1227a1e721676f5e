"""Keep the learner replicas identical: broadcast the initial state, digest it for the manifest.

Data parallelism is only correct if every rank starts from the same parameters and applies the
same averaged update; `broadcast_parameters` does the first at start, `param_digest` lets the
manifest show (and a test check) that the ranks still agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn

from unilab.errors import UnilabError

TensorSource = nn.Module | torch.Tensor


def _tensors(modules_or_tensors: Iterable[TensorSource]) -> list[torch.Tensor]:
    """Parameters then buffers of each module (state_dict order), or the tensor itself; each tensor once."""
    out: list[torch.Tensor] = []
    seen: set[int] = set()
    for item in modules_or_tensors:
        if isinstance(item, nn.Module):
            found = [*item.parameters(), *item.buffers()]
        elif isinstance(item, torch.Tensor):
            found = [item]
        else:
            raise UnilabError(f"expected torch modules or tensors, got {type(item).__name__}")
        for t in found:
            if id(t) not in seen:  # tied weights are one tensor
                seen.add(id(t))
                out.append(t)
    return out


@torch.no_grad()
def broadcast_parameters(
    modules_or_tensors: Iterable[TensorSource], src: int = 0, process_group: dist.ProcessGroup | None = None
) -> int:
    """Overwrite every parameter and buffer with rank `src`'s (a global rank); returns the tensor count.

    Pass everything whose value must agree across ranks: actor, critic, target critic, log_alpha.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise UnilabError(
            "broadcasting parameters needs an initialized torch.distributed process group",
            fix="call torch.distributed.init_process_group first (unilab apply does)",
        )
    tensors = _tensors(modules_or_tensors)
    for t in tensors:
        dst = t.detach()
        if dst.is_contiguous():
            dist.broadcast(dst, src=src, group=process_group)
        else:
            tmp = dst.contiguous()
            dist.broadcast(tmp, src=src, group=process_group)
            dst.copy_(tmp)
    return len(tensors)


@torch.no_grad()
def param_digest(modules_or_tensors: Iterable[TensorSource]) -> str:
    """`sha256:<hex>` over dtype, shape and raw bytes of every tensor, in order: equal iff bitwise equal."""
    h = hashlib.sha256()
    for t in _tensors(modules_or_tensors):
        h.update(f"{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{h.hexdigest()}"
