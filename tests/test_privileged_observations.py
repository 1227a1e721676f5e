"""`task.privileged_observations`: the critic sees them, the actor and the deployed policy do not.

A G1 policy meant for a real robot cannot read its base's linear velocity (no sensor measures it);
the critic may. The learner's actor reads its own columns, the export takes the actor's
observation alone, eval feeds it those columns, and what cannot be honoured is refused at plan time."""

from __future__ import annotations

import json
from pathlib import Path

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
        (["base_lin_vel"], {"name": "ppo"}, "PPO runs through rsl-rl-lib"),
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
    p = run_unilab("plan", str(SPECS / "g1.toml"), "--set", f'run.init_from="{run_dir}"')
    assert p.returncode == 1 and "[run.init-from]" in p.stderr, p.stderr
    assert 'task.privileged_observations is [] here, ["base_lin_vel"]' in p.stderr
    assert 'set task.privileged_observations = ["base_lin_vel"]' in p.stderr
