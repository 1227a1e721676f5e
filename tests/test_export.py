"""`unilab export` for every learner that has a deployable actor. SAC's and PPO's exports are
checked with their runs (tests/test_apply.py, tests/test_ppo.py); FlashSAC's here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from tests.conftest import SPECS


def test_flashsac_policy_exports_and_matches_torch(tmp_path: Path) -> None:
    import onnxruntime as ort

    from unilab.records.policy import load_policy

    algo = '{name="flashsac", batch_size=32, hidden_dims=[16], expansion=2, warmup_env_steps=64}'
    sets = ["run.total_env_steps=320", f"algo={algo}", f'run.output_dir="{tmp_path / "runs"}"']
    args = [a for s in sets for a in ("--set", s)]
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "apply", str(SPECS / "cartpole.toml"), *args, "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    e = subprocess.run([sys.executable, "-m", "unilab", "export", str(run_dir)], capture_output=True, text=True)
    assert e.returncode == 0 and e.stderr == "", e.stderr
    policy, obs_dim = load_policy(run_dir)
    obs = np.random.default_rng(0).normal(size=(5, obs_dim)).astype(np.float32)
    sess = ort.InferenceSession(str(run_dir / "policy.onnx"))
    got = sess.run(None, {"obs": obs})[0]
    want = policy(torch.from_numpy(obs)).detach().numpy()
    assert got.shape == (5, 1) and np.abs(got - want).max() < 1e-5


def test_a_gpu_runs_checkpoint_exports_on_a_cpu(tmp_path: Path) -> None:
    """A GPU run's learner state holds CUDA generator states (16 bytes; a CPU generator's is 5056),
    which a CPU learner cannot load; export takes only the actor."""
    from tests.conftest import host
    from unilab.algos.common import make_learner
    from unilab.plan.compile import compile_plan
    from unilab.records.policy import policy_from_state
    from unilab.spec.load import load_spec

    loaded = load_spec(SPECS / "cartpole.toml", ['algo={name="sac", hidden_dims=[16, 16]}'])
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    learner = make_learner(plan.algo, 5, 1, torch.device("cpu"), 3)
    state = learner.state_dict()
    state["update_gen"] = state["act_gen"] = torch.zeros(16, dtype=torch.uint8)  # as torch.cuda.Generator
    blob = {"learner": state, "obs_dim": 5, "act_dim": 1, "normalizer": {}}
    plan = plan.model_copy(update={"algo": plan.algo.model_copy(update={"normalize_observations": False})})
    policy, obs_dim = policy_from_state(plan, blob)
    # Beyond the normalizer's clip of 10: a run without normalization fed its actor raw observations.
    obs = 15 * torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    assert obs_dim == 5 and torch.equal(policy(obs), torch.tanh(learner.actor(obs)[0]))
    clipped = torch.tanh(learner.actor(obs.clamp(-10, 10))[0])
    assert not torch.equal(policy(obs), clipped)  # what export played before it followed training


def test_a_motion_tracking_export_names_the_clip_it_tracks() -> None:
    """A tracking policy follows one reference clip: the file says which (by digest), beside the
    PD loop and its limits that every G1 export carries."""
    import json

    from tests.conftest import host
    from unilab.plan.compile import compile_plan
    from unilab.run.export import deployment_metadata
    from unilab.spec.load import load_spec

    loaded = load_spec(SPECS / "g1_motion_tracking.toml")
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    meta = deployment_metadata(plan)
    ref = plan.task.reference_motion
    assert ref is not None
    assert json.loads(meta["unilab.reference_motion"]) == {
        "source": ref.source,
        "sha256": ref.sha256,
        "num_frames": ref.num_frames,
        "fps": ref.fps,
    }
    kp, low_high = json.loads(meta["unilab.joint_kp"]), json.loads(meta["unilab.target_range"])
    assert len(kp) == len(low_high) == 29 and all(k > 0 for k in kp) and all(lo < hi for lo, hi in low_high)


def test_an_export_carries_the_action_scale_the_run_trained_with() -> None:
    """`task.action_scale` changes what an action means; a deployment must map it the same way."""
    import json

    from tests.conftest import host
    from unilab.plan.compile import compile_plan
    from unilab.run.export import deployment_metadata
    from unilab.spec.load import load_spec

    scales = {}
    for factor in ("0.25", "0.5"):
        loaded = load_spec(SPECS / "g1.toml", [f"task.action_scale={factor}"])
        plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
        scales[factor] = np.array(json.loads(deployment_metadata(plan)["unilab.action_scale"]))
    np.testing.assert_allclose(scales["0.5"], 2 * scales["0.25"], rtol=1e-5)


def test_the_metadata_names_the_joints_the_actions_drive_and_the_pose_they_offset() -> None:
    """g1.toml drives the 12 leg joints from the knees-bent pose: a deployment reads which joints
    the action's entries drive (in order) and the default pose every joint holds otherwise."""
    import json

    from tests.conftest import host
    from unilab.plan.compile import compile_plan
    from unilab.robot import g1
    from unilab.run.export import deployment_metadata
    from unilab.spec.load import load_spec

    for sets, joints, pose in (
        ([], g1.LEG_JOINTS, "knees_bent"),
        (['task.actions="legs_waist_yaw"'], g1.LEG_AND_WAIST_YAW_JOINTS, "knees_bent"),
        (['task.actions="all"', 'task.default_pose="home"'], g1.JOINT_NAMES, "home"),
    ):
        loaded = load_spec(SPECS / "g1.toml", sets)
        meta = deployment_metadata(compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir))
        assert json.loads(meta["unilab.action_joints"]) == list(joints)
        np.testing.assert_allclose(
            json.loads(meta["unilab.default_joint_pos"]), g1.default_pose_vector(pose), atol=1e-6
        )


def test_torchscript_export_runs_as_the_onnx_one_with_the_same_metadata(tmp_path: Path) -> None:
    """`--format torchscript` writes RUN_DIR/policy.pt: the same actions as the ONNX export on the same
    observations, and the same deployment metadata (as the extra file unilab_metadata.json)."""
    import json
    import warnings

    import onnxruntime as ort

    r = subprocess.run(
        [sys.executable, "-m", "unilab", "apply", str(SPECS / "g1.toml"), "--smoke", "--quiet",
         "--set", f'run.output_dir="{tmp_path / "runs"}"'],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    for fmt in ("onnx", "torchscript"):
        e = subprocess.run(
            [sys.executable, "-m", "unilab", "export", str(run_dir), "--format", fmt], capture_output=True, text=True
        )
        assert e.returncode == 0 and e.stderr == "", e.stderr
    sess = ort.InferenceSession(str(run_dir / "policy.onnx"))
    obs_dim = sess.get_inputs()[0].shape[1]
    obs = np.random.default_rng(0).normal(size=(7, obs_dim)).astype(np.float32)
    extra = {"unilab_metadata.json": ""}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 marks TorchScript deprecated
        module = torch.jit.load(str(run_dir / "policy.pt"), _extra_files=extra)
    got = module(torch.from_numpy(obs)).numpy()
    want = sess.run(None, {"obs": obs})[0]
    assert got.shape == want.shape == (7, 12) and np.abs(got - want).max() < 1e-5
    onnx_meta = sess.get_modelmeta().custom_metadata_map
    assert json.loads(extra["unilab_metadata.json"]) == onnx_meta
    assert json.loads(onnx_meta["unilab.action_joints"])[0] == "left_hip_pitch_joint"


def test_an_export_format_it_does_not_know_is_refused() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "export", "runs/x", "--format", "tflite"], capture_output=True, text=True
    )
    assert r.returncode == 1 and "invalid choice: 'tflite'" in r.stderr
