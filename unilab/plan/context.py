"""Resolution of what the rules and the plan both need: devices by UUID and CPU blocks.

Resolution never raises; what cannot be resolved is left as None and the rule that owns the
condition reports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from unilab.host.facts import GpuFacts, HostFacts
from unilab.plan.init_from import inspect_init_from
from unilab.plan.inputs import inspect_robot, inspect_task_motion
from unilab.spec.models import Spec
from unilab.tasks.registry import robot_spec, task_def


@dataclass(frozen=True)
class ResolvedDevice:
    ref: str | int  # as written in the spec
    kind: Literal["cpu", "cuda"]
    gpu: GpuFacts | None = None  # for cuda


@dataclass
class Context:
    spec: Spec
    facts: HostFacts
    spec_dir: Path
    devices: tuple[ResolvedDevice, ...] | None  # None: some device did not resolve

    @cached_property
    def robot(self) -> Any:
        """MjcfInfo of the robot (builtin or the user's), the UnilabError explaining why not, or None
        for the cart-pole check task.
        Cached: rules and the plan builder read it without inspecting the file twice."""

        task = robot_spec(self.spec.task)
        if task is None:
            return None  # a task that brings its own model (the cart-pole)
        return inspect_robot(task.robot_mjcf, self.spec_dir)

    @cached_property
    def motion(self) -> Any:
        """MotionInfo of task.motion (None for a task without one), or the UnilabError explaining why not."""

        motion = task_def(self.spec.task).motion(self.spec.task)
        if motion is None:
            return None
        return inspect_task_motion(motion, self.spec_dir, self.robot)

    @cached_property
    def init_from(self) -> Any:
        """InitSource of run.init_from (None when unset), or the UnilabError explaining why not."""

        return inspect_init_from(self.spec.run.init_from, self.spec_dir)

    @property
    def world_size(self) -> int:
        return len(self.spec.device_list())

    @property
    def on_cuda(self) -> bool:
        return self.devices is not None and all(d.kind == "cuda" for d in self.devices)

    @property
    def on_cpu(self) -> bool:
        return all(d == "cpu" for d in self.spec.device_list())

    def cpu_blocks(self) -> list[list[int]] | None:
        """Per-rank collector CPU blocks: the override, or the affinity set split into
        `count // world_size` contiguous blocks (the remainder stays unpinned). None if
        there are fewer CPUs than ranks (rule devices.cpu-blocks reports it)."""
        override = self.spec.training.collector_cpu_ids
        if override is not None:
            return [sorted(b) for b in override]
        cpus = self.facts.cpu.affinity
        size = len(cpus) // self.world_size
        if size < 1:
            return None
        return [cpus[r * size : (r + 1) * size] for r in range(self.world_size)]


def resolve_device(ref: str | int, facts: HostFacts) -> ResolvedDevice | None:
    if ref == "cpu":
        return ResolvedDevice(ref=ref, kind="cpu")
    visible = facts.cuda_visible_devices.uuids
    if isinstance(ref, int):
        if ref >= len(visible):
            return None
        gpu = facts.gpu_by_uuid(visible[ref])
    else:
        gpu = facts.gpu_by_uuid(ref) if ref in visible else None
    return ResolvedDevice(ref=ref, kind="cuda", gpu=gpu) if gpu else None


def build_context(spec: Spec, facts: HostFacts, spec_dir: Path) -> Context:
    resolved = [resolve_device(r, facts) for r in spec.device_list()]
    devices = None if any(d is None for d in resolved) else tuple(d for d in resolved if d is not None)
    return Context(spec=spec, facts=facts, spec_dir=spec_dir, devices=devices)
