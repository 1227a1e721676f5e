"""What both CUDA graph runners (the learner graph, the collector update-state graph) share: their
manifest evidence, the host counters a replay cannot advance, and side-stream runs and capture."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch

T = TypeVar("T")

GraphMode = Literal["cuda_graph", "eager_twin"]  # eager_twin: the same bookkeeping, eager, for CPU tests


@dataclass
class GraphStats:
    mode: GraphMode
    state: Literal["warming", "captured", "invalidated", "failed"] = "warming"
    captures: int = 0
    replays: int = 0
    eager_updates: int = 0  # warm-up runs before capture
    invalidations: int = 0
    last_invalidation: str | None = None
    capture_ids: list[str] = field(default_factory=list)

    def invalidated(self, reason: str) -> None:
        self.invalidations += 1
        self.last_invalidation = reason
        self.state = "invalidated"

    def captured(self, capture_id: str) -> None:
        self.captures += 1
        self.capture_ids.append(capture_id)
        self.state = "captured"

    def evidence(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "state": self.state,
            "captures": self.captures,
            "replays": self.replays,
            "eager_updates": self.eager_updates,
            "invalidations": self.invalidations,
            "last_invalidation": self.last_invalidation,
            "capture_ids": list(self.capture_ids),
        }


class HostCounters:
    """Numbers a captured body advances on the host (update counts, step counts). A replay runs no
    Python, so the runner restores them around captures and advances them by a measured delta."""

    def __init__(self, counters: Sequence[tuple[Any, str]]) -> None:
        self.counters = list(counters)  # (object, attribute)

    def read(self) -> list[Any]:
        return [getattr(o, a) for o, a in self.counters]

    def write(self, values: Sequence[Any]) -> None:
        for (o, a), v in zip(self.counters, values, strict=True):
            setattr(o, a, v)

    def advance(self, start: Sequence[Any], delta: Sequence[Any]) -> None:
        self.write([v + d for v, d in zip(start, delta, strict=True)])


def on_side_stream(stream: Any, fn: Callable[[], T]) -> T:
    """`fn` on `stream` ordered after the caller's current stream, which then waits for it (no
    host sync); `stream` None runs `fn` as it is (CPU)."""
    if stream is None:
        return fn()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return out


def capture_cuda_graph(stream: Any, fn: Callable[[], T], generators: Sequence[torch.Generator] = ()) -> tuple[Any, T]:
    """Capture `fn` on the side `stream` as a CUDA graph; returns the graph and `fn`'s (static)
    outputs. Custom generators `fn` draws from are registered first, so replays draw fresh numbers."""
    graph = torch.cuda.CUDAGraph()
    for gen in generators:
        graph.register_generator_state(gen)
    stream.wait_stream(torch.cuda.current_stream())
    # thread_local: the rank's other threads (NCCL watchdog, progress) may call CUDA meanwhile.
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
        out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out
