"""Checkpoints and manifests are written atomically: a full disk or a crash mid-write loses
nothing that was there before, and loading refuses corrupt files and other plans' files."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from unilab.errors import UnilabError
from unilab.run import atomic
from unilab.run.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint

PLAN = "sha256:" + "ab" * 32


def _state(x: float) -> dict:
    return {"learner": {"w": torch.full((3,), x)}, "counters": {"env_steps": int(x)}}


def test_round_trip_and_pruning(tmp_path: Path) -> None:
    for steps in (100, 200, 300, 400):
        save_checkpoint(tmp_path, _state(steps), plan_id=PLAN, env_steps=steps, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-0000000000300.pt", "ckpt-0000000000400.pt"]
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
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-0000000000001.pt"]  # no temp file, no partial file
    assert load_checkpoint(tmp_path / "ckpt-0000000000001.pt", plan_id=PLAN)["env_steps"] == 1


def test_another_plans_checkpoint_is_refused(tmp_path: Path) -> None:
    path, _ = save_checkpoint(tmp_path, _state(1), plan_id=PLAN, env_steps=1, keep=1)
    with pytest.raises(UnilabError, match="belongs to plan"):
        load_checkpoint(path, plan_id="sha256:" + "cd" * 32)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_checkpoint_is_refused(tmp_path: Path, damage: str) -> None:
    path, _ = save_checkpoint(tmp_path, _state(1), plan_id=PLAN, env_steps=1, keep=1)
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x00not a zip" * 10, "empty": b""}[damage])
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
