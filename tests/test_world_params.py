"""Domain randomization's per-world model parameters (floor friction, added base mass) on both
physics backends: they reach the right worlds' models, both backends give the same randomised
trajectories, and the trajectories really change."""

from __future__ import annotations

import mujoco
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


def test_targets_are_the_floor_and_the_floating_base() -> None:
    mjm = mujoco.MjModel.from_xml_string(g1_xml())
    t = WorldParamTargets.from_model(mjm)
    assert mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_GEOM, t.floor_geom) == "floor"
    assert mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_BODY, t.base_body) == "pelvis"
    assert t.chain == (t.base_body, 0)
    m2 = mujoco.MjModel.from_xml_string(g1_xml())
    t.apply_to_model(m2, 0.4, 2.0)
    assert m2.geom_friction[t.floor_geom, 0] == pytest.approx(0.4)
    assert m2.body_mass[t.base_body] == pytest.approx(t.base_mass + 2.0)
    assert m2.body_subtreemass[0] == pytest.approx(mjm.body_subtreemass[0] + 2.0)
    ratio = (t.base_mass + 2.0) / t.base_mass
    assert m2.body_inertia[t.base_body] == pytest.approx(mjm.body_inertia[t.base_body] * ratio)


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
        friction, offset = _read_params(c.backend)
    assert ((friction >= 0.3) & (friction <= 1.2)).all() and len(set(friction.tolist())) == N
    assert ((offset >= -1.0) & (offset <= 3.0)).all() and len(set(offset.tolist())) == N


def _read_params(backend) -> tuple[torch.Tensor, torch.Tensor]:
    if hasattr(backend, "_m") and hasattr(backend, "_wp"):  # MJWarp: the batched model fields
        to_t, t = backend._wp.to_torch, backend._targets
        return to_t(backend._m.geom_friction)[:, t.floor_geom, 0], to_t(backend._m.body_mass)[
            :, t.base_body
        ] - t.base_mass
    a = backend._arrays  # CPU MuJoCo: the staged values (applied by the stepper at its next command)
    return torch.from_numpy(a["floor_friction"].copy()), torch.from_numpy(a["base_mass_offset"].copy())
