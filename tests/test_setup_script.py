"""tools/setup.sh checks what it needs before it downloads anything, and says how to get it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import ROOT

# A python3 that answers setup.sh's probes: `--version`, the version check, the venv check and the
# version print of the apt hint.
FAKE_PYTHON = """#!/bin/sh
case "$*" in
  --version) echo "Python {version}" ;;
  *"version_info < (3, 11)"*) exit {old} ;;
  *ensurepip*) exit {no_venv} ;;
  *print*) echo {version} ;;
  *) exit 99 ;;
esac
"""


def _setup(
    tmp_path: Path, *args: str, version: str, no_venv: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    checkout = tmp_path / "checkout"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "setup.sh", checkout / "tools")
    shutil.copy(ROOT / "pyproject.toml", checkout)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = int(tuple(map(int, version.split(".")[:2])) < (3, 11))
    (bin_dir / "python3").write_text(FAKE_PYTHON.format(version=version, old=old, no_venv=int(no_venv)))
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    return subprocess.run(
        ["/bin/bash", str(checkout / "tools" / "setup.sh"), *args],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_old_python_is_named_before_anything_is_downloaded(tmp_path: Path) -> None:
    r = _setup(tmp_path, version="3.10.12")
    assert r.returncode == 1
    assert "unilab needs Python 3.11 or newer, and none is on PATH (Python 3.10.12)" in r.stderr
    assert "PYTHON=/path/to/python3.11" in r.stderr
    assert not (tmp_path / "checkout" / ".venv").exists()


def test_a_missing_venv_module_is_named_with_the_package_to_install(tmp_path: Path) -> None:
    r = _setup(tmp_path, version="3.12", no_venv=True)
    assert r.returncode == 1
    assert "python3 has no working venv module (ensurepip is missing)" in r.stderr
    assert "apt install python3.12-venv" in r.stderr
    assert "failed while" not in r.stderr  # the message says what failed; no second line about it


def test_an_unknown_extra_is_refused_with_the_list(tmp_path: Path) -> None:
    r = _setup(tmp_path, "videos", version="3.12")
    assert r.returncode == 1
    assert "unknown extra 'videos'; the extras are: gpu video profile onnx wandb play all test" in r.stderr


def test_a_named_python_that_is_too_old_is_refused_not_skipped(tmp_path: Path) -> None:
    r = _setup(tmp_path, version="3.10.12", env={"PYTHON": "python3"})
    assert r.returncode == 1
    assert "PYTHON=python3 is older than 3.11 (Python 3.10.12)" in r.stderr
