"""Mirror-symmetry augmentation (`algo.mirror_augmentation`): g1_walk's left-right mirror is the
physics' own (a world started in the mirror image of another, given the mirrored actions, keeps
producing the mirrored observations and the same rewards), half of each batch is the mirror image
of the other half, and a run with it plans and trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, run_unilab
from unilab.collect.build import build_collector
from unilab.learn.mirror import BatchMirror
from unilab.learn.replay import Batch
from unilab.robot import g1
from unilab.spec.models import SimSpec, task_spec
from unilab.tasks.mirror import TermMirror, compose
from unilab.tasks.registry import task_def

WALK = {"actions": "legs", "default_pose": "knees_bent", "gait_period_s": 0.8, "commands": {"resample_s": 0.0}}


def _mirror_for(spec, task) -> BatchMirror:
    return BatchMirror(task_def(spec).mirror(spec, [(t.name, t.dim) for t in task.observations]), "cpu")


def test_the_g1_joint_mirror_swaps_sides_and_flips_roll_and_yaw() -> None:
    assert g1.mirror_joint("left_hip_roll_joint") == ("right_hip_roll_joint", -1.0)
    assert g1.mirror_joint("right_knee_joint") == ("left_knee_joint", 1.0)
    assert g1.mirror_joint("waist_yaw_joint") == ("waist_yaw_joint", -1.0)
    assert g1.mirror_joint("waist_pitch_joint") == ("waist_pitch_joint", 1.0)
    with pytest.raises(ValueError, match="not a G1 joint"):
        g1.mirror_joint("left_toe_joint")


@pytest.mark.parametrize("actions", ["legs", "all", "legs_waist_yaw"])
def test_the_mirror_is_its_own_inverse(actions: str) -> None:
    spec = task_spec(name="g1_walk", num_envs=1, **{**WALK, "actions": actions})
    d = task_def(spec)
    _, act = d.mirror_terms(spec)  # type: ignore[misc]
    dims = {"gait_phase": 2, "joint_pos_rel": 29, "joint_vel_rel": 29, "last_action": len(act.index)}
    m = BatchMirror(d.mirror(spec, [(n, dims.get(n, 3)) for n in d.observations(spec)]), "cpu")
    x = torch.randn(5, len(m.obs_index))
    a = torch.randn(5, len(m.act_index))
    torch.testing.assert_close(m.obs(m.obs(x)), x)
    torch.testing.assert_close(m.action(m.action(a)), a)
    assert not torch.equal(m.obs(x), x)


def test_a_term_without_a_mirror_or_of_another_width_is_named() -> None:
    with pytest.raises(ValueError, match="'height_scan' has no mirror"):
        compose([("height_scan", 4)], {}, TermMirror.signs(1.0))
    with pytest.raises(ValueError, match="has 4 columns, its mirror 3"):
        compose([("base_lin_vel", 4)], {"base_lin_vel": TermMirror.signs(1, -1, 1)}, TermMirror.signs(1.0))


def test_a_mirrored_world_plays_the_mirror_image_with_the_same_rewards() -> None:
    spec = task_spec(name="g1_walk", num_envs=2, **WALK)
    with build_collector(spec, SimSpec(backend="mujoco", workers=1), seed=2) as c:
        c.reset_all()
        t = c.task
        m = _mirror_for(spec, t)
        # The standing pose is its own mirror image (the reset pose's joints are relative to it).
        j = slice(t.observation_layout()["joint_pos_rel"].start, t.observation_layout()["joint_pos_rel"].stop)
        assert torch.equal(
            m.obs_index[j] - j.start,
            torch.tensor([g1.JOINT_NAMES.index(g1.mirror_joint(n)[0]) for n in g1.JOINT_NAMES]),
        )
        dj = t.default_joint_pos
        torch.testing.assert_close(dj[m.obs_index[j] - j.start] * m.obs_sign[j], dj)
        # World 1 := world 0 reflected through its sagittal plane.
        q, v = t.state.qpos.clone(), t.state.qvel.clone()
        bq, bv = t._base_pos.start, t._base_lin.start
        jm, js = m.obs_index[j] - j.start, m.obs_sign[j]
        q[1], v[1] = q[0], v[0]
        q[1, bq + 1] = -q[0, bq + 1]
        w, x, y, z = q[0, bq + 3 : bq + 7]
        q[1, bq + 3 : bq + 7] = torch.stack([w, -x, y, -z])
        q[1, t._qpos_idx] = q[0, t._qpos_idx][jm] * js
        v[1, bv : bv + 3] = v[0, bv : bv + 3] * torch.tensor([1.0, -1.0, 1.0])
        v[1, bv + 3 : bv + 6] = v[0, bv + 3 : bv + 6] * torch.tensor([-1.0, 1.0, -1.0])
        v[1, t._qvel_idx] = v[0, t._qvel_idx][jm] * js
        t.read_state(c.backend.reset(torch.tensor([False, True]), q, v))
        t.velocity_command[1] = t.velocity_command[0] * torch.tensor([1.0, -1.0, -1.0])
        t.gait_phase[1] = (t.gait_phase[0] + 0.5) % 1.0
        obs = t.compute_observations()
        torch.testing.assert_close(m.obs(obs[:1])[0], obs[1], atol=1e-6, rtol=0)
        g = torch.Generator().manual_seed(0)
        for _ in range(20):  # 0.4 s of random leg actions
            a0 = torch.rand(1, 12, generator=g) * 2 - 1
            obs, reward, *_ = c.step(torch.cat([a0, m.action(a0)]))
            scale = obs[0].abs().clamp(min=1.0)
            # Within a few per cent (the float32 physics of two worlds drifts apart slowly).
            assert ((m.obs(obs[:1])[0] - obs[1]).abs() / scale).max() < 0.05
            assert reward[1] == pytest.approx(float(reward[0]), rel=1e-2, abs=1e-6)


def test_half_of_an_augmented_batch_is_the_mirror_image_of_the_other() -> None:
    spec = task_spec(name="g1_walk", num_envs=1, **WALK)
    d = task_def(spec)
    obs_terms = [("base_lin_vel", 3), ("base_ang_vel", 3), ("projected_gravity", 3), ("velocity_command", 3)]
    obs_terms += [("gait_phase", 2), ("joint_pos_rel", 29), ("joint_vel_rel", 29), ("last_action", 12)]
    m = BatchMirror(d.mirror(spec, obs_terms), "cpu")
    assert BatchMirror.sampled(256) == 128 and BatchMirror.sampled(7) == 4
    half = Batch(torch.randn(4, 84), torch.rand(4, 12) * 2 - 1, torch.randn(4), torch.randn(4, 84), torch.rand(4))
    b = m.augment(half, 7)
    assert b.obs.shape == (7, 84) and b.action.shape == (7, 12) and b.reward.shape == (7,)
    torch.testing.assert_close(b.obs[4:], m.obs(half.obs)[:3])
    torch.testing.assert_close(b.next_obs[4:], m.obs(half.next_obs)[:3])
    torch.testing.assert_close(b.action[4:], m.action(half.action)[:3])
    torch.testing.assert_close(b.reward[4:], half.reward[:3])
    torch.testing.assert_close(b.discount[4:], half.discount[:3])
    torch.testing.assert_close(b.obs[:4], half.obs)  # the sampled half untouched
    # base_lin_vel's y, the command's lateral speed and yaw rate change sign; x does not.
    assert b.obs[4, 0] == half.obs[0, 0] and b.obs[4, 1] == -half.obs[0, 1]
    assert b.obs[4, 10] == -half.obs[0, 10] and b.obs[4, 11] == -half.obs[0, 11]


@pytest.mark.slow
def test_a_run_with_mirror_augmentation_plans_and_trains(tmp_path: Path) -> None:
    r = run_unilab(
        "apply",
        str(ROOT / "specs" / "g1.toml"),
        "--smoke",
        "--quiet",
        "--set",
        "algo.mirror_augmentation=true",
        "--set",
        f'run.output_dir="{tmp_path}"',
    )
    assert r.returncode == 0, r.stderr
    (run,) = tmp_path.iterdir()
    assert "mirror_augmentation = true" in (run / "plan.toml").read_text()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["counters"]["updates"] > 0
