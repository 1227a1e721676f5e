"""Domain randomization's per-world model parameters (floor friction, masses, the base's centre of
mass, joint armature, damping and friction, servo gains) on both physics backends: they reach the
right worlds' models, both backends give the same randomised trajectories, and the trajectories
really change."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from tests.test_sim_backends import DECIMATION, N, actions, g1_xml, reset_standing
from unilab.collect.build import build_collector
from unilab.errors import UnilabError
from unilab.sim.factory import make_backend
from unilab.sim.world_params import WorldParamTargets
from unilab.spec.models import SimSpec, task_spec

FRICTION = torch.tensor([0.3, 1.2, 1.0, 0.9])  # world 2: the nominal model again
MASS = torch.tensor([3.0, -1.0, 0.0, 2.0])
TOL = {"qpos": 1e-4, "qvel": 5e-3, "xpos": 1e-4, "actuator_force": 1e-2}


def test_targets_are_the_floor_the_floating_base_and_every_joint_and_servo() -> None:
    mjm = mujoco.MjModel.from_xml_string(g1_xml())
    t = WorldParamTargets.from_model(mjm)
    assert mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_GEOM, t.floor_geom) == "floor"
    assert mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_BODY, t.base_body) == "pelvis"
    m2 = mujoco.MjModel.from_xml_string(g1_xml())
    p = {k: v[0] for k, v in t.identity_params(1).items()}
    p["floor_friction"] = np.float32(0.4)
    p["base_mass_offset"] = np.float32(2.0)
    p["base_com_offset"] = np.array([0.01, -0.02, 0.03], dtype=np.float32)
    p["link_mass_scale"] = np.full(mjm.nbody, 1.1, dtype=np.float32)
    p["armature_scale"] = np.full(mjm.nv, 0.5, dtype=np.float32)
    p["damping_offset"] = np.full(mjm.nv, 0.2, dtype=np.float32)
    p["frictionloss_scale"] = np.full(mjm.nv, 2.0, dtype=np.float32)
    p["kp_scale"] = np.full(mjm.nu, 0.9, dtype=np.float32)
    p["kd_scale"] = np.full(mjm.nu, 1.1, dtype=np.float32)
    t.apply_to_model(m2, p)
    b = t.base_body
    assert m2.geom_friction[t.floor_geom, 0] == pytest.approx(0.4)
    assert m2.body_mass[b] == pytest.approx(1.1 * mjm.body_mass[b] + 2.0, rel=1e-6)
    ratio = m2.body_mass[b] / mjm.body_mass[b]
    assert m2.body_inertia[b] == pytest.approx(mjm.body_inertia[b] * ratio, rel=1e-6)
    assert m2.body_ipos[b] == pytest.approx(mjm.body_ipos[b] + [0.01, -0.02, 0.03], abs=1e-6)
    # The subtree masses are MuJoCo's own for the new masses.
    d = mujoco.MjData(m2)
    expected = m2.body_subtreemass.copy()
    mujoco.mj_setConst(m2, d)
    assert m2.body_subtreemass == pytest.approx(expected, rel=1e-6)
    assert m2.dof_armature == pytest.approx(0.5 * mjm.dof_armature, rel=1e-6)
    assert m2.dof_damping == pytest.approx(mjm.dof_damping + 0.2, rel=1e-6)
    assert m2.dof_frictionloss == pytest.approx(2.0 * mjm.dof_frictionloss, rel=1e-6)
    assert m2.actuator_gainprm[:, 0] == pytest.approx(0.9 * mjm.actuator_gainprm[:, 0], rel=1e-6)
    assert m2.actuator_biasprm[:, 1] == pytest.approx(-0.9 * mjm.actuator_gainprm[:, 0], rel=1e-6)
    assert m2.actuator_biasprm[:, 2] == pytest.approx(1.1 * mjm.actuator_biasprm[:, 2], rel=1e-6)


def test_model_without_a_floor_is_refused() -> None:
    mjm = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>"
    )
    with pytest.raises(UnilabError, match="floor"):
        WorldParamTargets.from_model(mjm)


@pytest.mark.parametrize("kind", ["mujoco", "mjwarp"])
def test_a_backend_built_without_world_params_refuses_them(kind: str) -> None:
    with make_backend(kind, g1_xml(), 2, DECIMATION) as b:  # type: ignore[arg-type]
        with pytest.raises(UnilabError, match="per-world model parameters"):
            b.set_world_params(torch.ones(2, dtype=torch.bool), floor_friction=torch.ones(2))


def _run(backend, randomise: bool) -> list:
    reset_standing(backend)
    if randomise:
        # Worlds 1 and 3 first, then 0 and 2: a later call leaves the earlier worlds' values alone.
        odd = torch.tensor([False, True, False, True])
        backend.set_world_params(odd, floor_friction=FRICTION, base_mass_offset=MASS)
        backend.set_world_params(~odd, floor_friction=FRICTION, base_mass_offset=MASS)
        # Every other parameter on worlds 0 and 3 (world 2 stays the nominal model).
        d = backend.dims
        g = torch.Generator().manual_seed(3)
        some = torch.tensor([True, False, False, True])
        backend.set_world_params(
            some,
            base_com_offset=torch.rand(N, 3, generator=g) * 0.1 - 0.05,
            link_mass_scale=0.9 + 0.3 * torch.rand(N, d.nbody, generator=g),
            armature_scale=1.5 * torch.rand(N, d.nv, generator=g),
            damping_offset=0.5 * torch.rand(N, d.nv, generator=g),
            frictionloss_scale=2.0 * torch.rand(N, d.nv, generator=g),
            kp_scale=0.9 + 0.2 * torch.rand(N, d.nu, generator=g),
            kd_scale=0.9 + 0.2 * torch.rand(N, d.nu, generator=g),
        )
    out = []
    # Five control steps, as the unrandomised agreement test between resets: on the sixth, MuJoCo Warp's
    # fixed 10 solver iterations stop short in the heavy low-friction world and the two drift apart.
    for a in actions(5, backend.dims.nu, seed=7):
        s = backend.step(a)
        out.append({f: getattr(s, f).clone() for f in TOL})
    return out


@pytest.mark.slow
def test_both_backends_agree_on_randomised_worlds_and_randomisation_matters() -> None:
    xml = g1_xml()
    with (
        make_backend("mujoco", xml, N, DECIMATION, workers=2, world_params=True) as cpu,
        make_backend("mjwarp", xml, N, DECIMATION, device="cpu", world_params=True) as warp,
        make_backend("mujoco", xml, N, DECIMATION, workers=1) as nominal,
    ):
        a, b, c = _run(cpu, True), _run(warp, True), _run(nominal, False)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        for f, atol in TOL.items():
            torch.testing.assert_close(y[f], x[f], atol=atol, rtol=0, msg=f"{f} after step {k + 1}")
    # The heaviest world (+3 kg) moved measurably differently from the nominal model.
    assert (a[-1]["qpos"][0] - c[-1]["qpos"][0]).abs().max() > 10 * TOL["qpos"]
    assert (a[-1]["qpos"][1] - c[-1]["qpos"][1]).abs().max() > 10 * TOL["qpos"]
    # World 2 was given the nominal values: bitwise the nominal trajectory (nothing leaks between worlds).
    for k in range(len(a)):
        assert torch.equal(a[k]["qpos"][2], c[k]["qpos"][2]), k


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_g1_walk_randomises_at_reset_within_the_documented_ranges(backend: str) -> None:
    spec = task_spec(name="g1_walk", num_envs=N, domain_randomization=True)
    with build_collector(spec, SimSpec(backend=backend, workers=1), seed=2) as c:  # type: ignore[arg-type]
        c.reset_all()
        for _ in range(3):
            c.step(torch.zeros(N, 29))
        friction, offset, armature = _read_params(c.backend)
    assert ((friction >= 0.3) & (friction <= 1.2)).all() and len(set(friction.tolist())) == N
    assert ((offset >= -1.0) & (offset <= 3.0)).all() and len(set(offset.tolist())) == N
    assert ((armature >= 0.8 - 1e-5) & (armature <= 1.2 + 1e-5)).all() and len(set(armature[:, -1].tolist())) == N


def _read_params(backend) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Floor friction, added base mass and the armature scale, as the backend holds them."""
    t = backend._targets if hasattr(backend, "_wp") else backend._world_params
    if hasattr(backend, "_m") and hasattr(backend, "_wp"):  # MJWarp: the batched model fields
        to_t = backend._wp.to_torch
        armature = to_t(backend._m.dof_armature)[:, 6:] / torch.tensor(t.dof_armature[6:], dtype=torch.float32)
        return (
            to_t(backend._m.geom_friction)[:, t.floor_geom, 0],
            to_t(backend._m.body_mass)[:, t.base_body]
            - to_t(backend._m.body_mass)[:, t.base_body].new_tensor(t.body_mass[t.base_body])
            * backend._params["link_mass_scale"][:, t.base_body],
            armature,
        )
    a = backend._arrays  # CPU MuJoCo: the staged values (applied by the stepper at its next command)
    return (
        torch.from_numpy(a["floor_friction"].copy()),
        torch.from_numpy(a["base_mass_offset"].copy()),
        torch.from_numpy(a["armature_scale"][:, 6:].copy()),
    )
