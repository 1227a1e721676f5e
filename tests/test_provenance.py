"""The manifest's record of which unilab code ran: the checkout's commit, whether it was modified
and then its changes as a patch, and nothing for an installed copy that happens to live inside
another repository."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from unilab.manifest.models import Provenance
from unilab.records.manifest_io import CODE_DIFF_CAP, checkout_diff, checkout_state, keep_code_diff


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


def test_a_dirty_checkout_keeps_its_changes_as_a_patch_that_rebuilds_the_code(tmp_path: Path) -> None:
    """What ran is the commit plus the patch: applied to a clean copy of the commit, it gives back
    the package's files exactly, modified and new ones alike; files outside the package stay out."""
    src = tmp_path / "src"
    pkg = _repo(src, "unilab")
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "new_module.py").write_text("y = 2\n")
    (src / "notes.txt").write_text("not the code that ran")
    patch = checkout_diff(pkg)
    assert patch is not None and b"notes.txt" not in patch

    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(src), str(clone))
    (tmp_path / "p.patch").write_bytes(patch)
    _git(clone, "apply", str(tmp_path / "p.patch"))
    assert (clone / "unilab" / "__init__.py").read_text() == "x = 1\n"
    assert (clone / "unilab" / "new_module.py").read_text() == "y = 2\n"


def test_the_run_directory_keeps_the_patch_and_the_manifest_its_digest(tmp_path: Path) -> None:
    prov = Provenance(os="Linux", cpu="cpu", python="3.11", unilab="0", git_commit="abc", git_dirty=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    kept = keep_code_diff(run_dir, prov, "2026-12-03T11:21:16.123456Z")
    # This checkout may be clean: then there is nothing to keep, and nothing is named.
    here = checkout_diff(Path(__file__).resolve().parent.parent / "unilab")
    assert here is not None
    if kept.git_diff is None:
        assert here == b""
        return
    assert kept.git_diff == "code/20261203T112116Z.patch"
    body = (run_dir / kept.git_diff).read_bytes()
    assert kept.git_diff_sha256 == "sha256:" + hashlib.sha256(body).hexdigest()
    assert kept.git_diff_truncated == (len(here) > CODE_DIFF_CAP) and body == here[:CODE_DIFF_CAP]
    clean = prov.model_copy(update={"git_dirty": False})
    assert keep_code_diff(run_dir, clean, "2026-12-03T11:21:17.0Z") == clean
