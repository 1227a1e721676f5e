"""A full disk under TensorBoard's writer thread: the run reports it in the foreground, and the
thread's own traceback is not printed on the way (a real full file system: a 64 KiB tmpfs in a
mount namespace of the test's own)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys, time
if sys.argv[1] == "unilab":
    from unilab.records.recorder import _quiet_writer_thread_errors
    _quiet_writer_thread_errors()
from torch.utils.tensorboard import SummaryWriter
w = SummaryWriter(sys.argv[2], flush_secs=0.1)
try:
    with open(sys.argv[2] + "/filler", "wb") as f:
        while True:
            f.write(b"\\0" * 4096)
            f.flush()
except OSError:
    pass
try:
    for i in range(200):
        w.add_scalar("x", float(i), i)
        w.flush()
        time.sleep(0.01)
    print("no error")
except OSError as e:
    print("raised in the foreground:", e.strerror)
    time.sleep(1.0)  # the writer thread's own report, if any, is printed by now
"""


def _full_disk_run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    (tmp_path / "s.py").write_text(SCRIPT)
    inner = f"mount -t tmpfs -o size=64k tmpfs {mnt} && exec {sys.executable} {tmp_path / 's.py'} {mode} {mnt}"
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_full_disk_under_the_tensorboard_writer_prints_no_thread_traceback(tmp_path: Path) -> None:
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True).returncode
    ):
        pytest.skip("needs user and mount namespaces (unshare) for a small full file system")
    plain = _full_disk_run(tmp_path, "plain")  # the failure this guards against, seen first
    assert "raised in the foreground: No space left on device" in plain.stdout, plain.stderr
    assert "Exception in thread" in plain.stderr and "Traceback" in plain.stderr
    quiet = _full_disk_run(tmp_path, "unilab")
    assert "raised in the foreground: No space left on device" in quiet.stdout, quiet.stderr
    assert "Traceback" not in quiet.stderr and "Exception in thread" not in quiet.stderr
