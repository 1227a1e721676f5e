"""PPO (rsl-rl-lib) on unilab's collector runtime, as a user runs it: `unilab apply` with
`algo.name = "ppo"`, one rank and two CPU ranks, interrupt and resume."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import pytest
import torch

from tests.conftest import ROOT
from tests.test_apply import _env, _wait_for_checkpoint, apply, leftover_pids, only_run_dir, spec_copy
from unilab.algos.ppo.spec import PpoSpec
from unilab.spec.load import load_spec
from unilab.tasks.registry import task_def

NUM_ENVS, STEPS_PER_ENV = 16, 8
PER_ITERATION = NUM_ENVS * STEPS_PER_ENV  # env steps of one PPO iteration on one rank
PPO = [
    "--set",
    f'algo={{name="ppo", num_steps_per_env={STEPS_PER_ENV}}}',
    "--set",
    f"task.num_envs={NUM_ENVS}",
    "--set",
    "run.log_every_seconds=0.5",
    "--set",
    f"run.checkpoint_every_env_steps={4 * PER_ITERATION}",
]
GRADIENT_STEPS_PER_ITERATION = 5 * 4  # PpoSpec defaults: epochs x mini-batches


def _schema() -> dict:
    return json.loads((ROOT / "schemas" / "manifest.v1.json").read_text())


def test_train_cfg_maps_every_ppo_key() -> None:
    from unilab.algos.ppo.runner import train_cfg

    algo = PpoSpec(
        name="ppo",
        hidden_dims=(64, 32),
        num_steps_per_env=16,
        num_learning_epochs=3,
        num_mini_batches=2,
        learning_rate=5e-4,
        schedule="fixed",
        clip_param=0.3,
        entropy_coef=0.005,
        value_loss_coef=0.5,
        gamma=0.98,
        lam=0.9,
        desired_kl=0.02,
        max_grad_norm=0.5,
        init_noise_std=0.7,
        normalize_observations=False,
    )
    cfg = train_cfg(algo)
    a = cfg["algorithm"]
    assert cfg["num_steps_per_env"] == 16
    assert (a["num_learning_epochs"], a["num_mini_batches"], a["learning_rate"], a["schedule"]) == (3, 2, 5e-4, "fixed")
    assert (a["clip_param"], a["entropy_coef"], a["value_loss_coef"]) == (0.3, 0.005, 0.5)
    assert (a["gamma"], a["lam"], a["desired_kl"], a["max_grad_norm"]) == (0.98, 0.9, 0.02, 0.5)
    for model in ("actor", "critic"):
        assert cfg[model]["hidden_dims"] == [64, 32] and cfg[model]["obs_normalization"] is False
    assert cfg["actor"]["distribution_cfg"]["init_std"] == 0.7
    assert cfg["obs_groups"] == {"actor": ["policy"], "critic": ["policy"]}
    # Privileged observations: the critic reads the env's "critic" group, the whole observation.
    assert train_cfg(algo, asymmetric=True)["obs_groups"] == {"actor": ["policy"], "critic": ["critic"]}


@pytest.mark.slow
def test_ppo_single_rank_completes_with_a_valid_manifest(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    # 1500 is not a whole number of iterations: the run ends at the next iteration boundary.
    r = apply(tmp_path, str(spec), *PPO, "--set", "run.total_env_steps=1500", mark=mark)
    assert r.returncode == 0, r.stderr
    assert "run succeeded" in r.stdout
    assert "Actor Model" not in r.stdout  # rsl-rl's construction chatter stays out of the user's output
    run_dir = only_run_dir(tmp_path)
    # rsl-rl writes nothing of its own into the run directory (no git diffs, no model_*.pt); code/ is
    # unilab's record of a dirty checkout's changes (unilab.records.manifest_io.keep_code_diff).
    assert {p.name for p in run_dir.iterdir()} - {"code"} == {
        "plan.toml",
        "manifest.json",
        "events.jsonl",
        "tensorboard",
        "checkpoints",
    }
    m = json.loads((run_dir / "manifest.json").read_text())
    jsonschema.validate(m, _schema())
    assert m["status"] == "succeeded" and m["algo"] == "ppo" and m["first_error"] is None
    iterations = -(-1500 // PER_ITERATION)
    c = m["counters"]
    assert c["env_steps"] == iterations * PER_ITERATION and c["syncs"] == iterations * STEPS_PER_ENV
    assert c["transitions_produced"] == c["env_steps"] and c["dropped_transitions"] == 0
    assert c["updates"] == iterations * GRADIENT_STEPS_PER_ITERATION
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    logged = [e for e in events if e["event"] == "iteration"]
    assert logged and {"ppo_value", "ppo_surrogate", "ppo_entropy", "learning_rate"} <= set(logged[-1])
    assert logged[-1]["iterations"] == iterations

    blob = torch.load(sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1], weights_only=True)
    st = blob["state"]
    assert blob["env_steps"] == c["env_steps"] and st["iterations"] == iterations
    assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict"} <= set(st["ppo"])
    # Empirical normalization (default on) is part of the saved actor.
    assert any("obs_normalizer" in k for k in st["ppo"]["actor_state_dict"])
    assert leftover_pids(mark) == []

    # The exported policy is rsl-rl's deterministic actor (normalizer included), clipped to [-1, 1]
    # as the runtime clips PPO's actions; onnxruntime gives the same actions as torch.
    import numpy as np
    import onnxruntime as ort

    from unilab.records.policy import load_policy

    e = subprocess.run(
        [sys.executable, "-m", "unilab", "export", str(run_dir), "--format", "onnx"], capture_output=True, text=True
    )
    assert e.returncode == 0, e.stderr
    policy, obs_dim = load_policy(run_dir)
    obs = torch.randn(64, obs_dim, generator=torch.Generator().manual_seed(0)) * 3
    with torch.no_grad():
        want = policy(obs).numpy()
        mean = policy.actor.deterministic_output(policy.actor.mlp(policy.actor.obs_normalizer(obs))).numpy()
    np.testing.assert_allclose(want, np.clip(mean, -1.0, 1.0), atol=0)
    sess = ort.InferenceSession(str(run_dir / "policy.onnx"))
    (got,) = sess.run(["action"], {"obs": obs.numpy()})
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got).max() <= 1.0
    # The file says what each input column holds: the actor's observation terms (all but the
    # critic's privileged ones, tests/test_privileged_observations.py), in order, end to end.
    layout = json.loads(sess.get_modelmeta().custom_metadata_map["unilab.observation_layout"])
    task = load_spec(spec).spec.task
    privileged = set(task.privileged_observations or ())
    declared = [n for n in task_def(task).observations(task) if n not in privileged]
    widths = {"base_lin_vel": 3}  # the only term a G1 spec ships as privileged
    hidden = sum(widths[n] for n in privileged)
    assert st["ppo"]["critic_state_dict"]["mlp.0.weight"].shape[1] == st["obs_dim"] == obs_dim + hidden
    assert list(layout) == declared and layout[declared[0]][0] == 0 and layout[declared[-1]][1] == obs_dim
    assert all(layout[a][1] == layout[b][0] for a, b in itertools.pairwise(declared))


@pytest.mark.slow
def test_ppo_interrupt_and_resume_continues_training(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    total = 48 * PER_ITERATION
    proc = subprocess.Popen(
        [sys.executable, "-m", "unilab", "apply", str(spec), *PPO, "--quiet", "--set", f"run.total_env_steps={total}"],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_dir = _wait_for_checkpoint(tmp_path)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    first = json.loads((run_dir / "manifest.json").read_text())
    assert first["status"] == "interrupted" and first["counters"]["dropped_transitions"] == 0
    done = first["counters"]["env_steps"]
    assert 0 < done < total
    last = sorted((run_dir / "checkpoints").glob("*.pt"))[-1]
    interrupted_state = torch.load(last, weights_only=True)["state"]
    assert leftover_pids(mark) == []

    r = apply(tmp_path, str(run_dir / "plan.toml"), "--resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    m = json.loads((run_dir / "manifest.json").read_text())
    jsonschema.validate(m, _schema())
    assert m["status"] == "succeeded" and m["resumed_from"].endswith(last.name)
    assert m["counters"]["env_steps"] >= total and m["counters"]["updates"] > first["counters"]["updates"]
    final = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)["state"]
    # The resumed run continued the interrupted one's iterations and weights, not a fresh policy.
    assert final["iterations"] > interrupted_state["iterations"]
    assert final["counters"]["updates"] == final["iterations"] * GRADIENT_STEPS_PER_ITERATION
    kinds = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert kinds.count("run_started") == 2 and "run_interrupted" in kinds and kinds[-1] == "run_finished"


@pytest.mark.slow
def test_ppo_two_cpu_ranks_finish_with_identical_parameters(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    total = 2 * 6 * PER_ITERATION  # 6 iterations per rank
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "unilab",
            "apply",
            str(ROOT / "specs/g1_dp2_cpu.toml"),
            "--quiet",
            *PPO,
            "--set",
            f"run.total_env_steps={total}",
        ],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (run_dir,) = list((tmp_path / "runs").iterdir())
    m = json.loads((run_dir / "manifest.json").read_text())
    jsonschema.validate(m, _schema())
    assert m["status"] == "succeeded" and m["algo"] == "ppo" and m["topology"]["world_size"] == 2
    c = m["counters"]
    assert c["env_steps"] == total and c["transitions_produced"] == total and c["dropped_transitions"] == 0
    digests = [rk["param_digest"] for rk in m["ranks"]]
    assert len(digests) == 2 and digests[0] is not None and digests[0] == digests[1]
    dp = m["data_parallel"]
    # rsl-rl all-reduces the gradients of every mini-batch step.
    assert dp["params_identical"] and dp["grad_syncs"] == c["updates"] == 6 * GRADIENT_STEPS_PER_ITERATION
    assert dp["wire_bytes_per_sync"]["ppo"] > 0
    assert len({rk["learner_pid"] for rk in m["ranks"]}) == 2
    assert leftover_pids(mark) == []
    # The observation normalizer counted every sample of both ranks once (rsl-rl merges the ranks'
    # statistics; gathering the rollouts as well used to count each sample twice).
    state = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)["state"]["ppo"]
    counts = {k: float(v) for k, v in state["actor_state_dict"].items() if k.endswith("count")}
    assert counts and all(c == total for c in counts.values()), counts


@pytest.mark.slow
def test_vecenv_steps_the_real_collector_with_clipped_actions_and_time_outs() -> None:
    from tests.conftest import host, spec_data
    from unilab.collect.collector_client import CollectorClient
    from unilab.plan.compile import compile_plan
    from unilab.run.vecenv import CollectorVecEnv
    from unilab.spec.load import validate_spec_data

    # 0.1 s episodes: 5 control steps of 20 ms, then every world is truncated (time limit).
    data = spec_data(task__num_envs=4, task__episode_length_s=0.1, algo={"name": "ppo"})
    plan = compile_plan(validate_spec_data(data, "t"), host("cpu_laptop"), ROOT / "specs")
    assert plan.task.max_episode_steps == 5
    client = CollectorClient(plan, 0, seed=3)
    try:
        hello = client.start()
        assert client.wait_obs(lambda: False)
        env = CollectorVecEnv(client, hello, plan.task.max_episode_steps, lambda: False)
        obs = env.get_observations()
        assert obs["policy"].shape == (4, hello.obs_dim) and env.num_actions == hello.act_dim
        assert obs["policy"].data_ptr() != hello.buffers.obs[0].data_ptr()  # a copy, not the shared slot
        for t in range(1, 6):
            actions = torch.full((4, env.num_actions), 5.0)
            actions[:, 0] = -7.0
            obs, rewards, dones, extras = env.step(actions)
            b = hello.buffers
            # The unbounded Gaussian sample is clipped to the collector's [-1, 1] range.
            assert b.action[:, 0].eq(-1.0).all() and b.action[:, 1:].eq(1.0).all()
            assert torch.equal(dones.bool(), b.terminated | b.truncated)
            assert torch.equal(extras["time_outs"], b.truncated) and rewards.shape == (4,)
            assert torch.isfinite(rewards).all()
            if t < 5:  # nothing falls in 80 ms from the standing pose: all worlds still run
                assert not dones.any() and env.episode_length_buf.eq(t).all()
        # The time limit ended every world still running; obs is already the next episode's first
        # observation, while the channel's next_obs keeps the terminal one.
        assert extras["time_outs"].any()
        ended = dones.bool()
        assert env.episode_length_buf[ended].eq(0).all()
        assert not torch.equal(obs["policy"][ended], hello.buffers.next_obs[ended])
        assert torch.equal(obs["policy"], hello.buffers.obs[env.t % 2])
        assert env.t == 5 and env.transitions_nonfinite == 0
    finally:
        client.close()


def test_non_finite_ppo_losses_fail_the_run_before_its_next_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """rsl-rl steps on whatever its losses are: a run whose losses went NaN trained on NaN to the
    end and reported success. Now it stops, failed, and keeps only the checkpoints from before."""
    from unilab.algos.ppo.runner import UnilabOnPolicyRunner
    from unilab.cli.main import main

    real = UnilabOnPolicyRunner.iterate
    calls = itertools.count(1)

    def iterate(self: UnilabOnPolicyRunner) -> dict[str, float]:
        losses = real(self)
        return {**losses, "value": float("nan")} if next(calls) == 6 else losses

    monkeypatch.setattr(UnilabOnPolicyRunner, "iterate", iterate)
    monkeypatch.chdir(tmp_path)
    spec = spec_copy(tmp_path)
    rc = main(["apply", str(spec), *PPO, "--set", f"run.total_env_steps={10 * PER_ITERATION}", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "PPO's losses became non-finite at iteration 6 (value = nan)" in err, err
    assert "start a new run with a lower algo.learning_rate" in err and "--resume" not in err
    run_dir = only_run_dir(tmp_path)
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "failed" and "non-finite" in m["first_error"]["message"]
    assert [c["env_steps"] for c in m["checkpoints"]] == [4 * PER_ITERATION]  # none after the NaN
    assert m["counters"]["env_steps"] == 6 * PER_ITERATION  # counted up to the failed iteration
