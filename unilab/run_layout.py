"""A run directory's layout: what `unilab apply` writes where, named once.

    RUN_DIR/plan.toml          the plan the run executes (kept, canonical)
    RUN_DIR/manifest.json      what ran, checked against schemas/manifest.v1.json
    RUN_DIR/events.jsonl       the run's structured events
    RUN_DIR/checkpoints/       ckpt-<env steps>.pt, each beside its .sha256
    RUN_DIR/tensorboard/       TensorBoard scalars
    RUN_DIR/code/              the working tree's diff when it was not clean (provenance)

Torch-free and at the bottom of the package (the planner reads run directories for
`run.init_from`, the manifest checks read them, the runtime writes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PLAN = "plan.toml"
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def plan(self) -> Path:
        return self.root / PLAN

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def events(self) -> Path:
        return self.root / EVENTS

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def tensorboard(self) -> Path:
        return self.root / TENSORBOARD
