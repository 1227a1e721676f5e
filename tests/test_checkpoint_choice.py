"""Choosing a checkpoint: `export --checkpoint`, `apply --resume RUN_DIR --checkpoint` (the
checkpoints after it are moved aside, never deleted), and `diff` of run directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SPECS

pytestmark = pytest.mark.slow

SETS = [
    "run.total_env_steps=3200",
    "run.checkpoint_every_env_steps=800",
    "run.checkpoint_keep=10",
    "algo.warmup_env_steps=320",
    "algo.batch_size=64",
]


def unilab(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unilab", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )


def test_resume_and_export_from_a_chosen_checkpoint_and_diff_run_dirs(tmp_path: Path) -> None:
    sets = [a for s in SETS for a in ("--set", s)]
    a = unilab(tmp_path, "apply", str(SPECS / "cartpole.toml"), *sets, "--quiet")
    assert a.returncode == 0, a.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert ckpts == [f"ckpt-{n:013d}.pt" for n in (800, 1600, 2400, 3200)]
    before = {n: (run_dir / "checkpoints" / n).read_bytes() for n in ckpts}

    x = unilab(tmp_path, "export", str(run_dir), "--checkpoint", ckpts[0], "--out", "early.onnx")
    assert x.returncode == 0, x.stderr
    assert (tmp_path / "early.onnx").stat().st_size > 0
    bad = unilab(tmp_path, "export", str(run_dir), "--checkpoint", "ckpt-9.pt")
    assert bad.returncode == 1 and f"--checkpoint ckpt-9.pt is not a checkpoint of {run_dir}" in bad.stderr

    r = unilab(tmp_path, "apply", "--resume", str(run_dir), "--checkpoint", ckpts[1], "--quiet")
    assert r.returncode == 0, r.stderr
    (aside,) = (run_dir / "checkpoints").glob("superseded-*")
    assert f"resuming from {ckpts[1]}; the checkpoints after it were moved to {aside}" in r.stderr
    # The history after the resumed checkpoint is kept, byte for byte, with its digest files.
    for n in ckpts[2:]:
        assert (aside / n).read_bytes() == before[n]
        assert (aside / f"{n}.sha256").is_file()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["counters"]["env_steps"] == 3200 and manifest["status"] == "succeeded"
    assert [c["env_steps"] for c in manifest["checkpoints"]] == [800, 1600, 2400, 3200]
    assert manifest["sessions"][-1]["resumed_from"].endswith(ckpts[1])
    v = unilab(tmp_path, "manifest", "validate", str(run_dir))
    assert v.returncode == 0, v.stderr

    lone = unilab(tmp_path, "apply", str(SPECS / "cartpole.toml"), "--checkpoint", ckpts[0])
    assert lone.returncode == 1 and "use it with --resume RUN_DIR" in lone.stderr

    d = unilab(tmp_path, "diff", str(run_dir), str(run_dir))
    assert d.returncode == 0 and "no changes" in d.stdout, d.stderr
    (tmp_path / "empty").mkdir()
    e = unilab(tmp_path, "diff", str(run_dir), "empty")
    assert e.returncode == 1 and "B (empty) is a directory without plan.toml" in e.stderr


def test_superseded_checkpoints_keep_their_digests_and_never_collide(tmp_path: Path) -> None:
    from unilab.run.run_dir import supersede_newer

    ck = tmp_path / "checkpoints"
    ck.mkdir()
    names = [f"ckpt-{n:013d}.pt" for n in (100, 200, 300)]
    for n in names:
        (ck / n).write_bytes(b"state " + n.encode())
        (ck / f"{n}.sha256").write_text("digest\n")
    assert supersede_newer(tmp_path, ck / names[2]) is None  # the newest: nothing to move
    first = supersede_newer(tmp_path, ck / names[1])
    assert first is not None and sorted(p.name for p in first.iterdir()) == [names[2], f"{names[2]}.sha256"]
    (ck / names[2]).write_bytes(b"the resumed history")
    second = supersede_newer(tmp_path, ck / names[0])  # within the same second, as often as not
    assert second is not None and second != first
    assert sorted(p.name for p in second.iterdir()) == sorted([*names[1:], f"{names[1]}.sha256"])
    assert (first / names[2]).read_bytes() == b"state " + names[2].encode()
