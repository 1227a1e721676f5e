"""tools/sim2sim.py: an exported g1_walk policy played in plain MuJoCo, without unilab or torch.

The runner must see what unilab's collector sees and do to the robot what it does: the test steps
both from the same state with the same policy and compares every observation. Another model (here
the trained one without its actuators, its joints in another order) plays once the runner adds the
policy's PD loop; bad input of every kind the runner reads gets one paragraph and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import mujoco
import numpy as np
import pytest

from tests.conftest import ROOT, load_tool, run_unilab

SIM2SIM = ROOT / "tools" / "sim2sim.py"


def _sim2sim() -> ModuleType:
    return load_tool("sim2sim")


@pytest.fixture(scope="module")
def walk_run(g1_smoke_run: Path) -> Path:
    """A g1_walk run of the shipped spec (smoke length) and its policy.onnx."""
    e = run_unilab("export", str(g1_smoke_run))
    assert e.returncode == 0, e.stderr
    return g1_smoke_run


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SIM2SIM), *args], capture_output=True, text=True, timeout=300)


def test_the_runner_sees_and_steps_what_unilabs_collector_does(walk_run: Path) -> None:
    import torch

    from unilab.collect.build import build_collector
    from unilab.plan.inputs import planned_task
    from unilab.records.run_dir import RunDir

    s2s = _sim2sim()
    policy = s2s.Policy(walk_run / "policy.onnx")
    runner = s2s.VelocityEpisodes(policy, s2s.load_robot(policy, None))
    plan = RunDir(walk_run).read_plan("eval")
    task = planned_task(plan.task).model_copy(update={"num_envs": 1})
    with build_collector(task, plan.sim, num_envs=1, workers=1, seed=3, timing=False) as c:
        obs = c.reset_all()[0].double().numpy()
        d = runner.data
        d.qpos[:] = c.task.state.qpos[0].double().numpy()
        d.qvel[:] = c.task.state.qvel[0].double().numpy()
        mujoco.mj_forward(runner.r.model, d)
        cmd = c.task.velocity_command[0].double().numpy()
        runner.phase, runner.actions = 0.0, np.zeros(len(policy.action_joints))
        mine = runner.observe(cmd)
        np.testing.assert_allclose(mine, obs, atol=1e-5)
        for _ in range(25):  # half a second: a gait-clock phase and the policy's own actions
            action = np.clip(policy(obs), -1.0, 1.0)
            obs = c.step(torch.from_numpy(action[None]).float())[0][0].double().numpy()
            runner.step(mine)
            runner.phase = (runner.phase + runner.phase_step) % 1.0
            mine = runner.observe(cmd)
            # float32 observations and actions on unilab's side, float64 here
            np.testing.assert_allclose(mine, obs, atol=2e-3, rtol=1e-3)


def test_it_needs_neither_unilab_nor_torch_and_reports_in_json(walk_run: Path) -> None:
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import sim2sim; "
        "rc = sim2sim.main(sys.argv[2:]); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'unilab'})))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(SIM2SIM.parent), str(walk_run / "policy.onnx"), "--episodes", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    report, imported = r.stdout.rsplit("\n", 2)[0], r.stdout.rsplit("\n", 2)[1]
    assert json.loads(imported) == []
    figures = json.loads(report)
    assert figures["episodes"] == 2 and figures["to_time_limit"] + figures["falls"] == 2
    assert figures["differences"] == [] and figures["mean_length_steps"] >= 1


def test_a_model_without_servos_in_another_joint_order_plays_as_the_trained_one(walk_run: Path, tmp_path: Path) -> None:
    """The runner adds the policy's PD loop as position actuators: the physics is the trained one."""
    s2s = _sim2sim()
    policy = s2s.Policy(walk_run / "policy.onnx")
    spec = mujoco.MjSpec.from_string(policy.meta["unilab.mjcf"])
    for a in list(spec.actuators):
        spec.delete(a)
    other = tmp_path / "g1_no_actuators.xml"
    other.write_text(spec.to_xml())
    trained = json.loads(_run(str(walk_run / "policy.onnx"), "--episodes", "3", "--json").stdout)
    r = _run(str(walk_run / "policy.onnx"), "--episodes", "3", "--json", "--mjcf", str(other))
    assert r.returncode == 0, r.stderr
    played = json.loads(r.stdout)
    assert any("added the policy's PD loop" in n for n in played["differences"])
    assert not any(n.startswith(("kp", "kd", "armature")) for n in played["differences"])
    assert played["mean_length_steps"] == pytest.approx(trained["mean_length_steps"], rel=0.02)


@pytest.mark.parametrize(
    "case", ["missing", "not_onnx", "no_metadata", "joints", "mjcf_broken", "seed", "embedded_model_meshes_gone"]
)
def test_bad_input_gets_one_paragraph_and_exit_status_2(case: str, walk_run: Path, tmp_path: Path) -> None:
    policy = walk_run / "policy.onnx"
    if case == "missing":
        args, says = [str(tmp_path / "nope.onnx")], "is not a file"
    elif case == "not_onnx":
        (tmp_path / "p.onnx").write_text("not a model")
        args, says = [str(tmp_path / "p.onnx")], "is not an ONNX model"
    elif case == "no_metadata":
        import onnx
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 4])
        y = helper.make_tensor_value_info("act", TensorProto.FLOAT, [1, 4])
        graph = helper.make_graph([helper.make_node("Identity", ["obs"], ["act"])], "g", [x], [y])
        onnx.save(helper.make_model(graph), str(tmp_path / "plain.onnx"))
        args, says = [str(tmp_path / "plain.onnx")], "has no unilab metadata"
    elif case == "joints":
        xml = _sim2sim().Policy(policy).meta["unilab.mjcf"].replace('"left_knee_joint"', '"knee_l"')
        (tmp_path / "renamed.xml").write_text(xml)
        args, says = [str(policy), "--mjcf", str(tmp_path / "renamed.xml")], "has no joint named left_knee_joint"
    elif case == "seed":
        args, says = [str(policy), "--seed", "-1"], "seeds are whole numbers from 0"
    elif case == "embedded_model_meshes_gone":  # a user's robot whose mesh files moved since the export
        import onnx

        model = onnx.load(str(policy))
        (prop,) = [p for p in model.metadata_props if p.key == "unilab.mjcf"]
        mesh = f'<asset><mesh name="gone" file="{tmp_path / "gone.stl"}"/></asset><worldbody>'
        prop.value = prop.value.replace("<worldbody>", mesh, 1)
        onnx.save(model, str(tmp_path / "moved.onnx"))
        args, says = [str(tmp_path / "moved.onnx")], "the model in the file's metadata does not load here"
    else:
        (tmp_path / "broken.xml").write_text("<mujoco><worldbody><body></mujoco>")
        args, says = [str(policy), "--mjcf", str(tmp_path / "broken.xml")], "does not load in MuJoCo"
    r = _run(*args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("sim2sim: error: ") and says in r.stderr and "\n  fix: " in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_the_worked_example_in_the_deploy_docs_runs_on_an_export(walk_run: Path) -> None:
    import re

    text = (ROOT / "docs" / "deploy.md").read_text()
    match = re.search(r"A worked example.*?```python\n(.*?)```", text, re.S)
    assert match is not None
    scope: dict[str, object] = {}
    exec(match.group(1).replace('"policy.onnx"', repr(str(walk_run / "policy.onnx"))), scope)
    target = scope["target"]
    assert isinstance(target, np.ndarray) and target.shape == (29,) and np.isfinite(target).all()
