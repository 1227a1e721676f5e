"""`task.privileged_observations`: the critic sees them, the actor and the deployed policy do not,
for the replay learners (the actor's columns of one observation) and PPO (rsl-rl-lib's observation
groups: "policy" for the actor, "critic" for the critic).

A G1 policy meant for a real robot cannot read its base's linear velocity (no sensor measures it);
the critic may. The learner's actor reads its own columns, the export takes the actor's
observation alone, eval feeds it those columns, and what cannot be honoured is refused at plan time."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.conftest import ROOT, SPECS, host, run_unilab, spec_data
from unilab.algos.common import actor_columns, make_learner
from unilab.errors import PlanRefused
from unilab.plan.compile import compile_plan
from unilab.spec.load import validate_spec_data

PRIVILEGED = 'task.privileged_observations=["base_lin_vel"]'
TERMS = [("base_lin_vel", 3), ("base_ang_vel", 3), ("projected_gravity", 3), ("joint_pos_rel", 4)]


def _plan(**dotted: object):  # type: ignore[no-untyped-def]
    return compile_plan(validate_spec_data(spec_data(**dotted), "t"), host("cpu_laptop"), ROOT / "specs")


@pytest.mark.parametrize(
    ("names", "algo", "says"),
    [
        (
            ["base_lin_vl"],
            {"name": "sac"},
            "g1_walk has no observation term 'base_lin_vl' (did you mean 'base_lin_vel'?)",
        ),
        (["base_lin_vel", "base_lin_vel"], {"name": "sac"}, "a term is named twice"),
    ],
)
def test_what_cannot_be_honoured_is_refused_with_rule_key_and_fix(names: list[str], algo: dict, says: str) -> None:
    with pytest.raises(PlanRefused) as e:
        _plan(task__privileged_observations=names, algo=algo)
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("task.privileged-observations", "task.privileged_observations")
    assert says in d.condition and d.fix


def test_every_term_privileged_leaves_the_actor_nothing_and_is_refused() -> None:
    from unilab.tasks.registry import task_def

    plan = _plan()
    every = list(task_def(plan.task).observations(plan.task))
    with pytest.raises(PlanRefused) as e:
        _plan(task__privileged_observations=every)
    assert "the actor would see nothing" in e.value.diagnostics[0].condition


@pytest.mark.parametrize("algo", ["sac", "td3", "flashsac", "ppo"])
def test_every_shipped_algorithm_plans_with_privileged_observations(algo: str) -> None:
    plan = _plan(task__privileged_observations=["base_lin_vel"], algo={"name": algo})
    assert tuple(plan.task.privileged_observations) == ("base_lin_vel",) and plan.algo.name == algo


def test_an_empty_list_is_the_same_plan_as_none() -> None:
    assert _plan(task__privileged_observations=[]).plan_id == _plan().plan_id


@pytest.mark.parametrize("algo", ["sac", "td3", "flashsac"])
def test_the_actor_reads_its_columns_and_the_critic_all(algo: str) -> None:
    plan = _plan(task__privileged_observations=["base_lin_vel"], algo={"name": algo, "hidden_dims": [16]})
    cols = actor_columns(plan.task, TERMS)
    assert cols == list(range(3, 13))
    learner = make_learner(plan.algo, 13, 2, torch.device("cpu"), 0, actor_cols=cols)
    obs = torch.randn(5, 13)
    other = obs.clone()
    other[:, :3] += 10.0  # only the privileged term changes
    a = learner.act(obs, deterministic=True)
    assert torch.equal(a, learner.act(other, deterministic=True))
    assert not torch.equal(learner.q_estimate(obs, a), learner.q_estimate(other, a))
    assert learner.deterministic_actor()(obs[:, cols]).shape == (5, 2)  # the deployed actor takes its columns


def test_a_run_deploys_a_policy_without_the_privileged_term(tmp_path: Path) -> None:
    """apply, eval and export of a short g1_walk run: the ONNX input is the observation less
    base_lin_vel, its layout says so, and eval and sim2sim both play it."""
    import onnxruntime as ort

    r = run_unilab("apply", str(SPECS / "g1.toml"), "--smoke", "--quiet", "--set", PRIVILEGED,
                   "--set", f'run.output_dir="{tmp_path}"')  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    e = run_unilab("eval", str(run_dir), "--episodes", "2", "--json")
    assert e.returncode == 0, e.stderr
    assert json.loads(e.stdout)["episodes"] == 2
    x = run_unilab("export", str(run_dir))
    assert x.returncode == 0, x.stderr
    sess = ort.InferenceSession(str(run_dir / "policy.onnx"))
    layout = json.loads(sess.get_modelmeta().custom_metadata_map["unilab.observation_layout"])
    assert "base_lin_vel" not in layout and next(iter(layout.values())) == [0, 3]
    assert sess.get_inputs()[0].shape[1] == max(end for _, end in layout.values())
    import subprocess
    import sys

    s = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "sim2sim.py"), str(run_dir / "policy.onnx"), "--episodes", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["episodes"] == 1


def test_init_from_a_run_with_other_privileged_terms_is_refused(tmp_path: Path) -> None:
    r = run_unilab("apply", str(SPECS / "g1.toml"), "--smoke", "--quiet", "--set", PRIVILEGED,
                   "--set", f'run.output_dir="{tmp_path}"')  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    # specs/g1.toml keeps base_lin_vel for the critic itself: a spec without it starts from that run.
    p = run_unilab("plan", str(SPECS / "g1.toml"), "--set", "task.privileged_observations=[]",
                   "--set", f'run.init_from="{run_dir}"')  # fmt: skip
    assert p.returncode == 1 and "[run.init-from]" in p.stderr, p.stderr
    assert 'task.privileged_observations is [] here, ["base_lin_vel"]' in p.stderr
    assert 'set task.privileged_observations = ["base_lin_vel"]' in p.stderr


class _RandomCollector:
    """A collector channel that answers every step with random observations (rsl-rl's runner over
    `CollectorVecEnv`, without physics)."""

    def __init__(self, n: int, obs_dim: int, act_dim: int) -> None:
        self.gen = torch.Generator().manual_seed(0)
        self.buffers = SimpleNamespace(
            obs=torch.randn(2, n, obs_dim, generator=self.gen),
            action=torch.zeros(n, act_dim),
            reward=torch.zeros(n),
            terminated=torch.zeros(n, dtype=torch.bool),
            truncated=torch.zeros(n, dtype=torch.bool),
            nonfinite=torch.zeros(n, dtype=torch.bool),
        )
        self.hello = SimpleNamespace(buffers=self.buffers, num_envs=n, obs_dim=obs_dim, act_dim=act_dim)
        self.t = 0

    def post_action(self) -> None:
        self.t += 1
        b = self.buffers
        b.obs[self.t % 2] = torch.randn(b.obs.shape[1:], generator=self.gen) * 2.0 + 1.0
        b.reward.copy_(torch.randn(b.reward.shape, generator=self.gen))

    def wait_obs(self, should_stop: Any) -> bool:
        return True


def test_ppo_groups_give_the_actor_its_columns_and_the_critic_the_whole_observation() -> None:
    """rsl-rl's runner over the env's groups: the actor reads "policy" (its columns), the critic
    "critic" (all of them), each normalizing its own group; without privileged terms one group."""
    from tensordict import TensorDict

    from unilab.algos.ppo.runner import UnilabOnPolicyRunner
    from unilab.run.vecenv import CollectorVecEnv

    plan = _plan(
        task__privileged_observations=["base_lin_vel"],
        algo={"name": "ppo", "hidden_dims": [16], "num_steps_per_env": 4, "num_mini_batches": 2},
    )
    cols = actor_columns(plan.task, TERMS)
    assert cols == list(range(3, 13))
    fake = _RandomCollector(8, 13, 2)
    env = CollectorVecEnv(fake, fake.hello, 100, lambda: False, actor_cols=cols)  # type: ignore[arg-type]
    groups = env.get_observations()
    assert torch.equal(groups["policy"], fake.buffers.obs[0][:, cols])
    assert torch.equal(groups["critic"], fake.buffers.obs[0])
    torch.manual_seed(0)
    runner = UnilabOnPolicyRunner.for_plan(env, plan.algo, "cpu")
    assert runner.cfg["obs_groups"] == {"actor": ["policy"], "critic": ["critic"]}
    alg = runner.alg
    assert (alg.actor.obs_dim, alg.critic.obs_dim) == (10, 13)
    losses = runner.iterate()
    assert env.t == 4 and all(torch.isfinite(torch.tensor(v)) for v in losses.values())
    # Each normalizer learnt its own group from the same rollout: the actor's is the critic's
    # on the actor's columns.
    actor_norm, critic_norm = alg.actor.obs_normalizer, alg.critic.obs_normalizer
    assert torch.allclose(actor_norm._mean, critic_norm._mean[:, cols], atol=1e-6)
    assert torch.allclose(actor_norm._var, critic_norm._var[:, cols], atol=1e-6)
    assert not torch.allclose(critic_norm._mean, torch.zeros_like(critic_norm._mean))
    other = TensorDict({k: v.clone() for k, v in groups.items()}, batch_size=[8])
    other["critic"][:, :3] += 10.0  # only the privileged term changes
    with torch.no_grad():
        assert torch.equal(alg.actor(groups), alg.actor(other))
        assert not torch.equal(alg.critic(groups), alg.critic(other))

    # Without privileged terms: one group, read by both models (as before).
    plain = CollectorVecEnv(fake, fake.hello, 100, lambda: False)  # type: ignore[arg-type]
    assert list(plain.get_observations().keys()) == ["policy"]
    both = UnilabOnPolicyRunner.for_plan(plain, plan.algo, "cpu")
    assert both.cfg["obs_groups"] == {"actor": ["policy"], "critic": ["policy"]}
    assert (both.alg.actor.obs_dim, both.alg.critic.obs_dim) == (13, 13)


def test_a_ppo_run_trains_an_asymmetric_actor_critic_and_deploys_the_actor(tmp_path: Path) -> None:
    """A PPO smoke run of g1_walk (two rollouts of 64 envs x 24 steps) with base_lin_vel for the
    critic alone: its checkpoint's actor and actor normalizer take the actor's columns, its critic
    the whole observation; the export takes the actor's columns and its layout omits base_lin_vel."""
    import numpy as np
    import onnxruntime as ort

    from unilab.records.policy import load_policy

    r = run_unilab("apply", str(SPECS / "g1.toml"), "--smoke", "--quiet", "--set", PRIVILEGED,
                   "--set", 'algo={name="ppo"}', "--set", f'run.output_dir="{tmp_path}"')  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "succeeded" and m["algo"] == "ppo"
    assert m["counters"]["env_steps"] == 2 * 64 * 24

    blob = torch.load(sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))[-1], weights_only=True)
    st = blob["state"]
    terms = [(str(n), int(d)) for n, d in st["obs_terms"]]
    assert terms[0] == ("base_lin_vel", 3)
    full = st["obs_dim"]
    assert full == sum(d for _, d in terms)
    cols = actor_columns(SimpleTask(["base_lin_vel"]), terms)
    assert cols == list(range(3, full))
    actor, critic = st["ppo"]["actor_state_dict"], st["ppo"]["critic_state_dict"]
    assert actor["mlp.0.weight"].shape[1] == full - 3 and critic["mlp.0.weight"].shape[1] == full
    # Each model's normalizer learnt its own group from the same rollouts.
    assert actor["obs_normalizer._mean"].shape[-1] == full - 3 and critic["obs_normalizer._mean"].shape[-1] == full
    assert torch.allclose(actor["obs_normalizer._mean"], critic["obs_normalizer._mean"][:, cols], atol=1e-5)

    e = run_unilab("eval", str(run_dir), "--episodes", "2", "--json")  # fed the actor's columns
    assert e.returncode == 0, e.stderr
    assert json.loads(e.stdout)["episodes"] == 2
    x = run_unilab("export", str(run_dir))
    assert x.returncode == 0, x.stderr
    sess = ort.InferenceSession(str(run_dir / "policy.onnx"))
    assert sess.get_inputs()[0].shape[1] == full - 3
    layout = json.loads(sess.get_modelmeta().custom_metadata_map["unilab.observation_layout"])
    assert list(layout) == [n for n, _ in terms if n != "base_lin_vel"]
    assert next(iter(layout.values())) == [0, 3] and max(end for _, end in layout.values()) == full - 3
    policy, obs_dim = load_policy(run_dir)
    assert obs_dim == full - 3
    obs = torch.randn(8, obs_dim, generator=torch.Generator().manual_seed(0))
    (got,) = sess.run(["action"], {"obs": obs.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, policy(obs).numpy(), atol=1e-5)


class SimpleTask:
    """A task section's `privileged_observations` alone (what `actor_columns` reads)."""

    def __init__(self, privileged: list[str]) -> None:
        self.privileged_observations = privileged
