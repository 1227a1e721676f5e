"""Working copies of a learner's networks in its compute dtype (the plan's `precision`).

A learner keeps its networks, optimizer state and losses in float32. With bfloat16 compute its
update runs the networks' forward and backward passes on copies in bfloat16: inputs, matrix
products and activations in bf16, gradients taken w.r.t. the copies' parameters and converted
into the float32 parameters' `.grad` (a copy into a float32 buffer converts). Each copy is
refreshed from its float32 network after that network's optimizer (or Polyak) step: one
conversion per step, where torch.autocast converts every weight at every call and keeps
LayerNorm and BatchNorm in float32 with conversions around them. Buffers (BatchNorm running
statistics) are shared, not copied: a forward pass of the copy advances the float32 network's
statistics, which `act` and checkpoints read.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class WorkingCopy:
    """What an update calls instead of `module`: `module` itself in float32, else a copy whose
    parameters are in `dtype` and whose buffers are `module`'s own tensors. `params` are the
    parameters gradients are taken w.r.t.; `refresh` writes `module`'s parameters into the copy
    (converting them) after they changed. Both parameter lists are built once: walking a module's
    parameters costs about a millisecond per update at the learners' call rate."""

    def __init__(self, module: nn.Module, dtype: torch.dtype) -> None:
        self.source = list(module.parameters())
        if dtype == torch.float32:
            self.module = module
        else:
            self.module = copy.deepcopy(module)
            for w, m in zip(self.module.modules(), module.modules(), strict=True):
                for name, p in m._parameters.items():
                    if p is not None:
                        w._parameters[name] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                for name, b in m._buffers.items():
                    w._buffers[name] = b
        self.params = list(self.module.parameters())
        self.module_is_copy = dtype != torch.float32

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)

    @torch.no_grad()
    def refresh(self) -> None:
        if self.module_is_copy:
            torch._foreach_copy_(self.params, self.source)
