"""TD3 through the whole runtime: it plans and runs with two CPU ranks (data parallel, the replicas
identical at the end). Its one-rank run, learning the cart-pole check task, its evaluation and its
ONNX export are checked with the other learners (tests/test_learning.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SPECS

pytestmark = pytest.mark.slow

SMALL = '{name="td3", batch_size=64, hidden_dims=[32, 32], warmup_env_steps=640}'


def _unilab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "unilab", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_td3_plans_with_its_own_keys_and_refuses_a_temperature(tmp_path: Path) -> None:
    r = _unilab("plan", str(SPECS / "cartpole.toml"), "--set", f"algo={SMALL}", "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    algo = json.loads(r.stdout)["algo"]
    assert algo["name"] == "td3" and algo["clipped_double_q"] and algo["actor_update_every"] == 2
    bad = _unilab("plan", str(SPECS / "cartpole.toml"), "--set", 'algo={name="td3", alpha_init=0.1}', cwd=tmp_path)
    assert bad.returncode != 0 and "alpha_init" in bad.stderr and "Traceback" not in bad.stderr


def test_two_cpu_ranks_of_td3_finish_with_identical_parameters(tmp_path: Path) -> None:
    sets = [
        "task.num_envs=16", "algo.warmup_env_steps=640", "algo.batch_size=64", "run.total_env_steps=3200",
        "run.checkpoint_every_env_steps=960",
    ]  # fmt: skip
    r = _unilab(
        "apply", str(SPECS / "g1_dp2_cpu.toml"), "--quiet", "--set", f"algo={SMALL}",
        *[a for s in sets for a in ("--set", s)], cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "succeeded" and m["algo"] == "td3" and m["topology"]["world_size"] == 2
    digests = [rk["param_digest"] for rk in m["ranks"]]
    assert digests[0] == digests[1] and m["data_parallel"]["params_identical"]
    assert m["data_parallel"]["grad_syncs"] > 0 and set(m["data_parallel"]["wire_bytes_per_sync"]) == {
        "critic",
        "actor",
    }
