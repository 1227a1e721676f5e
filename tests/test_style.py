"""ruff is part of the test suite, so CI fails on lint like on any other defect."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(ROOT / ".venv" / "bin"))
    if ruff is None:
        pytest.fail("ruff is not installed: bash tools/setup.sh test")
    r = subprocess.run([ruff, "check", "unilab", "tests", "tools"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_python_version() -> None:
    assert sys.version_info >= (3, 11)
