"""CPU MuJoCo backend: ``num_envs`` worlds stepped by C MuJoCo in ``workers`` processes.

``mj_step`` holds the GIL, so worlds are split into contiguous slices, one per worker process
(spawn context, pinned to one CPU each when ``cpu_ids`` is given). Every state tensor is a
``torch.from_numpy`` view of one ``multiprocessing.shared_memory`` block (layout in
``unilab.sim.state_layout``); workers write their rows in place, nothing is pickled per step.

Signalling (``tools/bench_physics.py --signalling`` on the quiet 2-core development machine:
empty round trip parent -> workers -> parent, spawn context): one byte over a pipe per direction
per worker, waited with ``poll``: 9 us with one worker, 49 us with two (two workers and the
parent share two cores); ``multiprocessing.Event`` pairs 260-290 us; ``Connection.send_bytes`` /
``recv_bytes`` 83-93 us. Under load from other processes all of them grow and reorder by noise.
So the backend uses raw pipes. The parent polls the done pipes together with every worker's
process sentinel, so a worker that dies is noticed at once (``UnilabError`` naming the worker
and its exit code), and a worker that hangs is reported after ``step_timeout_s``.

``workers=1`` without ``cpu_ids`` steps in the calling process (no shared memory, no
signalling). With ``cpu_ids`` every worker, even a single one, is a pinned process: the caller's
own CPU affinity is never changed.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import select
import signal
import struct
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
import torch

from unilab.errors import UnilabError
from unilab.sim.contract import ModelDims, PhysicsState
from unilab.sim.cpu_worker import (
    CMD_QUIT,
    CMD_RESET,
    CMD_STEP,
    CMD_WARNINGS,
    REPLY_ERROR,
    REPLY_OK,
    WorkerConfig,
    worker_main,
)
from unilab.sim.mjmodel import load_mj_model, model_dims
from unilab.sim.state_layout import STATE_FIELDS, StateLayout
from unilab.sim.world_params import WorldParamTargets, check_param_names, not_built_with_world_params

WAIT_SLICE_S = 1.0  # the step wait polls the workers' replies at least this often
SUSPENDED_GAP_S = 5.0  # a poll this much longer than asked: this process was stopped, not its workers slow


@dataclass
class _Worker:
    index: int
    start: int
    stop: int
    cpu: int | None
    process: Any  # multiprocessing SpawnProcess
    cmd_conn: Connection  # parent's write end
    done_conn: Connection  # parent's read end

    def __post_init__(self) -> None:
        self.cmd_fd = self.cmd_conn.fileno()
        self.done_fd = self.done_conn.fileno()

    def describe(self) -> str:
        cpu = f", cpu {self.cpu}" if self.cpu is not None else ""
        return f"physics worker {self.index} (pid {self.process.pid}{cpu}, worlds {self.start}..{self.stop - 1})"


@dataclass
class _Resources:
    """What must be released at close, kept apart from the backend so a finalizer can own it."""

    workers: list[_Worker] = field(default_factory=list)
    shm: _SharedBlock | None = None
    shm_unlinked: bool = False
    closed: bool = False


def _release(res: _Resources, quit_timeout_s: float = 5.0) -> None:
    if res.closed:
        return
    res.closed = True
    for w in res.workers:
        try:
            os.write(w.cmd_fd, CMD_QUIT)
        except OSError:
            pass  # already dead
    deadline = time.monotonic() + quit_timeout_s
    for w in res.workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5.0)
        w.cmd_conn.close()
        w.done_conn.close()
        w.process.close()
    if res.shm is not None:
        _unlink(res)
        res.shm.close()


def _unlink(res: _Resources) -> None:
    if res.shm is None or res.shm_unlinked:
        return
    res.shm_unlinked = True
    with contextlib.suppress(FileNotFoundError):
        res.shm.unlink()


class _SharedBlock(SharedMemory):
    """SharedMemory that never unmaps while views exist.

    ``SharedMemory.close`` unmaps the block even when numpy/torch views of it are alive (numpy keeps
    a reference to the buffer object, not an export, so nothing stops it): reading a state tensor
    after ``close`` would then crash the interpreter. Here close only closes the descriptor; the
    mapping is released by reference counting when the last view is gone.
    """

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()


def _split(num_envs: int, workers: int) -> list[tuple[int, int]]:
    base, extra = divmod(num_envs, workers)
    bounds, start = [], 0
    for k in range(workers):
        stop = start + base + (1 if k < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class MujocoCpuBackend:
    """``PhysicsBackend`` over C MuJoCo. See the module docstring for the process layout."""

    def __init__(
        self,
        model_xml: str,
        num_envs: int,
        decimation: int,
        cpu_ids: list[int] | None = None,
        workers: int = 1,
        *,
        step_timeout_s: float = 120.0,
        start_timeout_s: float = 120.0,
        world_params: bool = False,
        acc_sensors: bool = True,
    ) -> None:
        _check_args(num_envs, decimation, cpu_ids, workers)
        model = load_mj_model(model_xml)
        self.num_envs = num_envs
        self.decimation = decimation
        self.workers = workers
        self.acc_sensors = acc_sensors
        self.cpu_ids = list(cpu_ids) if cpu_ids is not None else None
        self.dims: ModelDims = model_dims(model)
        self.device = torch.device("cpu")
        self._step_timeout_s = step_timeout_s
        self._failure: UnilabError | None = None
        self._res = _Resources()
        self._finalizer = weakref.finalize(self, _release, self._res)
        layout = StateLayout.build(num_envs, self.dims)

        if workers == 1 and self.cpu_ids is None:
            from unilab.sim.cpu_stepper import WorldStepper

            buffer = bytearray(layout.total_bytes)
            self._arrays = layout.arrays(buffer)
            self._stepper: Any = WorldStepper(model, self._arrays, decimation, acc_sensors=acc_sensors)
        else:
            self._stepper = None
            self._res.shm = _SharedBlock(create=True, size=layout.total_bytes)
            self._arrays = layout.arrays(self._res.shm.buf)
            self._start_workers(model, layout, start_timeout_s)

        self.state = PhysicsState(**{name: torch.from_numpy(self._arrays[name]) for name in STATE_FIELDS})
        self._reset_mask = self._arrays["reset_mask"]
        # Domain randomization: values are staged here and applied by each world's stepper at its
        # next command (unilab.sim.cpu_stepper); targets resolved now so a bad model fails at build.
        self._world_params = WorldParamTargets.from_model(model) if world_params else None
        if self._world_params is not None:  # staged values start nominal: one field may be set alone
            for name, values in self._world_params.identity_params(num_envs).items():
                self._arrays[name][:] = values

    # ------------------------------------------------------------------ workers

    def _start_workers(self, model: Any, layout: StateLayout, timeout_s: float) -> None:
        ctx = mp.get_context("spawn")
        shm_name = self._res.shm.name if self._res.shm is not None else ""
        for k, (start, stop) in enumerate(_split(self.num_envs, self.workers)):
            cmd_r, cmd_w = ctx.Pipe(duplex=False)
            done_r, done_w = ctx.Pipe(duplex=False)
            cpu = self.cpu_ids[k] if self.cpu_ids is not None else None
            cfg = WorkerConfig(
                k, start, stop, cpu, shm_name, layout, model, self.decimation, os.getpid(), self.acc_sensors
            )
            proc = ctx.Process(target=worker_main, args=(cfg, cmd_r, done_w), name=f"unilab-physics-{k}", daemon=True)
            proc.start()
            # Keep only the parent's ends: the worker then sees EOF on its cmd pipe when we go.
            cmd_r.close()
            done_w.close()
            self._res.workers.append(_Worker(k, start, stop, cpu, proc, cmd_w, done_r))
        self._poll = select.poll()
        self._fd_owner: dict[int, tuple[str, _Worker]] = {}
        for w in self._res.workers:
            self._poll.register(w.done_fd, select.POLLIN)
            self._poll.register(w.process.sentinel, select.POLLIN)
            self._fd_owner[w.done_fd] = ("done", w)
            self._fd_owner[w.process.sentinel] = ("exit", w)
        self._wait(self._res.workers, timeout_s, "start")
        # Every process has the block mapped: drop its name now, so that nothing is left in /dev/shm
        # however the processes end (kill -9 of the whole process group included). The mappings
        # stay valid until each process unmaps or exits.
        _unlink(self._res)

    def _command(self, cmd: bytes, workers: list[_Worker], what: str) -> None:
        try:
            for w in workers:
                try:
                    os.write(w.cmd_fd, cmd)
                except BrokenPipeError:  # it exited already: its error report may be waiting in its reply pipe
                    self._fail(w, what, self._pending_error(w))
            self._wait(workers, self._step_timeout_s, what)
        except UnilabError:
            raise
        except BaseException as exc:  # e.g. Ctrl-C mid-wait: unread replies would desynchronise the pipes
            self._interrupted(what, exc)
            raise

    def _interrupted(self, what: str, exc: BaseException) -> None:
        self._failure = UnilabError(
            f"the CPU physics backend was interrupted during {what} ({type(exc).__name__})",
            detail="some worlds may have advanced and others not, so the backend was closed",
        )
        self.close()

    def _wait(self, workers: list[_Worker], timeout_s: float, what: str) -> None:
        pending = {w.index for w in workers}
        deadline = time.monotonic() + timeout_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                names = ", ".join(w.describe() for w in self._res.workers if w.index in pending)
                self._abort(
                    UnilabError(
                        f"physics workers did not finish {what} within {timeout_s:g} s: {names}",
                        detail="the worker processes are alive but unresponsive (stuck or starved of CPU)",
                        fix="check CPU load and the physics model; raise step_timeout_s for very large slices",
                    )
                )
            # Waited in slices: a slice that took far longer than asked means this process was
            # suspended (Ctrl-Z, SIGSTOP of the job), its workers with it; that time is not theirs.
            asked = min(remaining, WAIT_SLICE_S)
            before = time.monotonic()
            events = self._poll.poll(max(1, int(asked * 1000)))
            if (slept := time.monotonic() - before) > asked + SUSPENDED_GAP_S:
                deadline += slept - asked
            # Replies first: a worker that reported an error and exited has both fds ready.
            events.sort(key=lambda e: self._fd_owner[e[0]][0] != "done")
            for fd, _ in events:
                kind, w = self._fd_owner[fd]
                if kind == "done":
                    reply = os.read(fd, 1)
                    if reply == REPLY_OK and w.index in pending:
                        pending.discard(w.index)
                        continue
                    self._fail(w, what, self._read_error(fd) if reply == REPLY_ERROR else None)
                else:
                    self._fail(w, what, self._pending_error(w))

    def _pending_error(self, w: _Worker) -> str | None:
        """A worker that exited may have left its error report in the reply pipe even when this
        poll saw only its exit: read it rather than reporting the exit without a cause."""
        if not select.select([w.done_fd], [], [], 0)[0]:
            return None
        reply = os.read(w.done_fd, 1)
        return self._read_error(w.done_fd) if reply == REPLY_ERROR else None

    @staticmethod
    def _read_error(fd: int) -> str:
        """The worker's one-line report; its traceback too only under UNILAB_DEBUG (a traceback
        reaching the user, or the manifest's first_error, is a bug)."""
        (n,) = struct.unpack(">I", _read_exact(fd, 4))
        message, _, tb = _read_exact(fd, n).decode("utf-8", "replace").partition("\n")
        if os.environ.get("UNILAB_DEBUG") and tb.strip():
            return f"{message}\n{tb.rstrip()}"
        return message

    def _fail(self, w: _Worker, what: str, error_text: str | None) -> None:
        w.process.join(2.0)
        code = w.process.exitcode
        if code is None:
            status = "is alive but sent an invalid reply"
        elif code < 0:
            status = f"died from signal {signal.Signals(-code).name} (exit code {code})"
        else:
            status = f"exited with exit code {code}"
        self._abort(
            UnilabError(
                f"{w.describe()} {status} during {what}",
                detail=error_text
                or "the worker left no error report (killed from outside, e.g. SIGKILL or the OOM killer)",
                fix="see the worker's error above (UNILAB_DEBUG=1 adds its traceback)"
                if error_text
                else "check what killed it: memory (dmesg shows the OOM killer's choices) and other processes",
            )
        )

    def _abort(self, error: UnilabError) -> None:
        self._failure = error
        self.close()
        raise error

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise UnilabError(
                "the CPU physics backend is unusable after an earlier failure",
                detail=self._failure.render(),
                fix="build a new backend",
            )
        if self._res.closed:
            raise UnilabError("the CPU physics backend is closed", fix="build a new backend")

    # ------------------------------------------------------------------ contract

    def step(self, ctrl: torch.Tensor) -> PhysicsState:
        self._check_usable()
        if ctrl is not self.state.ctrl:
            if ctrl.shape != self.state.ctrl.shape:
                raise UnilabError(
                    f"ctrl has shape {tuple(ctrl.shape)}, the CPU physics backend expects "
                    f"{tuple(self.state.ctrl.shape)}"
                )
            self.state.ctrl.copy_(ctrl)
        if self._stepper is not None:
            try:
                self._stepper.step()
            except BaseException as exc:
                self._interrupted("step", exc)
                raise
        else:
            self._command(CMD_STEP, self._res.workers, "step")
        return self.state

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> PhysicsState:
        self._check_usable()
        s = self.state
        if mask.shape != (self.num_envs,) or qpos.shape != s.qpos.shape or qvel.shape != s.qvel.shape:
            raise UnilabError(
                f"reset got mask {tuple(mask.shape)}, qpos {tuple(qpos.shape)}, qvel {tuple(qvel.shape)}; "
                f"expected {(self.num_envs,)}, {tuple(s.qpos.shape)}, {tuple(s.qvel.shape)}"
            )
        mask_np = mask.detach().to("cpu", torch.bool).numpy()
        if not mask_np.any():
            return s
        m = torch.from_numpy(mask_np).unsqueeze(1)
        torch.where(m, qpos.to(torch.float32), s.qpos, out=s.qpos)
        torch.where(m, qvel.to(torch.float32), s.qvel, out=s.qvel)
        s.ctrl.masked_fill_(m, 0.0)
        self._reset_mask[:] = mask_np
        if self._stepper is not None:
            try:
                self._stepper.reset()
            except BaseException as exc:
                self._interrupted("reset", exc)
                raise
        else:
            involved = [w for w in self._res.workers if mask_np[w.start : w.stop].any()]
            self._command(CMD_RESET, involved, "reset")
        return s

    @property
    def world_params_enabled(self) -> bool:
        return self._world_params is not None

    def set_world_params(self, mask: torch.Tensor, **values: torch.Tensor) -> None:
        """Domain randomization hook (``unilab.tasks.events.ModelParamsBackend``): the named per-world
        parameters (``unilab.sim.world_params.WORLD_PARAMS``) of the worlds in ``mask``, in effect
        from the next step or reset."""
        self._check_usable()
        if self._world_params is None:
            raise not_built_with_world_params("CPU")
        check_param_names(values)
        a = self._arrays
        m = mask.detach().to("cpu", torch.bool).numpy()
        for name, v in values.items():
            a[name][m] = v.detach().to("cpu", torch.float32).numpy()[m]
        a["params_dirty"][m] = 1

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> MujocoCpuBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ introspection

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._res.workers]

    @staticmethod
    def warning_names() -> list[str]:
        """MuJoCo's warning kinds, in the column order of ``world_warnings``: `bad_qacc`, ..."""
        import mujoco

        return [k.removeprefix("mjWARN_").lower() for k in mujoco.mjtWarning.__members__ if k != "mjNWARNING"]

    def world_warnings(self) -> np.ndarray:
        """MuJoCo's warning counts of each world since the backend started, [num_envs, kinds] (a copy;
        one command to the workers)."""
        self._check_usable()
        if self._stepper is not None:
            self._stepper.write_warnings()
        else:
            self._command(CMD_WARNINGS, self._res.workers, "warning report")
        return self._arrays["warnings"].copy()

    def diagnostics(self) -> dict[str, Any]:
        """Layout and MuJoCo warning totals (auto-resets on bad qpos/qvel/qacc, full contact buffers)."""
        names = self.warning_names()
        totals = self.world_warnings().sum(axis=0)
        return {
            "backend": "mujoco",
            "workers": self.workers,
            "in_process": self._stepper is not None,
            "worker_pids": self.worker_pids(),
            "cpu_ids": self.cpu_ids,
            "signalling": "in-process" if self._stepper is not None else "pipe+poll",
            "mujoco_warnings": {name: int(n) for name, n in zip(names, totals, strict=True)},
        }


def _read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _check_args(num_envs: int, decimation: int, cpu_ids: list[int] | None, workers: int) -> None:
    if num_envs < 1 or decimation < 1 or workers < 1:
        raise UnilabError(
            f"the CPU physics backend needs num_envs, decimation and workers >= 1 "
            f"(got {num_envs}, {decimation}, {workers})"
        )
    if workers > num_envs:
        raise UnilabError(
            f"{workers} physics workers for {num_envs} worlds: every worker needs at least one world",
            fix="use at most num_envs workers",
        )
    if cpu_ids is not None:
        if len(cpu_ids) != workers:
            raise UnilabError(
                f"cpu_ids lists {len(cpu_ids)} CPUs for {workers} physics workers; one CPU per worker is needed",
                fix="pass exactly one CPU id per worker",
            )
        allowed = os.sched_getaffinity(0)
        outside = sorted(set(cpu_ids) - allowed)
        if outside:
            raise UnilabError(
                f"cpu_ids {outside} are not in this process's CPU set {sorted(allowed)}",
                fix="pick CPU ids from `taskset -cp $$` / the plan's CPU block",
            )


def build(
    model_xml: str,
    num_envs: int,
    decimation: int,
    *,
    cpu_ids: list[int] | None,
    workers: int,
    world_params: bool,
    acc_sensors: bool,
    **_gpu_options: Any,  # device, physics_graph, njmax, nconmax: make_backend refused any that applies
) -> MujocoCpuBackend:
    """The backend `unilab.sim.backends.MUJOCO` names (unilab.sim.factory.make_backend)."""
    return MujocoCpuBackend(
        model_xml,
        num_envs,
        decimation,
        cpu_ids=cpu_ids,
        workers=workers,
        world_params=world_params,
        acc_sensors=acc_sensors,
    )
