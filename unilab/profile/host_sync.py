"""Host-sync inventory by instrumentation: every host read of a tensor's values (``.item()``,
``bool(t)``, ``.tolist()``, ``.numpy()``, ``.cpu()``, ``nonzero``, ``masked_select``, copies to
the host) made while the collector steps, with the Python code that made it.

Two torch modes watch together: a ``TorchFunctionMode`` sees the Python-level reads (``tolist``
and ``numpy`` never reach the dispatcher), a ``TorchDispatchMode`` sees the aten ops that need
the values on the host (``_local_scalar_dense`` behind item/bool/int, ``nonzero``,
``masked_select``, device-to-host copies). A read seen by the function mode is not counted again
by the dispatch mode. Each read is attributed to the collector phase it ran in by watching the
collector's phase timer: reads between two laps belong to the phase the second lap closes.

The dispatch mode also counts, per phase, the tensors the step allocates (outputs of aten ops
that are not in-place, out= or views) and the copies between the host and a device. On CUDA the
run is also made under CUDA's own sync debug mode (``torch.cuda.set_sync_debug_mode("warn")``):
each warning it raises becomes a row of kind ``cuda_sync_debug``, a cross-check of the rows the
modes found."""

from __future__ import annotations

import os
import sys
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from unilab.collect.timing import PHASES
from unilab.profile.models import HostSyncInventory, HostSyncRow, PhaseOps

if TYPE_CHECKING:
    from unilab.collect.collector import Collector

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_UNILAB_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
_PROFILE_DIR = str(Path(__file__).resolve().parent) + os.sep
_WARNINGS_FILE = warnings.__file__  # frames of the warnings machinery are never an owner

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
OUTSIDE_KEY = "outside_step"  # its key in the per-phase counts
CUDA_SYNC_DEBUG = "cuda_sync_debug"
# aten copies: (source index, destination index); -1 = the op's result (a fresh tensor).
_COPY_OPS = {"_to_copy": (0, -1), "copy_": (1, 0), "_copy_from": (0, 1), "_copy_from_and_resize": (0, 1)}
# Per-phase counters of the dispatch mode: tensors allocated, their bytes, host->device and
# device->host copies (indices into _Log.pending_ops and _Log.ops values).
_ALLOC, _BYTES, _H2D, _D2H = range(4)


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
    pending_ops: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    ops: dict[str | None, list[int]] = field(default_factory=dict)

    def add(self, ev: _Event) -> None:
        self.pending.append(ev)

    def close_phase(self, phase: str | None) -> None:
        for ev in self.pending:
            ev.phase = phase
        self.events += self.pending
        self.pending = []
        if any(self.pending_ops):
            acc = self.ops.setdefault(phase, [0, 0, 0, 0])
            for i, v in enumerate(self.pending_ops):
                acc[i] += v
            self.pending_ops = [0, 0, 0, 0]


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
        skip = fn.startswith(_TORCH_DIR) or fn.startswith(_PROFILE_DIR) or fn == _WARNINGS_FILE or "<frozen" in fn
        if not inline and not skip:
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
        base = func.overloadpacket.__name__
        if self.log.depth == 0:
            kind = _DISPATCH_READS.get(base)
            t = _first_tensor(args)
            if kind is None and base in ("_to_copy", "copy_") and t is not None:
                kind = _host_copy_kind(base, args, kwargs)
            if kind is not None and t is not None:
                owner, uo = _callers()
                self.log.add(_Event(owner, uo, kind, f"aten.{base}", str(tuple(t.shape)), str(t.device)))
        out = func(*args, **kwargs)
        ops = self.log.pending_ops
        # Allocations: every tensor result of an op whose results alias nothing (not in-place, out= or a view).
        if not any(r.alias_info is not None for r in func._schema.returns):
            for leaf in tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    ops[_ALLOC] += 1
                    ops[_BYTES] += leaf.numel() * leaf.element_size()
        if base in _COPY_OPS:
            direction = _copy_direction(base, args, kwargs, out)
            if direction is not None:
                ops[direction] += 1
        return out


def _copy_direction(base: str, args: tuple, kwargs: dict, out: Any) -> int | None:
    """_H2D or _D2H for an aten copy between the host and a device; None for a same-device copy."""
    si, di = _COPY_OPS[base]
    if len(args) <= max(si, di):
        return None
    src, dst = args[si], out if di < 0 else args[di]
    if not isinstance(src, torch.Tensor) or not isinstance(dst, torch.Tensor) or src.device == dst.device:
        return None
    if src.device.type == "cpu":
        return _H2D
    return _D2H if dst.device.type == "cpu" else None


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


@contextmanager
def cuda_sync_debug(log: _Log, device: str) -> Iterator[None]:
    """CUDA's sync debug mode set to "warn" for the block, each of its warnings a
    ``cuda_sync_debug`` event (with the code that made the call); the previous mode is restored
    after. Other warnings go to the usual handler."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # every occurrence, not the first per location
        shown = warnings.showwarning

        def hook(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            text = str(message)
            if "synchroniz" not in text:
                shown(message, category, filename, lineno, file, line)
                return
            owner, uo = _callers()
            log.add(_Event(owner, uo, CUDA_SYNC_DEBUG, text.strip().splitlines()[0][:160], "", device))

        warnings.showwarning = hook  # catch_warnings restores it
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)


def disposition(kind: str, inside: bool, device_sync: bool, per_iteration: float, owner_file: str) -> str:
    if kind == CUDA_SYNC_DEBUG:
        if inside:
            return "remove from capture (CUDA synchronizes here: see this owner's other rows)"
        return "keep eager" if per_iteration < 1.0 else "interval publication (read every N steps, not every step)"
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


def phase_ops(log: _Log, events: list[_Event], steps: int) -> dict[str, PhaseOps]:
    """Per-iteration counts of every collector phase (and of the reads outside the step)."""
    n = max(steps, 1)
    out = {}
    for phase in (*PHASES, OUTSIDE):
        ops = log.ops.get(phase, [0, 0, 0, 0])
        evs = [e for e in events if e.phase == phase]
        reads = [e for e in evs if e.kind != CUDA_SYNC_DEBUG]
        out[OUTSIDE_KEY if phase is OUTSIDE else phase] = PhaseOps(
            allocations=ops[_ALLOC] / n,
            allocated_bytes=ops[_BYTES] / n,
            host_to_device_copies=ops[_H2D] / n,
            device_to_host_copies=ops[_D2H] / n,
            host_reads=len(reads) / n,
            device_syncs=sum(not e.device.startswith("cpu") for e in reads) / n,
            cuda_sync_warnings=sum(e.kind == CUDA_SYNC_DEBUG for e in evs) / n,
        )
    return out


def device_phase_times(collector: Collector, steps: int, one_step: Callable[[], None]) -> dict[str, float]:
    """Microseconds per step of each phase with the device synchronised at every phase boundary
    (the phase timer's ``cuda_sync``): each phase then holds its kernels' execution, not only their
    launch. A pass of its own, as the syncs change what they measure."""
    timer = collector.timer
    before, was = timer.wall_seconds(), timer.cuda_sync
    timer.cuda_sync = True
    try:
        for _ in range(steps):
            one_step()
    finally:
        timer.cuda_sync = was
    n = max(steps, 1)
    return {ph: 1e6 * (a - b) / n for ph, a, b in zip(PHASES, timer.wall_seconds(), before, strict=True)}


def inventory(
    collector: Collector,
    steps: int,
    *,
    seed: int = 0,
    warmup_steps: int = 2,
    sync_debug: bool | None = None,
    device_timing: bool | None = None,
) -> HostSyncInventory:
    """Step ``collector`` ``steps`` times with uniform random actions, as the collector process
    does (step, then its per-step episode statistics read), and list every host read, with the
    allocations, host-device copies and syncs of every phase. ``warmup_steps`` run first,
    unrecorded (one-time work: lazy buffers, a physics graph's capture). ``sync_debug`` (default:
    on a CUDA collector) also runs the steps under CUDA's sync debug mode; ``device_timing`` (default:
    on a CUDA collector) adds a pass timing each phase with the device synchronised at its boundaries."""
    gen = torch.Generator().manual_seed(seed)
    actions = torch.empty(collector.num_envs, collector.action_dim)
    device = str(collector.device)
    if sync_debug is None:
        sync_debug = collector.device.type == "cuda"
    if device_timing is None:
        device_timing = collector.device.type == "cuda"

    def one_step() -> None:
        torch.rand(actions.shape, generator=gen, out=actions)
        actions.mul_(2).sub_(1)
        collector.step(actions.to(collector.device))

    collector.reset_all()
    for _ in range(warmup_steps):
        one_step()
        collector.episode_stats()
    rec = HostReadRecorder()
    rec.watch(collector)
    with rec, cuda_sync_debug(rec.log, device) if sync_debug else nullcontext():
        for _ in range(steps):
            one_step()
            rec.flush_outside()
            collector.episode_stats()  # what unilab/collect/collector_proc.py reads after every step
            _ = collector.nonfinite_worlds_total
            rec.flush_outside()
    events = rec.events()
    synced = device_phase_times(collector, steps, one_step) if device_timing else {}
    method = (
        "TorchFunctionMode (Python-level reads) + TorchDispatchMode (aten host reads, allocations, host-device "
        "copies); phases from the collector's phase timer"
    )
    if sync_debug:
        method += '; also under torch.cuda.set_sync_debug_mode("warn") (rows of kind cuda_sync_debug)'
    if device_timing:
        method += "; a further pass times each phase with the device synchronised at every phase boundary"
    return HostSyncInventory(
        method=method,
        steps=steps,
        num_envs=collector.num_envs,
        device=device,
        rows=summarize(events, steps),
        phase_ops={
            ph: ops.model_copy(update={"device_synced_us": synced.get(ph, 0.0)})
            for ph, ops in phase_ops(rec.log, events, steps).items()
        },
        cuda_sync_debug=sync_debug,
    )
