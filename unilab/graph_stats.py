"""What a CUDA graph runner reports (the learner graph, the collector update-state graph): manifest evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
