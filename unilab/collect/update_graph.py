"""Experimental: the collector's update body as one CUDA graph (`training.collector_graph = "update_state"`).

The body is what runs between the physics step and the reset of ended worlds: state read,
episode counters, terminations, rewards, commands' per-step update, observations, the deferred
finite verdict, the reset mask, publication into the collector's persistent carriers, and the
episode metrics. Physics, reset orchestration, inference and the hand-over of transitions to the
learner stay outside the graph.

Contract, checked here at run time as the plan's preflight checks it from the spec:
- no term draws random numbers in the body (observation noise): a replay would redraw nothing,
  so every replay would add the same "noise" (the RNG shortcut). Each warm-up step compares the
  task generator's state before and after the body and refuses a capture if it moved.
- no interval events and no curriculum updated outside resets: their Python decides per step.
- carriers (every tensor the body reads or writes: the backend's state, the task's and the
  collector's buffers) keep their address, shape and dtype: checked before every replay by
  identity of the attributes that hold them; a moved carrier forces a recapture.
- host-side counters the body advances (the task's step count) are advanced by the runner, by the
  per-step delta the warm-up steps measured (and which must be the same on every warm-up step).

Stream order on CUDA: the update stream waits for the caller's stream (the physics step), the
graph replays there, and the caller's stream waits for the replay before the reset orchestration
(``graph_support.on_side_stream``: no host synchronisation). The finite
verdict stays on the device and is read at the collector's interval, outside the graph. Around
warm-up, capture and replay the allocator's `memory_allocated` is recorded; replays must not grow it.

On a CPU (`mode="eager_twin"`) the same bookkeeping runs with each replay an eager call of the
body, so the logic is tested without a GPU; a twin run is bitwise the plain eager collector.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from unilab.errors import UnilabError
from unilab.graph_support import GraphMode, GraphStats, HostCounters, capture_cuda_graph, on_side_stream

if TYPE_CHECKING:
    from unilab.sim.contract import PhysicsState

CHECK_ALLOCATOR_EVERY = 64  # replays between allocator readings (a reading is a host call, no sync)


INTERVAL_BLOCKER = "interval events (pushes, a command drawn again within the episode) run inside the update body"


def graph_blockers(task: Any) -> list[str]:
    """Why this task instance's update body cannot be captured (empty: it can)."""
    out = []
    if getattr(task, "noise", None) is not None:
        out.append("observation noise draws random numbers in the update body")
    # Pushes fire on a host schedule; a command drawn again within the episode draws in every step.
    if getattr(task, "_interval_sched", None) or any(
        getattr(c, "interval", False) for c in getattr(task, "commands", ())
    ):
        out.append(INTERVAL_BLOCKER)
    for c in getattr(task, "curricula", ()):
        if not c.reset_owned:
            out.append(f"curriculum `{getattr(c, 'name', c)}` updates outside resets")
    return out


@dataclass
class UpdateGraphStats(GraphStats):
    """The update-state graph's evidence: the common fields plus its carriers, RNG and allocator."""

    carriers: list[str] = field(default_factory=list)  # "owner.name:shape:dtype"
    rng_draw_version: str | None = None  # digest of the task generator state at capture (unchanged by the body)
    allocated_bytes: dict[str, int] = field(default_factory=dict)  # CUDA only: warm-up, capture, replay readings

    def evidence(self) -> dict[str, Any]:
        return super().evidence() | {
            "carriers": list(self.carriers),
            "rng_draw_version": self.rng_draw_version,
            "allocated_bytes": dict(self.allocated_bytes),
        }


@dataclass(frozen=True)
class _Carrier:
    owner: str
    obj: Any
    attr: str
    tensor: torch.Tensor

    def held(self) -> bool:
        return getattr(self.obj, self.attr) is self.tensor

    def describe(self) -> str:
        return f"{self.owner}.{self.attr}:{tuple(self.tensor.shape)}:{str(self.tensor.dtype).removeprefix('torch.')}"


def _tensor_attrs(owner: str, obj: Any) -> list[_Carrier]:
    return [_Carrier(owner, obj, k, v) for k, v in sorted(vars(obj).items()) if isinstance(v, torch.Tensor)]


class UpdateStateGraph:
    """Runs `body(state)` as warm-up, capture and replays; see the module docstring."""

    def __init__(
        self,
        collector: Any,
        body: Callable[[PhysicsState], None],
        *,
        mode: GraphMode,
        warmup: int = 3,
    ) -> None:
        task = collector.task
        blockers = graph_blockers(task)
        if blockers:
            raise UnilabError(
                f"the collector update-state graph cannot capture task `{task.name}`: {blockers[0]}",
                fix='turn that option off in [task] (docs/tasks.md), or set training.collector_graph = "off"',
            )
        if warmup < 1:
            raise UnilabError(f"update-state graph warm-up must be at least one eager step, got {warmup}")
        if mode == "cuda_graph" and collector.device.type != "cuda":
            raise UnilabError(
                f"a CUDA graph of the collector needs a CUDA collector, this one is on {collector.device}"
            )
        self.collector, self.task, self.body, self.mode, self.warmup = collector, task, body, mode, warmup
        self.counters = HostCounters([(task, "_step_count")])
        self.stats = UpdateGraphStats(mode=mode)
        self._graph: Any = None
        self._carriers: list[_Carrier] = []
        self._state_ptrs: tuple[int, ...] = ()
        self._delta: list[int] | None = None
        self._eager = 0
        self._alloc_base: int | None = None
        self._stream = torch.cuda.Stream(device=collector.device) if mode == "cuda_graph" else None

    # ------------------------------------------------------------------ public
    def run(self, state: PhysicsState) -> None:
        if self._graph is not None and not self._still_holds(state):
            self.invalidate("a carrier moved (address, shape or dtype)")
        if self._graph is None:
            if self._eager < self.warmup:
                self._eager += 1
                self.stats.eager_updates += 1
                self._warm(state)
                return
            self._capture(state)
        self._replay(state)

    def invalidate(self, reason: str) -> None:
        if self._graph is not None:
            self.stats.invalidated(reason)
        self._graph = None
        self._eager = 0
        self._delta = None

    # ------------------------------------------------------------------ internals
    def _collect_carriers(self, state: PhysicsState) -> list[_Carrier]:
        c = self.collector
        out = _tensor_attrs("state", state) + _tensor_attrs("task", self.task) + _tensor_attrs("collector", c)
        return out + _tensor_attrs("finite", c._finite)

    def _state_key(self, state: PhysicsState) -> tuple[int, ...]:
        return tuple(t.data_ptr() for t in vars(state).values() if isinstance(t, torch.Tensor))

    def _still_holds(self, state: PhysicsState) -> bool:
        return self._state_key(state) == self._state_ptrs and all(k.held() for k in self._carriers)

    def _gen_digest(self) -> str:
        return hashlib.sha256(self.task.generator.get_state().cpu().numpy().tobytes()).hexdigest()[:16]

    def _on_stream(self, fn: Callable[[], None]) -> None:
        on_side_stream(self._stream, fn)

    def _allocated(self, when: str) -> None:
        if self.mode == "cuda_graph":
            self.stats.allocated_bytes[when] = int(torch.cuda.memory_allocated(self.collector.device))

    def _warm(self, state: PhysicsState) -> None:
        if self._eager == 1:
            self._allocated("before_warmup")
        rng, before = self._gen_digest(), self.counters.read()
        self._on_stream(lambda: self.body(state))
        after = self.counters.read()
        if self._gen_digest() != rng:
            self.stats.state = "failed"
            raise UnilabError(
                "the collector update body drew random numbers: a graph replay would repeat the same draw every step",
                fix="remove the random term (observation noise, random commands per step), or set "
                'training.collector_graph = "off"',
            )
        delta = [a - b for a, b in zip(after, before, strict=True)]
        if self._delta is not None and delta != self._delta:
            self.stats.state = "failed"
            raise UnilabError(
                "the collector update body advanced its host counters differently on two steps, so a replay "
                "cannot stand in for it",
                fix='set training.collector_graph = "off"',
            )
        self._delta = delta

    def _capture(self, state: PhysicsState) -> None:
        self._carriers = self._collect_carriers(state)
        self._state_ptrs = self._state_key(state)
        before = self.counters.read()
        try:
            if self.mode == "cuda_graph":
                self._allocated("after_warmup")
                self._graph, _ = capture_cuda_graph(self._stream, lambda: self.body(state))
                self._allocated("after_capture")
            else:
                self._graph = "eager_twin"
        except Exception as e:  # a capture failure is the run's error, never a silent eager fallback
            self.stats.state = "failed"
            raise UnilabError(
                f"capturing the collector update-state graph failed ({type(e).__name__}: {e})",
                fix='set training.collector_graph = "off" and re-plan',
            ) from e
        finally:
            self.counters.write(before)  # the capture's Python ran once; its counter advance is not a step
        h = hashlib.sha256()
        for k in self._carriers:
            h.update(f"{k.describe()}@{k.tensor.data_ptr()};".encode())
        self.stats.carriers = [k.describe() for k in self._carriers]
        self.stats.rng_draw_version = self._gen_digest()
        self.stats.captured(h.hexdigest()[:16])

    def _replay(self, state: PhysicsState) -> None:
        start = self.counters.read()
        if self.mode == "cuda_graph":
            self._on_stream(self._graph.replay)
        else:
            self.body(state)
        # A replay runs no Python of the body: the host counters advance by the warm-up's per-step delta.
        self.counters.advance(start, self._delta or [0] * len(start))
        self.stats.replays += 1
        if self.mode == "cuda_graph":
            if self.stats.replays == 1:
                self._alloc_base = int(torch.cuda.memory_allocated(self.collector.device))
            elif self.stats.replays % CHECK_ALLOCATOR_EVERY == 0 and self._alloc_base is not None:
                growth = int(torch.cuda.memory_allocated(self.collector.device)) - self._alloc_base
                self.stats.allocated_bytes["replay_growth"] = growth
