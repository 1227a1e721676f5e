"""Host-sync inventory by instrumentation: every host read of a tensor's values (``.item()``,
``bool(t)``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``nonzero``, ``masked_select``, copies to
the host) made while the collector steps, with the Python code that made it.

Two torch modes watch together: a ``TorchFunctionMode`` sees the Python-level reads (``tolist``
and ``numpy`` never reach the dispatcher), a ``TorchDispatchMode`` sees the aten ops that need
the values on the host (``_local_scalar_dense`` behind item/bool/int, ``nonzero``,
``masked_select``, device-to-host copies). A read seen by the function mode is not counted again
by the dispatch mode. Each read is attributed to the collector phase it ran in by watching the
collector's phase timer: reads between two laps belong to the phase the second lap closes."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from unilab.profile.models import HostSyncInventory, HostSyncRow

if TYPE_CHECKING:
    from unilab.collect.collector import Collector

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_UNILAB_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
_PROFILE_DIR = str(Path(__file__).resolve().parent) + os.sep

# Python-level reads: method name -> kind.
_FUNCTION_READS = {
    "item": "scalar_read",
    "__bool__": "scalar_read",
    "__int__": "scalar_read",
    "__float__": "scalar_read",
    "__index__": "scalar_read",
    "tolist": "tolist",
    "numpy": "numpy",
    "cpu": "to_host_copy",
}
# aten ops whose result needs the values on the host (data-dependent shapes or a scalar).
_DISPATCH_READS = {
    "_local_scalar_dense": "scalar_read",
    "is_nonzero": "scalar_read",
    "equal": "scalar_read",
    "nonzero": "nonzero",
    "nonzero_static": None,  # fixed shape: no host read
    "masked_select": "masked_select",
    "_unique2": "unique",
    "unique_consecutive": "unique",
    "repeat_interleave": "repeat_interleave",
}
_INLINE_FRAMES = frozenset({"<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>"})
OUTSIDE = None  # phase of a read made outside Collector.step's timed phases


@dataclass
class _Event:
    owner: tuple[str, str, int]
    unilab_owner: str | None
    kind: str
    op: str
    shape: str
    device: str
    phase: str | None = None


@dataclass
class _Log:
    events: list[_Event] = field(default_factory=list)
    pending: list[_Event] = field(default_factory=list)
    depth: int = 0  # >0 while a function-mode read runs (its aten ops are not counted again)

    def add(self, ev: _Event) -> None:
        self.pending.append(ev)

    def close_phase(self, phase: str | None) -> None:
        for ev in self.pending:
            ev.phase = phase
        self.events += self.pending
        self.pending = []


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(_UNILAB_DIR).parent))
    except ValueError:
        return path


def _callers() -> tuple[tuple[str, str, int], str | None]:
    """The first frame outside torch and this package (the owner) and the first under unilab/."""
    f = sys._getframe(2)
    owner: tuple[str, str, int] | None = None
    unilab_owner = None
    while f is not None:
        fn = f.f_code.co_filename
        # Comprehension frames (Python < 3.12) are attributed to the function that holds them.
        inline = f.f_code.co_name in _INLINE_FRAMES
        if not inline and not fn.startswith(_TORCH_DIR) and not fn.startswith(_PROFILE_DIR) and "<frozen" not in fn:
            if owner is None:
                owner = (_rel(fn), f.f_code.co_name, f.f_lineno)
            if fn.startswith(_UNILAB_DIR):
                unilab_owner = f"{_rel(fn)}:{f.f_code.co_name}"
                break
        f = f.f_back
    return owner or ("<unknown>", "<unknown>", 0), unilab_owner


def _first_tensor(args: Any) -> torch.Tensor | None:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


class _FunctionReads(TorchFunctionMode):
    def __init__(self, log: _Log) -> None:
        super().__init__()
        self.log = log

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        kind = _FUNCTION_READS.get(name)
        t = _first_tensor(args)
        if kind is None or t is None:
            return func(*args, **kwargs)
        owner, uo = _callers()
        self.log.add(_Event(owner, uo, kind, f"Tensor.{name}", str(tuple(t.shape)), str(t.device)))
        self.log.depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.log.depth -= 1


class _DispatchReads(TorchDispatchMode):
    def __init__(self, log: _Log) -> None:
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.log.depth == 0:
            base = func.overloadpacket.__name__
            kind = _DISPATCH_READS.get(base)
            t = _first_tensor(args)
            if kind is None and base in ("_to_copy", "copy_") and t is not None:
                kind = _host_copy_kind(base, args, kwargs)
            if kind is not None and t is not None:
                owner, uo = _callers()
                self.log.add(_Event(owner, uo, kind, f"aten.{base}", str(tuple(t.shape)), str(t.device)))
        return func(*args, **kwargs)


def _host_copy_kind(base: str, args: tuple, kwargs: dict) -> str | None:
    """A copy from a non-CPU device to the CPU (a device-to-host transfer)."""
    if base == "_to_copy":
        src, dst = args[0], kwargs.get("device")
        if dst is not None and torch.device(dst).type == "cpu" and src.device.type != "cpu":
            return "to_host_copy"
    elif len(args) >= 2 and isinstance(args[1], torch.Tensor):
        dst, src = args[0], args[1]
        if dst.device.type == "cpu" and src.device.type != "cpu":
            return "to_host_copy"
    return None


class HostReadRecorder:
    """Context manager recording host reads; ``watch(collector)`` attributes them to phases."""

    def __init__(self) -> None:
        self.log = _Log()
        self._modes: list[Any] = []
        self._restore: list[tuple[Any, str]] = []

    def watch(self, collector: Collector) -> None:
        timer, log = collector.timer, self.log
        names = timer.phases
        lap, start = timer.lap, timer.start

        def lap_hook(i: int) -> None:
            log.close_phase(names[i])
            lap(i)

        def start_hook() -> None:
            log.close_phase(OUTSIDE)
            start()

        timer.lap, timer.start = lap_hook, start_hook  # type: ignore[method-assign]
        self._restore += [(timer, "lap"), (timer, "start")]

    def flush_outside(self) -> None:
        self.log.close_phase(OUTSIDE)

    def __enter__(self) -> HostReadRecorder:
        self._modes = [_FunctionReads(self.log), _DispatchReads(self.log)]
        for m in self._modes:
            m.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for m in reversed(self._modes):
            m.__exit__(None, None, None)
        self._modes = []
        self.flush_outside()
        for obj, name in self._restore:
            obj.__dict__.pop(name, None)
        self._restore = []

    def events(self) -> list[_Event]:
        return list(self.log.events)


def disposition(kind: str, inside: bool, device_sync: bool, per_iteration: float, owner_file: str) -> str:
    if owner_file.startswith("unilab/sim/") and not device_sync:
        return "keep eager (host side of the CPU physics backend, outside any CUDA capture)"
    if kind in ("nonzero", "masked_select", "unique", "repeat_interleave"):
        return "fixed-shape pack (mask arithmetic or torch.where over full-size buffers)"
    if inside:
        if kind == "scalar_read":
            return "device-resident counter (keep the flag on the device; mask instead of branching)"
        return "move outside capture (publish after the step)"
    if per_iteration < 1.0:
        return "keep eager (already read at an interval, outside the step)"
    if not device_sync:
        return "interval publication (CPU tensor today: no device sync, but a sync once on CUDA)"
    return "interval publication (read every N steps, not every step)"


def summarize(events: list[_Event], steps: int) -> list[HostSyncRow]:
    groups: dict[tuple, list[_Event]] = defaultdict(list)
    for ev in events:
        groups[(ev.owner, ev.unilab_owner, ev.kind, ev.op, ev.device, ev.phase)].append(ev)
    rows = []
    for (owner, uo, kind, op, device, phase), evs in groups.items():
        inside = phase is not OUTSIDE
        sync = not device.startswith("cpu")
        per_it = len(evs) / max(steps, 1)
        rows.append(
            HostSyncRow(
                owner_file=owner[0],
                owner_function=owner[1],
                owner_line=owner[2],
                unilab_owner=uo,
                kind=kind,
                op=op,
                calls=len(evs),
                calls_per_iteration=per_it,
                shapes=sorted({e.shape for e in evs}),
                device=device,
                phase=phase,
                inside_capture=inside,
                device_sync=sync,
                disposition=disposition(kind, inside, sync, per_it, owner[0]),
            )
        )
    rows.sort(key=lambda r: (not r.inside_capture, -r.calls, r.owner_file, r.owner_line))
    return rows


def inventory(collector: Collector, steps: int, *, seed: int = 0) -> HostSyncInventory:
    """Step ``collector`` ``steps`` times with uniform random actions, as the collector process
    does (step, then its per-step episode statistics read), and list every host read."""
    gen = torch.Generator().manual_seed(seed)
    actions = torch.empty(collector.num_envs, collector.action_dim)
    collector.reset_all()
    rec = HostReadRecorder()
    rec.watch(collector)
    with rec:
        for _ in range(steps):
            torch.rand(actions.shape, generator=gen, out=actions)
            actions.mul_(2).sub_(1)
            collector.step(actions.to(collector.device))
            rec.flush_outside()
            collector.episode_stats()  # what unilab/run/collector_proc.py reads after every step
            _ = collector.nonfinite_worlds_total
            rec.flush_outside()
    return HostSyncInventory(
        method="TorchFunctionMode (Python-level reads) + TorchDispatchMode (aten host reads); "
        "phases from the collector's phase timer",
        steps=steps,
        num_envs=collector.num_envs,
        device=str(collector.device),
        rows=summarize(rec.events(), steps),
    )
