"""Graceful stop on the first SIGINT, SIGTERM or SIGHUP (Ctrl-C; a scheduler, `timeout` or
`docker stop`; a closed SSH session): the rank loop polls the flag and ends the run with a final
checkpoint. After it, a Ctrl-C or SIGTERM stops at once; further SIGHUPs are ignored (a closing
session sends more than one). A signal the process was started ignoring (`nohup` ignores SIGHUP)
stays ignored."""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The signals that ask a run to stop. Its child processes (collector, physics workers) ignore them:
# a signal to the whole process group is the learner's to act on, and they end when it tells them to
# (or when it dies: PR_SET_PDEATHSIG).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


_AFTER_THE_FIRST = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_IGN,
}


class StopFlag:
    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # `nohup` and the like asked for that
                self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = signum
        # From now on: Ctrl-C raises KeyboardInterrupt, SIGTERM kills (stop at once); a SIGHUP, which
        # a closing session sends again within milliseconds, no longer counts.
        for sig, then in _AFTER_THE_FIRST.items():
            if sig in self._old:
                signal.signal(sig, then)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def __call__(self) -> bool:
        return self.signal is not None


@contextmanager
def _handlers(sigs: tuple[int, ...], handler: Any = None) -> Iterator[None]:
    """``handler`` for each of ``sigs`` inside the block (None: leave them as they are), the handlers
    from entry again on exit. Main thread only (Python sets handlers there); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in sigs}
    if handler is not None:
        for s in sigs:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            if h is not None:  # None: a handler not installed from Python, left as it is
                signal.signal(s, h)


@contextmanager
def signals_ignored(*signums: int) -> Iterator[None]:
    """Ignore ``signums`` inside the block (main thread only; elsewhere a no-op): a further Ctrl-C
    while the run records its end, or while a child process is being born, would otherwise leave a
    manifest that still says "running" or a child that dies mid-import with a traceback."""
    with _handlers(signums or (signal.SIGINT,), signal.SIG_IGN):
        yield


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP interrupt like Ctrl-C (KeyboardInterrupt) until a
    StopFlag takes over: a stop during start-up (imports, the run directory, the collector's birth)
    then goes through the same clean-up as Ctrl-C, not the default action that kills the process
    and leaves a run directory with only its plan. Main thread only; elsewhere a no-op."""
    # `nohup` and the like: a signal the user asked to ignore stays ignored.
    sigs = tuple(s for s in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) is not signal.SIG_IGN)
    with _handlers(sigs, signal.default_int_handler):
        yield


@contextmanager
def stop_signals_restored() -> Iterator[None]:
    """The stop signals' handlers as they were on entry, back on exit (main thread only)."""
    with _handlers(STOP_SIGNALS):
        yield


def ignore_stop_signals() -> None:
    """From now on the stop signals are ignored (main thread only; elsewhere a no-op): for the
    bookkeeping after a run has ended. The caller's enclosing handlers restore them on the way out."""
    if threading.current_thread() is threading.main_thread():
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


@contextmanager
def signals_via_helper_thread(*signums: int) -> Iterator[None]:
    """Block ``signums`` in this thread while a helper thread, started before the block, leaves them
    deliverable: the kernel hands them to the helper and Python still runs their handlers in the
    main thread (within one bytecode, or when a blocking call there returns). Child processes
    started inside inherit the block, across exec, and unblock the signals once they can handle
    them. Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done = threading.Event()
    helper = threading.Thread(target=done.wait, name="unilab-signals", daemon=True)
    helper.start()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        done.set()
        helper.join()


@contextmanager
def signals_blocked(*signums: int) -> Iterator[None]:
    """Block ``signums`` inside the block (this thread's mask, which a child process started inside
    inherits, across exec too); one that arrives meanwhile is delivered when the block ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def import_uninterrupted(*modules: str) -> None:
    """Import ``modules`` with the stop signals held until every one is in, then delivered as they
    would have been. A KeyboardInterrupt inside `import torch` leaves torch half initialised in C,
    and every later use in that interpreter fails or crashes it: a notebook that interrupts
    `unilab.apply` during start-up must be able to call it again. In the main thread only (Python
    runs signal handlers nowhere else); elsewhere the imports simply run."""
    if threading.current_thread() is not threading.main_thread():
        for m in modules:
            importlib.import_module(m)
        return
    held: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in STOP_SIGNALS}
    try:
        for m in modules:
            importlib.import_module(m)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    for sig in dict.fromkeys(held):  # each once, in the order they came, to the handlers from entry
        signal.raise_signal(sig)
