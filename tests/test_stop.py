"""Ctrl-C handling that a run directory's consistency depends on."""

from __future__ import annotations

import multiprocessing as mp
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from unilab.stop import signals_ignored


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
    from unilab.stop import StopFlag

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


def _report_blocked(q: mp.Queue) -> None:
    q.put(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))


def test_a_stop_signal_during_a_spawn_is_delivered_after_it_and_the_child_is_born_blocking_it() -> None:
    """The collector is started this way: the learner keeps a SIGTERM that arrives mid-spawn (it was
    ignored, so the run went on), and the child cannot be killed by one before it ignores them."""
    from unilab.stop import signals_blocked

    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        with signals_blocked(signal.SIGTERM, signal.SIGHUP):
            p = ctx.Process(target=_report_blocked, args=(q,))
            p.start()
            signal.raise_signal(signal.SIGTERM)
            assert got == []  # held while the child is being born
        assert got == [signal.SIGTERM]
        assert q.get(timeout=60) == sorted([int(signal.SIGHUP), int(signal.SIGTERM)])
        p.join(timeout=30)
    finally:
        signal.signal(signal.SIGTERM, old)


_CATCH = 'try:\n    exec("raise KeyboardInterrupt", {})\nexcept KeyboardInterrupt:\n    pass\n'
_ENDINGS = {
    # What CPython does on its own: the caught interrupt turns exit 7 into death by SIGINT.
    "sys.exit": (f"import sys\n{_CATCH}sys.exit(7)\n", -signal.SIGINT),
    "exit_with": (f"from unilab.exit_status import exit_with\n{_CATCH}exit_with(7)\n", 7),
    # `python -m unilab`, its command having handled a stop (exit 130) after the last import.
    "unilab": (
        "import runpy, sys\n"
        "import unilab.cli.main as cli\n"
        "def stopped(argv=None):\n"
        '    try:\n        exec("raise KeyboardInterrupt", {})\n    except KeyboardInterrupt:\n        return 130\n'
        "cli.main = stopped\n"
        "runpy.run_module('unilab', run_name='__main__')\n",
        130,
    ),
}


@pytest.mark.parametrize("ending", sorted(_ENDINGS))
def test_python_m_keeps_the_exit_status_after_a_caught_keyboard_interrupt(tmp_path: Path, ending: str) -> None:
    """A Ctrl-C or SIGTERM handled during an apply's imports (exit 130, no run directory) can land
    in source that CPython runs with exec (dataclasses build their methods so); under `python -m`
    the interpreter would then end the process by SIGINT after unilab chose its status."""
    source, code = _ENDINGS[ending]
    (tmp_path / "caught_in_exec.py").write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "caught_in_exec"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == code, proc.stderr


_INTERRUPTED_IMPORT = """
import runpy, sys

class InterruptTheCli:  # a Ctrl-C while the CLI module itself imports, the first instants of a command
    def find_spec(self, name, path=None, target=None):
        if name == "unilab.cli.main":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, InterruptTheCli())
runpy.run_module("unilab", run_name="__main__")
"""


def test_a_ctrl_c_while_the_cli_imports_is_an_interruption_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "interrupted_import.py").write_text(_INTERRUPTED_IMPORT)
    proc = subprocess.run(
        [sys.executable, "-m", "interrupted_import", "plan", "specs/g1.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130 and proc.stderr == "interrupted\n", proc.stderr
