"""A physics worker's exception reaches the user as one line (type and message); its traceback only
under UNILAB_DEBUG."""

from __future__ import annotations

import os

import pytest
import torch

from tests.sim_models import small_humanoid_xml
from unilab.errors import UnilabError
from unilab.sim.cpu_worker import MAX_ERROR_BYTES, MAX_MESSAGE_BYTES, REPLY_ERROR, error_line, send_error
from unilab.sim.mujoco_cpu import MujocoCpuBackend


def _failed_step() -> UnilabError:
    b = MujocoCpuBackend(small_humanoid_xml(), 4, 4, None, workers=2)
    try:
        os.write(b._res.workers[0].cmd_fd, b"x")  # a command the worker does not know: it raises
        with pytest.raises(UnilabError) as info:
            b.step(torch.zeros(4, b.dims.nu))
        return info.value
    finally:
        b.close()


def test_a_worker_exception_is_one_line_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNILAB_DEBUG", raising=False)
    err = _failed_step()
    assert err.detail == "worker 0 (worlds 0..1): RuntimeError: unknown command b'x'", err.detail
    assert "Traceback" not in err.render()
    assert "UNILAB_DEBUG=1" in err.fix


def test_unilab_debug_adds_the_worker_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNILAB_DEBUG", "1")
    err = _failed_step()
    first, rest = err.detail.split("\n", 1)
    assert first == "worker 0 (worlds 0..1): RuntimeError: unknown command b'x'"
    assert rest.startswith("Traceback (most recent call last)") and "RuntimeError" in rest


def test_a_worker_that_exited_before_the_next_command_is_named_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker reported its error and exited before the next command reached it (writing that
    command fails with a broken pipe): its report is still read, not "left no error report"."""
    monkeypatch.delenv("UNILAB_DEBUG", raising=False)
    b = MujocoCpuBackend(small_humanoid_xml(), 4, 4, None, workers=2)
    try:
        w = b._res.workers[0]
        os.write(w.cmd_fd, b"x")
        w.process.join(30)
        assert w.process.exitcode is not None
        with pytest.raises(UnilabError) as info:
            b.step(torch.zeros(4, b.dims.nu))
    finally:
        b.close()
    assert info.value.detail == "worker 0 (worlds 0..1): RuntimeError: unknown command b'x'", info.value.detail


def test_error_line_folds_a_multiline_message() -> None:
    line = error_line("worker 3 failed to start", ValueError("bad model\n  at line 2"))
    assert line == "worker 3 failed to start: ValueError: bad model at line 2"


def test_a_long_report_keeps_the_message_head_and_the_traceback_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    r, w = os.pipe()
    try:
        send_error(w, "m" * (2 * MAX_MESSAGE_BYTES), "t" * (2 * MAX_ERROR_BYTES) + "END")
        assert os.read(r, 1) == REPLY_ERROR
        monkeypatch.setenv("UNILAB_DEBUG", "1")
        text = MujocoCpuBackend._read_error(r)
    finally:
        os.close(r)
        os.close(w)
    message, tb = text.split("\n", 1)
    assert message == "m" * MAX_MESSAGE_BYTES
    assert tb.endswith("END") and len(text.encode()) <= MAX_ERROR_BYTES
