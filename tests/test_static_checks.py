"""Static checks as tests: pyrefly type-checks unilab/ (config and baseline in pyproject.toml),
and import-linter holds the import contracts ([tool.importlinter]): layers, the torch-free planner
side, and no import cycle between siblings. Function-level (lazy) imports count in all three."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return str(path)


def test_pyrefly_finds_no_type_error_beyond_the_baseline() -> None:
    r = subprocess.run(
        [
            _tool("pyrefly"),
            "check",
            "--python-interpreter-path",
            sys.executable,
            "--summary=none",
            "--output-format",
            "min-text",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]


def test_import_contracts_hold() -> None:
    r = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-2000:]
