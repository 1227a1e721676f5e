"""`run.init_from`: a new run starts from another run's policy. The plan names the checkpoint by
its sha256 and refuses one whose run trained another task or network shape; the run loads the
networks, temperature and observation normalizer and starts its own counters and optimizers.
That a trained policy carries over (a short fine-tune scores at once) is checked after training in
tests/test_learning.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import SPECS

TINY_SAC = '{name="sac", batch_size=32, hidden_dims=[16], warmup_env_steps=0}'


def unilab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "unilab", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _apply(out: Path, *sets: str, cwd: Path | None = None) -> Path:
    args = [a for s in (*sets, f'run.output_dir="{out}"') for a in ("--set", s)]
    r = unilab("apply", str(SPECS / "cartpole.toml"), "--quiet", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir


def _refused(r: subprocess.CompletedProcess[str], *says: str) -> None:
    assert r.returncode == 1, r.stderr
    assert "[run.init-from]" in r.stderr and "fix: " in r.stderr and "Traceback" not in r.stderr, r.stderr
    for s in says:
        assert s in r.stderr, r.stderr


def _newest(run_dir: Path) -> dict:
    (ckpt, *_) = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"), reverse=True)
    return torch.load(ckpt, weights_only=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short cart-pole SAC run to start from."""
    return _apply(
        tmp_path_factory.mktemp("init") / "a", "run.total_env_steps=640", f"algo={TINY_SAC}", "algo.alpha_init=0.05"
    )


def test_the_plan_names_the_checkpoint_by_its_digest(source: Path) -> None:
    r = unilab(
        "plan", str(SPECS / "cartpole.toml"), "--format", "json",
        "--set", f'run.init_from="{source}"', "--set", f"algo={TINY_SAC}", "--set", "algo.alpha_init=0.05",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    init = json.loads(r.stdout)["run"]["init_from"]
    ckpt = source / "checkpoints" / "ckpt-0000000000640.pt"
    want = (ckpt.parent / (ckpt.name + ".sha256")).read_text().split()[0]
    assert init["sha256"] == want and init["env_steps"] == 640 and init["checkpoint"].endswith(ckpt.name)
    assert init["plan_id"] == json.loads((source / "manifest.json").read_text())["plan_id"]


def test_a_checkpoint_that_does_not_fit_is_refused_at_plan_time(source: Path, tmp_path: Path) -> None:
    plan = ["plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{source}"']
    _refused(
        unilab(*plan), "algo.hidden_dims is [64, 64] here, [16] in the checkpoint's run", "set algo.hidden_dims = [16]"
    )
    _refused(
        unilab(*plan, "--set", f"algo={TINY_SAC}"),
        "algo.alpha_init is 0.1 here, 0.05 in the checkpoint's run",
        "set algo.alpha_init = 0.05",
    )
    _refused(unilab(*plan, "--set", 'algo={name="ppo", hidden_dims=[16]}'), "trained with sac, this spec with ppo")
    g1 = ["plan", str(SPECS / "g1.toml"), "--set", f'run.init_from="{source}"']
    _refused(unilab(*g1), "trained cartpole, this spec's task is g1_walk")
    _refused(unilab("plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{tmp_path}"'), "no plan.toml")
    _refused(
        unilab("plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{source / "plan.toml"}"'),
        "is not a checkpoint in a unilab run directory",
    )
    changed = tmp_path / "changed"
    shutil.copytree(source, changed)
    ckpt = changed / "checkpoints" / "ckpt-0000000000640.pt"
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    _refused(
        unilab("plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{changed}"'),
        "does not have the sha256 its run recorded",
    )


def test_a_checkpoint_changed_after_planning_is_refused_before_the_run_starts(source: Path, tmp_path: Path) -> None:
    copy = tmp_path / "a"
    shutil.copytree(source, copy)
    plan = tmp_path / "plan.toml"
    r = unilab(
        "plan", str(SPECS / "cartpole.toml"), "--out", str(plan), "--set", f'run.init_from="{copy}"',
        "--set", f"algo={TINY_SAC}", "--set", "algo.alpha_init=0.05", "--set", f'run.output_dir="{tmp_path / "runs"}"',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    ckpt = copy / "checkpoints" / "ckpt-0000000000640.pt"
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    r = unilab("apply", str(plan))
    assert r.returncode == 1 and "run.init_from" in r.stderr and "changed since the plan was made" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_sac_run_starts_from_the_networks_and_normalizer_with_fresh_counters(source: Path, tmp_path: Path) -> None:
    """Four syncs of 16 envs with a batch of 32: two or three small updates. The actor is then
    within a few learning-rate steps of the source's, where a fresh one (another seed: other initial
    weights) is far from it."""
    run = _apply(
        tmp_path / "b",
        "run.total_env_steps=64", f"algo={TINY_SAC}", "algo.alpha_init=0.05", f'run.init_from="{source}"',
        "run.seed=1",
    )  # fmt: skip
    a, b = _newest(source)["state"], _newest(run)["state"]
    updates = b["learner"]["num_critic_updates"]
    assert 1 <= updates <= 3  # its own count, from zero
    for name, value in a["learner"]["actor"].items():
        assert (b["learner"]["actor"][name] - value).abs().max() < 0.01 * updates, name
    fresh = _apply(tmp_path / "c", "run.total_env_steps=64", f"algo={TINY_SAC}", "algo.alpha_init=0.05", "run.seed=1")
    far = max(
        (_newest(fresh)["state"]["learner"]["actor"][k] - v).abs().max() for k, v in a["learner"]["actor"].items()
    )
    assert far > 0.05
    assert b["normalizer"]["count"] > a["normalizer"]["count"]  # carried on, not restarted
    assert b["counters"]["env_steps"] == 64
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    (started,) = [e for e in events if e["event"] == "started_from"]
    assert started["env_steps"] == 640


def test_a_ppo_run_starts_from_the_actor_with_its_observation_normalizer(tmp_path: Path) -> None:
    ppo = '{name="ppo", num_steps_per_env=8, hidden_dims=[16]}'
    a_dir = _apply(tmp_path / "a", "run.total_env_steps=256", f"algo={ppo}")
    b_dir = _apply(tmp_path / "b", "run.total_env_steps=128", f"algo={ppo}", f'run.init_from="{a_dir}"')
    a, b = _newest(a_dir)["state"], _newest(b_dir)["state"]
    count = "obs_normalizer.count"
    assert b["ppo"]["actor_state_dict"][count] == a["ppo"]["actor_state_dict"][count] + 128
    assert b["iterations"] == 1  # its own iterations, from zero
