"""What a rank needs to run in lockstep with the others: the learner's gradients averaged before
every optimizer step (with the validity sentinel), parameters broadcast from rank 0 at start,
normalizer statistics from every rank's observations, and collective stop decisions."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from unilab.collect.collector_client import RunFailed
from unilab.dist import BufferSync, GradSync, broadcast_parameters
from unilab.errors import UnilabError
from unilab.learn.replay import Batch
from unilab.plan.models import Plan


class DpContext:
    def __init__(self, plan: Plan, rank: int, world_size: int) -> None:
        self.plan, self.rank, self.world_size = plan, rank, world_size
        self.grad_sync: GradSync | None = None
        self.buffer_sync: BufferSync | None = None
        self.learner: Any = None
        self.syncs = 0
        self.sync_s = 0.0
        self._flag = torch.zeros(1, dtype=torch.int32)
        # Control messages (stop flags, evidence, the end-of-run barrier) travel on a gloo group,
        # whatever backend carries the gradients: gloo can time out a barrier and name the rank.
        self.control = dist.new_group(backend="gloo") if plan.topology.process_group_backend != "gloo" else None
        # The default group's tensors live where its backend works: NCCL reduces GPU memory only.
        self._wire_device = torch.device("cuda" if plan.topology.process_group_backend == "nccl" else "cpu")

    def modules(self, learner: Any) -> list[Any]:
        return list(learner.replicated())

    def attach(self, learner: Any) -> Callable[[Batch], dict[str, torch.Tensor]]:
        """Broadcast rank 0's learner to every rank and return the synchronised update."""
        self.learner = learner
        broadcast_parameters(self.modules(learner), src=0)
        learner.refresh_working_copies()  # the update's bfloat16 copies, where the plan asks for them
        self.grad_sync = GradSync.from_plan(learner.optim_groups(), self.plan.gradient_wire)
        if stats := learner.running_stat_modules():
            # Running statistics (FlashSAC's BatchNorm) come from each rank's own batch; average them
            # after every update so the replicas stay identical.
            self.buffer_sync = BufferSync(stats)

        def sync(name: str, ok: torch.Tensor) -> torch.Tensor:
            t0 = time.perf_counter()
            out = self.grad_sync.sync(name, ok)  # type: ignore[union-attr]
            self.sync_s += time.perf_counter() - t0
            self.syncs += 1
            return out

        def update(batch: Batch) -> dict[str, torch.Tensor]:
            m = learner.update(batch, sync=sync)
            if self.buffer_sync is not None:
                self.buffer_sync.sync()
            return m

        return update

    def gather_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """Every rank's observations of this sync, concatenated in rank order (identical on all
        ranks), so the normalizers see the same data and stay identical. The observations come
        from the collector's CPU buffer; with NCCL they are gathered on this rank's GPU."""
        x = obs.to(self._wire_device).contiguous()
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x)
        return torch.cat(parts)

    def any_rank(self, local: bool) -> bool:
        """True on every rank if any rank says true (a collective: all ranks must call it)."""
        self._flag.fill_(int(local))
        dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, group=self.control)
        return bool(self._flag.item())

    def finish_within(self, grace_s: float) -> None:
        """Wait for every rank to reach the end of its work, at most ``grace_s`` seconds: a rank
        that died or overruns the window fails the run, named by gloo's monitored barrier, instead
        of leaving the others blocked in the final gather for ever."""
        finish_barrier(self.control, grace_s)

    def wire_summary(self) -> dict[str, Any]:
        return self.grad_sync.summary() if self.grad_sync is not None else {}


def finish_barrier(group: Any, grace_s: float) -> None:
    """The end-of-run meeting of all ranks on a gloo ``group`` (None: the default group)."""
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=grace_s), wait_all_ranks=True)
    except RuntimeError as exc:
        raise UnilabError(
            f"the data-parallel ranks did not all finish within {grace_s:.0f} s of each other",
            detail=f"gloo: {str(exc).strip().splitlines()[0]}",
            fix="see that rank's first error in the run's events.jsonl or the launcher's output; "
            "a rank stuck in a slow step or killed by the OS ends the run this way",
        ) from exc


# What gloo says when the rank at the other end of a connection is gone (its process or its node).
_PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused", "EOF")


def lost_rank_error(exc: BaseException, rank: int, world_size: int, group: Any = None) -> RunFailed | None:
    """The failure of a collective because another rank is gone, as the run's error naming that
    rank (``rank`` is this one); None for any other failure. Two ranks: the other one. More: the
    ranks a short monitored barrier finds missing, or all the others when even that cannot say."""
    text = str(exc)
    if not isinstance(exc, RuntimeError) or not any(k in text for k in _PEER_GONE):
        return None
    others = [r for r in range(world_size) if r != rank]
    lost = others if world_size == 2 else _missing_ranks(group, others)
    names = ", ".join(str(r) for r in lost)
    return RunFailed(
        f"rank{lost[0]}" if len(lost) == 1 else "ranks",
        f"rank {names} {'was' if len(lost) == 1 else 'were'} lost (its process or its node died): rank {rank} "
        f"found the connection gone in a collective",
        detail=f"gloo: {text.strip().splitlines()[0][:300]}",
        fix="see why that rank or node ended (its launcher's output, the OS log); then resume the run on a "
        "full set of nodes with --resume RUN_DIR",
    )


def _missing_ranks(group: Any, others: list[int]) -> list[int]:
    import re

    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=10), wait_all_ranks=True)
    except RuntimeError as exc:
        named = [int(r) for r in re.findall(r"\d+", str(exc).split("failed to pass", 1)[0])]
        return [r for r in named if r in others] or others
    return others
