"""Adam whose step can be skipped by a device-side flag, plus gradient helpers the learners share.

A learner computes gradients, a data-parallel layer may all-reduce them, and then every rank must
either take the step or skip it the same way when some rank's loss was non-finite. Deciding that
in Python would need `.item()` (a host sync, and impossible inside a CUDA graph). `MaskedAdam.step`
takes the verdict as a 0-dim tensor instead: with `ok` false, parameters, moments and the step
count are left exactly as they were; with `ok` true it is plain Adam (Kingma & Ba, no weight
decay). The step is torch's fused Adam kernel (`torch._fused_adam_`, what `torch.optim.Adam(fused=True)`
runs), one pass over parameters, gradients and moments, given the verdict through its `found_inf`
argument: the kernel leaves every tensor untouched where it is 1, which is how torch's own
GradScaler skips a step. On a 2-core Xeon the foreach version it replaced took 17 of a SAC update's
57 ms at FastSAC's sizes; the kernel takes about 1.3 ms per million parameters (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class MaskedAdam:
    """Adam over `params` with a skip-on-flag step; `state_dict` round-trips bitwise."""

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = list(params)
        self.lr = float(lr)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps = float(eps)
        dev = self.params[0].device
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.step_count = torch.zeros((), dtype=torch.float32, device=dev)
        for p in self.params:
            # Gradients live in fixed buffers (written by copy) so that their addresses never change.
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    @torch.no_grad()
    def step(self, ok: torch.Tensor) -> None:
        """One Adam step where `ok` (0-dim bool) is true; an exact no-op where it is false."""
        self.step_count.add_(ok.to(torch.float32))
        torch._fused_adam_(
            self.params,
            [p.grad for p in self.params],
            self.exp_avg,
            self.exp_avg_sq,
            [],
            [self.step_count] * len(self.params),  # read-only in the kernel: one counter serves all
            lr=self.lr,
            beta1=self.beta1,
            beta2=self.beta2,
            weight_decay=0.0,
            eps=self.eps,
            amsgrad=False,
            maximize=False,
            grad_scale=None,
            found_inf=(~ok).to(torch.float32),
        )

    def state_dict(self) -> dict[str, object]:
        return {
            "exp_avg": [t.clone() for t in self.exp_avg],
            "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
            "step": self.step_count.clone(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        torch._foreach_copy_(self.exp_avg, state["exp_avg"])  # type: ignore[arg-type]
        torch._foreach_copy_(self.exp_avg_sq, state["exp_avg_sq"])  # type: ignore[arg-type]
        self.step_count.copy_(state["step"])  # type: ignore[arg-type]


def set_grads(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None]) -> None:
    """Copy freshly computed gradients into the parameters' fixed `.grad` buffers (None: zero); a
    copy converts, so bfloat16 gradients of a working copy land as float32."""
    if all(g is not None for g in grads):
        torch._foreach_copy_([p.grad for p in params], list(grads))  # type: ignore[misc, arg-type]
        return
    for p, g in zip(params, grads, strict=True):
        if g is None:
            p.grad.zero_()  # type: ignore[union-attr]
        else:
            p.grad.copy_(g)  # type: ignore[union-attr]


def grad_norm_and_clip(params: Sequence[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """Total L2 norm of the gradients (a tensor); scale them down to `max_norm` when given."""
    grads = [p.grad for p in params]
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))  # type: ignore[arg-type]
    if max_norm is not None:
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, coef)  # type: ignore[arg-type]
    return norm


@torch.no_grad()
def polyak_(target: Sequence[torch.Tensor], online: Sequence[torch.Tensor], tau: float, ok: torch.Tensor) -> None:
    """target <- target + tau * (online - target) where `ok`; unchanged otherwise.

    One `lerp_` per tensor with a 0-dim tensor weight: `torch._foreach_lerp_` has no overload for
    one tensor weight (it would read it on the host: a sync on CUDA, illegal in a graph capture).
    With weight 0 lerp returns its start exactly; the online values are finite then, because a
    skipped step left them as they were."""
    weight = tau * ok.to(torch.float32)
    for t, o in zip(target, online, strict=True):
        t.lerp_(o, weight)


GradSyncFn = Callable[[str, torch.Tensor], torch.Tensor]


def agree(sync: GradSyncFn | None, name: str, ok: torch.Tensor) -> torch.Tensor:
    """Between an optimizer's backward and its step: with data parallel, `sync` averages that
    optimizer's gradients across ranks and returns the validity verdict every rank shares."""
    return ok if sync is None else sync(name, ok)
