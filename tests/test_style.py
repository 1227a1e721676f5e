"""ruff is part of the test suite, so CI fails on lint and formatting like on any other defect.
ruff is pinned in the test extra: another version may format differently."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def _ruff() -> str:
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(ROOT / ".venv" / "bin"))
    if ruff is None:
        pytest.fail("ruff is not installed: bash tools/setup.sh test")
    return ruff


def test_ruff_clean() -> None:
    r = subprocess.run([_ruff(), "check", "unilab", "tests", "tools"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_formatted() -> None:
    """`ruff format unilab tests tools` fixes what this reports."""
    r = subprocess.run(
        [_ruff(), "format", "--check", "unilab", "tests", "tools"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_python_version() -> None:
    assert sys.version_info >= (3, 11)
