"""The learner's whole update cycle as a CUDA graph, and its eager twin on the CPU.

One update cycle (critic, actor, temperature, target update and, with data parallel, the packed
all-reduce with its validity sentinel) is captured once per cycle kind: with the actor cadence a
cycle either includes the actor and temperature or it does not, so there are at most two graphs.
Every update fills static input buffers from the replay sample, then replays the kind's graph.

Why the update is capturable: the learners never read a tensor on the host inside `update` (a test
traps every host read), their optimizers take the skip verdict as a device tensor (`MaskedAdam`,
which is capturable by construction), and gradients live in fixed `.grad` buffers. What a replay
does not run is the update body's Python: host-side counters (update counts, sync counts) are
advanced by the delta that the capture observed.

Lifecycle, after PyTorch's CUDA graph notes: each kind first runs `warmup` eager iterations on a
side stream (with data parallel at least 11, as the notes ask for captured collectives), then is
captured on that stream with the update generator registered, then replayed. Loading a checkpoint
or replacing the sync callback invalidates every graph, and so does parameter storage that moved
(addresses are checked before each replay). A capture failure is agreed across ranks and raises on
every rank: no rank falls back to eager on its own.

On a CPU (`mode="eager_twin"`) the same bookkeeping runs with the capture replaced by a dry run
whose state changes are rolled back, and each replay by the eager body: the logic is tested where
no GPU is, and a twin run is bitwise the plain eager run. (The dry run executes the body's
collectives, which a CUDA capture only records; so in the twin a rank whose body fails before its
collectives would leave the other ranks waiting.)
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from unilab.errors import UnilabError
from unilab.graph_support import GraphMode, GraphStats, HostCounters, capture_cuda_graph, on_side_stream
from unilab.learn.replay import Batch

Body = Callable[[Batch], dict[str, torch.Tensor]]
HostCounter = tuple[Any, str]  # (object, attribute): a number the update body advances on the host
DP_WARMUP = 11  # PyTorch's CUDA graph notes: eager iterations before capturing collectives


@dataclass
class _Captured:
    kind: str
    addresses: tuple[int, ...]  # of every tensor the graph holds, at capture
    delta: list[Any]  # host counters' advance per replay
    graph: Any = None  # torch.cuda.CUDAGraph (cuda_graph mode)
    outputs: dict[str, torch.Tensor] | None = None  # the graph's static outputs


class LearnerGraph:
    """Callable like `learner.update(batch)`; see the module docstring."""

    def __init__(
        self,
        learner: Any,
        body: Body,
        *,
        batch_size: int,
        mode: GraphMode,
        warmup: int = 3,
        host_counters: Sequence[HostCounter] = (),
        agree: Callable[[bool], bool] | None = None,
    ) -> None:
        if warmup < 1:
            raise UnilabError(f"learner graph warm-up must be at least one eager update, got {warmup}")
        if mode == "cuda_graph" and learner.device.type != "cuda":
            raise UnilabError(f"a CUDA graph of the learner needs a CUDA learner, this one is on {learner.device}")
        self.learner, self.body, self.mode, self.warmup = learner, body, mode, warmup
        self.agree = agree
        self.counters = HostCounters([(learner, "num_critic_updates"), (learner, "num_actor_updates"), *host_counters])
        dev = learner.device
        z = lambda *shape: torch.zeros(*shape, device=dev)  # noqa: E731
        self.static = Batch(
            obs=z(batch_size, learner.obs_dim),
            action=z(batch_size, learner.act_dim),
            reward=z(batch_size),
            next_obs=z(batch_size, learner.obs_dim),
            discount=z(batch_size),
        )
        self.stats = GraphStats(mode=mode)
        self._graphs: dict[str, _Captured] = {}
        self._eager: dict[str, int] = {}
        self._stream = torch.cuda.Stream(device=dev) if mode == "cuda_graph" else None

    # ------------------------------------------------------------------ public
    def __call__(self, batch: Batch) -> dict[str, torch.Tensor]:
        s = self.static
        torch._foreach_copy_(
            [s.obs, s.action, s.reward, s.next_obs, s.discount],
            [batch.obs, batch.action, batch.reward, batch.next_obs, batch.discount],
        )
        kind = self.learner.cycle_kind()
        g = self._graphs.get(kind)
        if g is not None and g.addresses != self._addresses():
            self.invalidate("parameter or buffer storage moved")
            g = None
        if g is None:
            if self._eager.get(kind, 0) < self.warmup:
                self._eager[kind] = self._eager.get(kind, 0) + 1
                self.stats.eager_updates += 1
                return self._run_eager()
            g = self._capture(kind)
        return self._replay(g)

    def invalidate(self, reason: str) -> None:
        """Drop every graph; the next update of each kind warms up and captures again."""
        if self._graphs:
            self.stats.invalidated(reason)
        self._graphs.clear()
        self._eager.clear()

    def set_body(self, body: Body) -> None:
        """Replace the update body (a new sync callback or hook): the captured graphs no longer hold."""
        self.body = body
        self.invalidate("update body replaced")

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.learner.load_state_dict(state)
        self.invalidate("checkpoint loaded")

    # ------------------------------------------------------------------ internals
    def _run_eager(self) -> dict[str, torch.Tensor]:
        # Warm-up on the side stream capture will use (lazy handles, allocator pools).
        return on_side_stream(self._stream, lambda: self.body(self.static))

    def _addresses(self) -> tuple[int, ...]:
        """Where every tensor a graph reads or writes lives: the static inputs, parameters, grads."""
        s = self.static
        out = [t.data_ptr() for t in (s.obs, s.action, s.reward, s.next_obs, s.discount)]
        for params in self.learner.optim_groups().values():
            for p in params:
                out.append(p.data_ptr())
                out.append(p.grad.data_ptr() if p.grad is not None else 0)
        return tuple(out)

    def _capture(self, kind: str) -> _Captured:
        before = self.counters.read()
        graph, outputs, error, after = None, None, None, before
        try:
            if self.mode == "cuda_graph":
                graph, outputs = capture_cuda_graph(
                    self._stream, lambda: self.body(self.static), generators=[self.learner.update_gen]
                )
                after = self.counters.read()
            else:
                # The twin's capture is a dry run whose effects are rolled back, as a capture's are.
                saved = copy.deepcopy(self.learner.state_dict())
                try:
                    self.body(self.static)
                    after = self.counters.read()
                finally:
                    self.learner.load_state_dict(saved)
        except Exception as e:  # every capture failure is reported the same way below
            error = e
        self.counters.write(before)
        failed = error is not None
        if self.agree is not None:
            failed = self.agree(failed)  # a collective: every rank learns whether any rank failed
        if failed:
            self.stats.state = "failed"
            where = f"{type(error).__name__}: {error}" if error is not None else "capture failed on another rank"
            raise UnilabError(
                f"learner CUDA graph capture of the {kind!r} update cycle failed ({where}); "
                "the run stops on every rank rather than fall back to eager on one",
                fix='set training.learner_graph = "off" and re-plan, or report the error with the manifest',
            )
        delta = [a - b for a, b in zip(after, before, strict=True)]
        g = _Captured(kind=kind, addresses=self._addresses(), delta=delta, graph=graph, outputs=outputs)
        self._graphs[kind] = g
        digest = hashlib.sha256(f"{kind}:{g.addresses}".encode()).hexdigest()[:16]
        self.stats.captured(f"{kind}:{digest}")
        return g

    def _replay(self, g: _Captured) -> dict[str, torch.Tensor]:
        start = self.counters.read()
        if g.graph is not None:
            g.graph.replay()
            out = g.outputs
        else:
            out = self.body(self.static)
        # A graph's Python does not run on a replay: the host counters advance by what the capture saw.
        self.counters.advance(start, g.delta)
        self.stats.replays += 1
        return out  # type: ignore[return-value]
