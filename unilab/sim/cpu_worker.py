"""The worker process of the CPU MuJoCo backend and its wire protocol.

Each worker owns a contiguous slice of worlds in the shared state block. Signalling is one byte
per direction over a pair of pipes per worker (measured against multiprocessing Events and
Connection.send_bytes; the raw pipe round trip was the cheapest, see ``unilab.sim.mujoco_cpu``):

    parent -> worker (cmd pipe):  b"s" step, b"r" reset masked worlds, b"w" publish warnings, b"q" quit
    worker -> parent (done pipe): b"k" done, or b"E" + 4-byte big-endian length + UTF-8 report:
                                  one line for the user, a newline, then the traceback (for UNILAB_DEBUG)

A worker exits when the parent goes away: ``PR_SET_PDEATHSIG`` kills it at once, and an
end-of-file on the cmd pipe (the parent's write end closed) ends its loop. It ignores SIGINT,
SIGTERM and SIGHUP: on Ctrl-C or a signal to the whole process group the parent shuts the workers
down.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

from unilab.lifetime import die_with_parent
from unilab.sim.state_layout import StateLayout

CMD_STEP = b"s"
CMD_RESET = b"r"
CMD_WARNINGS = b"w"
CMD_QUIT = b"q"
REPLY_OK = b"k"
REPLY_ERROR = b"E"
MAX_ERROR_BYTES = 16_000  # well under the 64 KiB pipe buffer, so reporting never blocks
MAX_MESSAGE_BYTES = 2_000  # the user-facing line; the traceback gets the rest


@dataclass(frozen=True)
class WorkerConfig:
    index: int
    start: int  # first world (inclusive)
    stop: int  # last world (exclusive)
    cpu: int | None
    shm_name: str
    layout: StateLayout
    model: Any  # mujoco.MjModel (picklable); typed Any so this module imports without mujoco
    decimation: int
    parent_pid: int
    acc_sensors: bool = True


def error_line(context: str, exc: BaseException) -> str:
    """One line for the user: where, the exception type and its message (newlines folded)."""
    last = traceback.format_exception_only(type(exc), exc)[-1]
    return f"{context}: {' '.join(last.split())}"


def send_error(fd: int, message: str, tb: str) -> None:
    """Report ``message`` (one line) and the traceback ``tb``; the parent shows the traceback only
    under UNILAB_DEBUG. Truncation keeps the message's head and the traceback's tail."""
    head = " ".join(message.split()).encode("utf-8", "replace")[:MAX_MESSAGE_BYTES]
    tail = tb.encode("utf-8", "replace")[-(MAX_ERROR_BYTES - len(head) - 1) :]
    payload = head + b"\n" + tail
    os.write(fd, REPLY_ERROR + struct.pack(">I", len(payload)) + payload)


def worker_main(cfg: WorkerConfig, cmd_conn: Connection, done_conn: Connection) -> None:
    cmd_fd, done_fd = cmd_conn.fileno(), done_conn.fileno()
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the parent ends us (quit, or its death)
            signal.signal(sig, signal.SIG_IGN)
        die_with_parent(cfg.parent_pid)
        if cfg.cpu is not None:
            os.sched_setaffinity(0, {cfg.cpu})
        if "torch" in sys.modules:  # imported by the parent's __main__ under spawn; keep it to one thread
            sys.modules["torch"].set_num_threads(1)
        from unilab.sim.cpu_stepper import WorldStepper  # imports mujoco, after pinning

        shm = SharedMemory(name=cfg.shm_name)
        views = {name: a[cfg.start : cfg.stop] for name, a in cfg.layout.arrays(shm.buf).items()}
        stepper = WorldStepper(cfg.model, views, cfg.decimation, acc_sensors=cfg.acc_sensors)
    except BaseException as exc:
        send_error(done_fd, error_line(f"worker {cfg.index} failed to start", exc), traceback.format_exc())
        os._exit(3)
    os.write(done_fd, REPLY_OK)

    while True:
        cmd = os.read(cmd_fd, 1)
        if not cmd or cmd == CMD_QUIT:
            break
        try:
            if cmd == CMD_STEP:
                stepper.step()
            elif cmd == CMD_RESET:
                stepper.reset()
            elif cmd == CMD_WARNINGS:
                stepper.write_warnings()
            else:
                raise RuntimeError(f"unknown command {cmd!r}")
        except BaseException as exc:
            where = f"worker {cfg.index} (worlds {cfg.start}..{cfg.stop - 1})"
            send_error(done_fd, error_line(where, exc), traceback.format_exc())
            os._exit(4)
        os.write(done_fd, REPLY_OK)

    # Exit without closing the mapping or tearing down the interpreter: the views are in use until
    # the very end, the kernel releases both, and the parent owns (and unlinks) the block.
    os._exit(0)
