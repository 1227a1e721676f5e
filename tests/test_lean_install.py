"""The default install (no extras) is a working CPU runtime: with every extra's package made
unimportable, `unilab apply specs/g1.toml` trains, `unilab eval` plays and `unilab export` writes
the ONNX policy; the features of the extras are refused by name, with the command that installs
them, before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_apply import SMALL

pytestmark = pytest.mark.slow

# The import names of every extra's distributions (unilab.extras.EXTRAS).
EXTRA_MODULES = ("warp", "mujoco_warp", "imageio_ffmpeg", "matplotlib", "onnxruntime", "wandb")

BLOCKER = f"""
import sys

# As if not installed: `import X` raises ModuleNotFoundError and importlib.util.find_spec(X) is None.
for name in {EXTRA_MODULES!r}:
    sys.modules[name] = None
"""


def _lean(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "lean_site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)  # every process of the run, workers included
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "UNILAB_STATE_DIR": str(tmp_path / "s")}
    return subprocess.run(
        [sys.executable, "-m", "unilab", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_blocker_blocks(tmp_path: Path) -> None:
    r = _lean(tmp_path, "-c", "pass")  # writes the blocker; `python -m unilab -c` is refused
    assert r.returncode != 0
    for module in EXTRA_MODULES:
        probe = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            env={**os.environ, "PYTHONPATH": str(tmp_path / "lean_site")},
            capture_output=True,
            text=True,
        )
        assert "ModuleNotFoundError" in probe.stderr and module in probe.stderr, probe.stderr


def test_apply_eval_export_without_extras_and_their_features_refused(tmp_path: Path) -> None:
    a = _lean(tmp_path, "apply", str(ROOT / "specs" / "g1.toml"), *SMALL, "--quiet")
    assert a.returncode == 0, a.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    rel = run_dir.relative_to(tmp_path)
    hint = f"next: unilab eval {rel}   (score the policy; to film it: bash tools/setup.sh video in the unilab checkout"
    assert hint in a.stdout, a.stdout

    e = _lean(tmp_path, "eval", str(run_dir), "--episodes", "2", "--workers", "1", "--json")
    assert e.returncode == 0, e.stderr[-3000:]
    assert '"episodes": 2' in e.stdout

    x = _lean(tmp_path, "export", str(run_dir), "--out", str(tmp_path / "policy.onnx"))
    assert x.returncode == 0, x.stderr[-3000:]
    assert (tmp_path / "policy.onnx").stat().st_size > 0

    v = _lean(tmp_path, "eval", str(run_dir), "--episodes", "2", "--video", str(tmp_path / "v.mp4"))
    assert v.returncode == 1
    assert "--video needs imageio-ffmpeg, which is not installed (the `video` extra)" in v.stderr
    assert "bash tools/setup.sh video in the unilab checkout" in v.stderr and "Traceback" not in v.stderr
    assert not (tmp_path / "v.mp4").exists()

    p = _lean(tmp_path, "profile", str(ROOT / "specs" / "g1.toml"), "--out", str(tmp_path / "prof"))
    assert p.returncode == 1
    assert "needs matplotlib, which is not installed (the `profile` extra)" in p.stderr
    assert "bash tools/setup.sh profile in the unilab checkout" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "prof").exists()
