"""The manifest's record of which unilab code ran: the checkout's commit and whether it was
modified, and nothing for an installed copy that happens to live inside another repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from unilab.records.manifest_io import checkout_state


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _repo(root: Path, package: str) -> Path:
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "c")
    return pkg


def test_a_checkout_records_its_commit_and_whether_its_package_was_modified(tmp_path: Path) -> None:
    pkg = _repo(tmp_path, "unilab")
    head = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "notes.txt").write_text("outside the package: not the code that ran")
    assert checkout_state(pkg) == (head, False)
    (pkg / "new_module.py").write_text("")  # untracked, yet importable: it ran
    assert checkout_state(pkg) == (head, True)
    (pkg / "new_module.py").unlink()
    (pkg / "__init__.py").write_text("x = 1\n")
    assert checkout_state(pkg) == (head, True)


def test_an_installed_copy_inside_another_repository_records_no_commit(tmp_path: Path) -> None:
    pkg = _repo(tmp_path, ".venv/lib/python3.11/site-packages/unilab")
    assert checkout_state(pkg) == (None, None)


def test_a_copy_outside_any_repository_records_no_commit(tmp_path: Path) -> None:
    (tmp_path / "unilab").mkdir()
    assert checkout_state(tmp_path / "unilab") == (None, None)
