"""Ctrl-C handling that a run directory's consistency depends on."""

from __future__ import annotations

import multiprocessing as mp
import signal

from unilab.run.stop import signals_ignored


def _report_sigint(q: mp.Queue) -> None:
    q.put(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)


def test_a_child_started_with_sigint_ignored_is_born_ignoring_it() -> None:
    """The collector is started this way: a Ctrl-C during its imports must reach only the
    learner, which stops the run cleanly, not kill the half-started child with a traceback."""
    ctx = mp.get_context("spawn")
    for ignore in (True, False):
        q = ctx.Queue()
        p = ctx.Process(target=_report_sigint, args=(q,))
        if ignore:
            with signals_ignored(signal.SIGINT):
                p.start()
        else:
            p.start()
        ignored = q.get(timeout=60)
        p.join(timeout=30)
        assert ignored is ignore
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # restored in the parent


def test_signals_ignored_drops_a_sigint_inside_the_block_only() -> None:
    seen: list[int] = []
    old = signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
    try:
        with signals_ignored(signal.SIGINT):
            signal.raise_signal(signal.SIGINT)
            assert seen == []  # ignored inside: the record of the run's end is not cut short
        signal.raise_signal(signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_closing_session_stops_once_and_nohup_is_respected() -> None:
    from unilab.run.stop import StopFlag

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        flag = StopFlag()
        flag.install()
        signal.raise_signal(signal.SIGHUP)
        signal.raise_signal(signal.SIGHUP)  # the second of a logout: ignored, not the default (death)
        assert flag() and flag.signal == signal.SIGHUP
        try:  # a Ctrl-C after the first stop signal stops at once
            signal.raise_signal(signal.SIGINT)
            raise AssertionError("no KeyboardInterrupt")
        except KeyboardInterrupt:
            pass
        flag.restore()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` starts a process
        flag = StopFlag()
        flag.install()
        signal.raise_signal(signal.SIGHUP)
        assert not flag() and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        flag.restore()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
