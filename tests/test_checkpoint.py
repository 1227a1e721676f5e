"""Checkpoints and manifests are written atomically: a full disk or a crash mid-write loses
nothing that was there before, and loading refuses corrupt files and other plans' files."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
import torch

from unilab import atomic
from unilab.errors import UnilabError
from unilab.records.checkpoint import (
    check_recorded_digest,
    digest_path,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)

PLAN = "sha256:" + "ab" * 32


def _state(x: float) -> dict:
    return {"learner": {"w": torch.full((3,), x)}, "counters": {"env_steps": int(x)}}


def test_round_trip_and_pruning(tmp_path: Path) -> None:
    for steps in (100, 200, 300, 400):
        save_checkpoint(tmp_path, _state(steps), plan_id=PLAN, env_steps=steps, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-0000000000300.pt", "ckpt-0000000000400.pt"]
    assert sorted(p.name for p in tmp_path.glob("*.sha256")) == [  # pruned with their checkpoints
        "ckpt-0000000000300.pt.sha256",
        "ckpt-0000000000400.pt.sha256",
    ]
    blob = load_checkpoint(list_checkpoints(tmp_path)[-1], plan_id=PLAN)
    assert torch.equal(blob["state"]["learner"]["w"], torch.full((3,), 400.0))


def test_full_disk_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, _state(1), plan_id=PLAN, env_steps=1, keep=5)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(UnilabError) as e:
        save_checkpoint(tmp_path, _state(2), plan_id=PLAN, env_steps=2, keep=5)
    assert "the disk is full" in e.value.summary and "--resume" in e.value.fix
    monkeypatch.undo()
    # No temp file, no partial file: the first checkpoint and its digest, as they were.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000000000001.pt", "ckpt-0000000000001.pt.sha256"]
    assert load_checkpoint(tmp_path / "ckpt-0000000000001.pt", plan_id=PLAN)["env_steps"] == 1


def test_an_interrupt_mid_write_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, _state(1), plan_id=PLAN, env_steps=1, keep=5)

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, _state(2), plan_id=PLAN, env_steps=2, keep=5)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000000000001.pt", "ckpt-0000000000001.pt.sha256"]


def test_another_plans_checkpoint_is_refused(tmp_path: Path) -> None:
    path, _ = save_checkpoint(tmp_path, _state(1), plan_id=PLAN, env_steps=1, keep=1)
    with pytest.raises(UnilabError, match="belongs to plan"):
        load_checkpoint(path, plan_id="sha256:" + "cd" * 32)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "text"])
def test_corrupt_checkpoint_is_refused(tmp_path: Path, damage: str) -> None:
    path, _ = save_checkpoint(tmp_path, _state(1), plan_id=PLAN, env_steps=1, keep=1)
    data = path.read_bytes()
    path.write_bytes(
        {"truncate": data[: len(data) // 2], "garbage": b"\x00not a zip" * 10, "empty": b"", "text": b"junk\n"}[damage]
    )
    with pytest.raises(UnilabError, match="corrupt or unreadable"):
        load_checkpoint(path, plan_id=PLAN)


def test_pickled_code_is_not_loaded(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "ckpt-0000000000001.pt"
    torch.save({"format": 1, "plan_id": PLAN, "env_steps": 1, "state": {"x": Evil()}}, path)
    with pytest.raises(UnilabError, match="corrupt or unreadable"):
        load_checkpoint(path, plan_id=PLAN)


def test_a_checkpoint_is_verified_against_the_digest_beside_it(tmp_path: Path) -> None:
    """No manifest needed: the digest file beside the checkpoint vouches for it (in sha256sum's
    format), a changed byte is refused, and a checkpoint nothing vouches for is refused with a fix."""
    run = tmp_path / "run"
    path, digest = save_checkpoint(run / "checkpoints", _state(1), plan_id=PLAN, env_steps=1, keep=2)
    assert check_recorded_digest(run, path) == digest
    r = subprocess.run(["sha256sum", "-c", digest_path(path).name], cwd=path.parent, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().endswith(": OK")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(UnilabError, match="does not have the sha256 the run recorded"):
        check_recorded_digest(run, path)
    digest_path(path).unlink()
    with pytest.raises(UnilabError, match="cannot be verified") as info:
        check_recorded_digest(run, path)
    assert f"sha256sum {path.name} > {digest_path(path).name}" in info.value.fix
