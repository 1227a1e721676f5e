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
    # The nominal robot without sensor noise or pushes: what sim2sim plays without --perturb. The
    # runner computes the actor's observation (without the critic's privileged terms).
    nominal = {"num_envs": 1, "observation_noise": False, "domain_randomization": False, "push_interval_s": None}
    task = planned_task(plan.task).model_copy(update=nominal)
    with build_collector(task, plan.sim, num_envs=1, workers=1, seed=3, timing=False) as c:
        at = c.task.observation_layout()
        cols = np.concatenate([np.arange(at[n].start, at[n].stop) for n, _, _ in policy.layout])
        actor_obs = lambda full: full[cols]  # noqa: E731
        obs = actor_obs(c.reset_all()[0].double().numpy())
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
            obs = actor_obs(c.step(torch.from_numpy(action[None]).float())[0][0].double().numpy())
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
    "case",
    [
        "missing",
        "not_onnx",
        "no_metadata",
        "joints",
        "mjcf_broken",
        "seed",
        "perturb_seed",
        "video_name",
        "embedded_model_meshes_gone",
    ],
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
    elif case == "perturb_seed":
        args, says = [str(policy), "--perturb", "-2"], "--perturb -2: seeds are whole numbers from 0"
    elif case == "video_name":
        args, says = [str(policy), "--video", str(tmp_path / "no" / "v.mp4")], "needs an .mp4 file name"
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


def test_perturb_draws_every_episode_anew_within_its_ranges_and_repeats_by_seed(walk_run: Path) -> None:
    s2s = _sim2sim()
    policy = s2s.Policy(walk_run / "policy.onnx")
    robot = s2s.load_robot(policy, None)
    m, a = robot.model, robot.actuators
    nominal = {
        "mass": m.body_mass.copy(),
        "armature": m.dof_armature.copy(),
        "frictionloss": m.dof_frictionloss.copy(),
        "kp": m.actuator_gainprm[a, 0].copy(),
    }
    pert = s2s.Perturbation(robot, seed=5)

    def drawn(episode: int) -> dict[str, np.ndarray]:
        pert.apply(episode)
        return {
            "mass": m.body_mass.copy(),
            "armature": m.dof_armature.copy(),
            "frictionloss": m.dof_frictionloss.copy(),
            "kp": m.actuator_gainprm[a, 0].copy(),
            "kp_bias": -m.actuator_biasprm[a, 1].copy(),
        }

    first, second, again = drawn(0), drawn(1), drawn(0)
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])  # the same seed and episode, the same robot
    assert not np.array_equal(first["mass"], second["mass"])  # another episode, another robot
    ranges = s2s.PERTURBATION
    moved = nominal["mass"] > 0
    ratio = first["mass"][moved] / nominal["mass"][moved]
    assert ranges["body_mass"][1] <= ratio.min() and ratio.max() <= ranges["body_mass"][2]
    assert len(set(np.round(ratio, 6))) > 10  # per body, not one factor for all
    has = nominal["armature"] > 0
    ratio = first["armature"][has] / nominal["armature"][has]
    assert ranges["dof_armature"][1] <= ratio.min() and ratio.max() <= ranges["dof_armature"][2]
    kp = first["kp"] / nominal["kp"]
    assert ranges["kp"][1] <= kp.min() and kp.max() <= ranges["kp"][2]
    np.testing.assert_allclose(first["kp_bias"], first["kp"])  # still a position servo
    # The subtree masses follow: MuJoCo's total equals the bodies' sum.
    assert m.body_subtreemass[0] == pytest.approx(first["mass"].sum())


def test_perturbed_actions_reach_the_servos_one_control_step_late(walk_run: Path) -> None:
    s2s = _sim2sim()
    policy = s2s.Policy(walk_run / "policy.onnx")
    robot = s2s.load_robot(policy, None)
    late = s2s.VelocityEpisodes(policy, robot, latency_steps=1)
    obs, _ = late.reset(np.random.default_rng(0))
    sent: list[np.ndarray] = []
    late._physics = lambda actions: sent.append(actions.copy())  # type: ignore[method-assign]
    late.step(obs)
    late.step(obs)
    np.testing.assert_array_equal(sent[0], np.zeros(len(policy.action_joints)))  # the standing pose first
    np.testing.assert_array_equal(sent[1], np.clip(policy(obs), -1.0, 1.0))  # then the first action


def test_video_films_the_first_episodes_from_the_side(walk_run: Path, tmp_path: Path) -> None:
    import imageio_ffmpeg

    out = tmp_path / "sim2sim.mp4"
    r = _run(str(walk_run / "policy.onnx"), "--episodes", "2", "--perturb", "0", "--video", str(out))
    assert r.returncode == 0, r.stderr
    assert f"video: {out} (2 episodes" in r.stdout and out.is_file()
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(out))
    lengths = [int(x) for x in __import__("re").findall(r"episode +\d+: +(\d+) steps", r.stdout)]
    # Every second 50 Hz step, each episode's start state included.
    assert frames == sum(len(range(0, n + 1, 2)) for n in lengths) and seconds > 0
    assert not list(tmp_path.glob("*.part.mp4"))


def test_motor_armature_gives_a_model_without_rotor_inertias_the_motors(walk_run: Path, tmp_path: Path) -> None:
    """mjlab's g1.xml has no armature (mjlab sets the motors' reflected inertia in code):
    --motor-armature sets it, keeping the model's own damping and friction loss."""
    s2s = _sim2sim()
    policy = s2s.Policy(walk_run / "policy.onnx")
    spec = mujoco.MjSpec.from_string(policy.meta["unilab.mjcf"])
    for j in spec.joints:
        j.armature = 0.0
        j.frictionloss = 0.0
    other = tmp_path / "g1_no_armature.xml"
    other.write_text(spec.to_xml())
    bare = json.loads(_run(str(walk_run / "policy.onnx"), "--episodes", "1", "--json", "--mjcf", str(other)).stdout)
    assert any(n.startswith("armature: differs on 29 of 29") for n in bare["differences"])
    r = _run(str(walk_run / "policy.onnx"), "--episodes", "1", "--json", "--mjcf", str(other), "--motor-armature")
    assert r.returncode == 0, r.stderr
    notes = json.loads(r.stdout)["differences"]
    assert "joint armature set to the motors' reflected inertia (--motor-armature)" in notes
    assert not any(n.startswith("armature:") for n in notes)
    assert any(n.startswith("frictionloss: differs on 29 of 29") for n in notes)  # the model's own, kept
    both = _run(str(walk_run / "policy.onnx"), "--mjcf", str(other), "--motor-armature", "--trained-joint-dynamics")
    assert both.returncode == 2 and "pass one of the two" in both.stderr
