"""Categorical (C51) value distributions: the projection of a shifted target onto a fixed support.

A distributional critic predicts probabilities over `num_atoms` evenly spaced values
z_0 = v_min .. z_{K-1} = v_max. A Bellman target moves each atom to r + discount * (z_j - bonus),
which falls between atoms; each moved atom's probability is split between its two neighbours in
proportion to distance (Bellemare et al. 2017). Values beyond the support are clipped to its ends,
so the projected mass always sums to the source mass.
"""

from __future__ import annotations

import torch


def support(v_min: float, v_max: float, num_atoms: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The atom values [num_atoms], float32."""
    return torch.linspace(v_min, v_max, num_atoms, dtype=torch.float32, device=device)


def project(probs: torch.Tensor, target_values: torch.Tensor, v_min: float, v_max: float) -> torch.Tensor:
    """Project `probs` [B, K] located at `target_values` [B, K] onto the support; returns [B, K].

    Static shapes and no host reads: usable inside torch.compile and CUDA graphs.
    """
    k = probs.shape[-1]
    delta = (v_max - v_min) / (k - 1)
    # A NaN/inf value must not become a wild scatter index (a device-side fault on CUDA), yet the
    # result must stay non-finite so the learner's finite flag sees it: sanitize the index, and
    # add `poison` (NaN exactly where a value is not finite, 0 elsewhere) to the output.
    poison = target_values * 0.0
    b = torch.nan_to_num((target_values.clamp(v_min, v_max) - v_min) / delta, nan=0.0)
    lower = b.floor().clamp(0, k - 1)
    frac = b - lower  # in [0, 1]; 0 when the value hits an atom exactly
    lower_i = lower.long()
    upper_i = (lower_i + 1).clamp(max=k - 1)  # at v_max frac is 0, so nothing goes to the clamped index
    out = torch.zeros_like(probs)
    out.scatter_add_(-1, lower_i, probs * (1.0 - frac))
    out.scatter_add_(-1, upper_i, probs * frac)
    return out + poison


def expectation(logits: torch.Tensor, atoms: torch.Tensor) -> torch.Tensor:
    """Mean value of the distribution given by `logits` [..., K]."""
    return (torch.softmax(logits.float(), dim=-1) * atoms).sum(-1)
