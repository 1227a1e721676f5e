"""The physics backend contract, checked against both backends with the G1 model.

Every backend: fixed shapes and dtypes, tensors updated in place, masked reset that leaves the
other worlds bitwise untouched, controls that reach the physics. The CPU backend is also checked
against a plain MuJoCo loop (same trajectory as ``mj_step``, state equal to ``mj_forward`` of the
returned qpos/qvel), and the two backends against each other.
"""

from __future__ import annotations

import functools

import mujoco
import numpy as np
import pytest
import torch

from tests.sim_models import pose_state
from unilab.errors import UnilabError
from unilab.robot import g1
from unilab.robot.model import build_model_xml
from unilab.sim.contract import PhysicsState
from unilab.sim.factory import make_backend

N = 4
DECIMATION = 4
FIELDS = ("qpos", "qvel", "ctrl", "xpos", "xquat", "cvel", "actuator_force", "sensordata")


@functools.cache
def g1_xml() -> str:
    return build_model_xml()


@functools.cache
def standing() -> tuple[torch.Tensor, torch.Tensor]:
    """qpos [N, nq] of the G1 standing on the floor and the ctrl [N, nu] that holds that pose."""
    qpos, ctrl = pose_state(g1_xml(), g1.DEFAULT_POSE, g1.DEFAULT_BASE_HEIGHT)
    return torch.tensor(qpos).repeat(N, 1), torch.tensor(ctrl).repeat(N, 1)


def actions(steps: int, nu: int, seed: int = 0) -> list[torch.Tensor]:
    """The standing ctrl plus +-0.15 rad of noise: the robot moves and its feet keep contact."""
    g = torch.Generator().manual_seed(seed)
    hold = standing()[1]
    return [hold + 0.3 * (torch.rand(N, nu, generator=g) - 0.5) for _ in range(steps)]


def reset_standing(backend) -> PhysicsState:
    qpos, _ = standing()
    return backend.reset(torch.ones(N, dtype=torch.bool), qpos, torch.zeros(N, backend.dims.nv))


BACKENDS = {
    "mujoco-inprocess": dict(backend="mujoco", workers=1),
    "mujoco-2workers": dict(backend="mujoco", workers=2),
    "mjwarp-cpu": dict(backend="mjwarp", workers=1),
}


@pytest.fixture(
    scope="module",
    params=[
        "mujoco-inprocess",
        "mujoco-2workers",
        pytest.param("mjwarp-cpu", marks=pytest.mark.slow),
    ],
)
def backend(request):
    b = make_backend(model_xml=g1_xml(), num_envs=N, decimation=DECIMATION, device="cpu", **BACKENDS[request.param])
    yield b
    b.close()


def test_state_has_the_contract_shapes_and_dtypes(backend):
    m = mujoco.MjModel.from_xml_string(g1_xml())
    d = backend.dims
    assert (d.nq, d.nv, d.nu, d.nbody, d.nsensordata) == (m.nq, m.nv, m.nu, m.nbody, m.nsensordata)
    s = backend.state
    expected = {
        "qpos": (N, m.nq),
        "qvel": (N, m.nv),
        "ctrl": (N, m.nu),
        "xpos": (N, m.nbody, 3),
        "xquat": (N, m.nbody, 4),
        "cvel": (N, m.nbody, 6),
        "actuator_force": (N, m.nu),
        "sensordata": (N, m.nsensordata),
    }
    for name, shape in expected.items():
        t = getattr(s, name)
        assert tuple(t.shape) == shape, name
        assert t.dtype == torch.float32, name
        assert t.device == backend.device == torch.device("cpu"), name
    assert backend.num_envs == N


def test_step_and_reset_update_the_same_tensors_in_place(backend):
    s0 = reset_standing(backend)
    before = {f: (getattr(s0, f), getattr(s0, f).data_ptr(), getattr(s0, f).clone()) for f in FIELDS}
    s1 = backend.step(actions(1, backend.dims.nu)[0])
    assert s1 is s0 is backend.state
    for f, (tensor, ptr, old) in before.items():
        now = getattr(s1, f)
        assert now is tensor and now.data_ptr() == ptr, f
        assert not torch.equal(now, old), f"{f} did not change after a step"
    s2 = reset_standing(backend)
    assert s2 is s0
    assert all(getattr(s2, f) is before[f][0] for f in FIELDS)


def test_masked_reset_leaves_other_worlds_bitwise_untouched(backend):
    reset_standing(backend)
    for a in actions(3, backend.dims.nu, seed=1):
        backend.step(a)
    s = backend.state
    snapshot = {f: getattr(s, f).clone() for f in FIELDS}
    mask = torch.tensor([True, False, True, False])
    qpos = standing()[0].clone()
    qpos[:, 0] += torch.arange(N, dtype=torch.float32)  # a different place per world
    qpos[1] = float("nan")  # rows of unmasked worlds must be ignored
    qvel = torch.full((N, backend.dims.nv), 0.01)
    backend.reset(mask, qpos, qvel)
    for f in FIELDS:
        assert torch.equal(getattr(s, f)[~mask], snapshot[f][~mask]), f
    assert torch.equal(s.qpos[mask], qpos[mask])
    assert torch.equal(s.qvel[mask], qvel[mask])
    assert torch.all(s.ctrl[mask] == 0)
    # derived quantities follow the new state: the pelvis (body 1) sits where the free joint says
    torch.testing.assert_close(s.xpos[mask, 1], qpos[mask, :3], atol=1e-6, rtol=0)


def test_an_empty_reset_mask_changes_nothing(backend):
    reset_standing(backend)
    backend.step(actions(1, backend.dims.nu)[0])
    snapshot = {f: getattr(backend.state, f).clone() for f in FIELDS}
    backend.reset(torch.zeros(N, dtype=torch.bool), standing()[0], torch.zeros(N, backend.dims.nv))
    for f in FIELDS:
        assert torch.equal(getattr(backend.state, f), snapshot[f]), f


def test_ctrl_is_applied(backend):
    reset_standing(backend)
    hold = standing()[1]
    ctrl = hold.clone()
    ctrl[1] += 0.3  # world 1 bends every joint; worlds 0, 2 and 3 hold the pose
    s = backend.step(ctrl)
    assert torch.equal(s.ctrl, ctrl)
    assert torch.equal(s.qpos[0], s.qpos[2]) and torch.equal(s.qpos[0], s.qpos[3])
    assert not torch.allclose(s.qpos[0], s.qpos[1], atol=1e-4)
    # actuator_force is that of the returned state and ctrl: kp * (ctrl - q) - kv * qdot, with ctrl
    # clamped to ctrlrange and the force to forcerange
    m = mujoco.MjModel.from_xml_string(g1_xml())
    joints = m.actuator_trnid[:, 0]
    q = s.qpos[:, m.jnt_qposadr[joints]].double()
    qd = s.qvel[:, m.jnt_dofadr[joints]].double()
    kp, bias = torch.tensor(m.actuator_gainprm[:, 0]), torch.tensor(m.actuator_biasprm[:, :3])
    crange = torch.tensor(m.actuator_ctrlrange)
    target = torch.minimum(torch.maximum(ctrl.double(), crange[:, 0]), crange[:, 1])
    force = kp * target + bias[:, 0] + bias[:, 1] * q + bias[:, 2] * qd
    lo, hi = torch.tensor(m.actuator_forcerange[:, 0]), torch.tensor(m.actuator_forcerange[:, 1])
    expected = torch.minimum(torch.maximum(force, lo), hi).float()
    torch.testing.assert_close(s.actuator_force, expected, atol=1e-3, rtol=1e-4)


def test_bad_shapes_are_refused_with_a_clear_error(backend):
    with pytest.raises(UnilabError, match="ctrl has shape"):
        backend.step(torch.zeros(N, backend.dims.nu + 1))
    with pytest.raises(UnilabError, match="reset got mask"):
        backend.reset(torch.ones(N + 1, dtype=torch.bool), standing()[0], torch.zeros(N, backend.dims.nv))


def _step_beside_mj_step(backend, m: mujoco.MjModel) -> list[mujoco.MjData]:
    """Reset ``backend`` standing, then step it and one plain ``mj_step`` loop per world through the
    same 5 control steps; returns the loop's worlds (their state as ``mj_step`` leaves it)."""
    ref = [mujoco.MjData(m) for _ in range(N)]
    qpos, _ = standing()
    reset_standing(backend)
    for i, d in enumerate(ref):
        d.qpos[:] = qpos[i].numpy()
        mujoco.mj_forward(m, d)
    for a in actions(5, m.nu, seed=2):
        backend.step(a)
        for i, d in enumerate(ref):
            d.ctrl[:] = a[i].numpy()
            for _ in range(DECIMATION):
                mujoco.mj_step(m, d)
    return ref


def test_cpu_backend_follows_mj_step_and_publishes_the_forward_state():
    """Trajectory bitwise equal to an ``mj_step`` loop; every field equals ``mj_forward`` of the state."""
    xml = g1_xml()
    m = mujoco.MjModel.from_xml_string(xml)
    with make_backend("mujoco", xml, N, DECIMATION, workers=1) as b:
        ref = _step_beside_mj_step(b, m)
        for i, d in enumerate(ref):
            mujoco.mj_forward(m, d)  # what the state should be derived from
            for f in ("qpos", "qvel", "ctrl", "xpos", "xquat", "cvel", "actuator_force", "sensordata"):
                expected = np.asarray(getattr(d, f), dtype=np.float32)
                np.testing.assert_array_equal(getattr(b.state, f)[i].numpy(), expected, err_msg=f)


def _acc_columns(m: mujoco.MjModel) -> np.ndarray:
    """Boolean mask over sensordata: the columns of acceleration-stage sensors."""
    cols = np.zeros(m.nsensordata, dtype=bool)
    for s in np.flatnonzero(m.sensor_needstage == int(mujoco.mjtStage.mjSTAGE_ACC)):
        cols[m.sensor_adr[s] : m.sensor_adr[s] + m.sensor_dim[s]] = True
    return cols


@pytest.mark.parametrize("workers", [1, 2])
def test_without_acc_sensors_the_trajectory_is_the_same_and_acc_sensors_are_mj_steps(workers: int):
    """``acc_sensors=False`` skips the end-of-step constraint solve: qpos, qvel, kinematics and the
    other sensors are still those of ``mj_forward`` of the returned state, bitwise, and the
    accelerometer columns hold what an ``mj_step`` loop leaves in ``sensordata``."""
    xml = g1_xml()
    m = mujoco.MjModel.from_xml_string(xml)
    acc = _acc_columns(m)
    assert acc.any()  # the G1 has an accelerometer
    with make_backend("mujoco", xml, N, DECIMATION, workers=workers, acc_sensors=False) as b:
        ref = _step_beside_mj_step(b, m)
        for i, d in enumerate(ref):
            stepped = np.asarray(d.sensordata, dtype=np.float32)
            np.testing.assert_array_equal(b.state.sensordata[i].numpy()[acc], stepped[acc])
            mujoco.mj_forward(m, d)
            current = np.asarray(d.sensordata, dtype=np.float32)
            assert not np.array_equal(current[acc], stepped[acc])  # the two readings do differ
            np.testing.assert_array_equal(b.state.sensordata[i].numpy()[~acc], current[~acc])
            for f in ("qpos", "qvel", "ctrl", "xpos", "xquat", "cvel", "actuator_force"):
                expected = np.asarray(getattr(d, f), dtype=np.float32)
                np.testing.assert_array_equal(getattr(b.state, f)[i].numpy(), expected, err_msg=f)


@pytest.mark.slow
def test_mjwarp_without_acc_sensors_changes_only_the_accelerometer():
    xml = g1_xml()
    acc = torch.from_numpy(_acc_columns(mujoco.MjModel.from_xml_string(xml)))
    with (
        make_backend("mjwarp", xml, N, DECIMATION, device="cpu") as full,
        make_backend("mjwarp", xml, N, DECIMATION, device="cpu", acc_sensors=False) as lean,
    ):
        reset_standing(full), reset_standing(lean)
        for a in actions(3, full.dims.nu, seed=4):
            full.step(a), lean.step(a)
        for f in ("qpos", "qvel", "xpos", "xquat", "cvel", "actuator_force"):
            torch.testing.assert_close(getattr(lean.state, f), getattr(full.state, f), atol=1e-6, rtol=0, msg=f)
        torch.testing.assert_close(lean.state.sensordata[:, ~acc], full.state.sensordata[:, ~acc], atol=1e-5, rtol=0)
        assert not torch.allclose(lean.state.sensordata[:, acc], full.state.sensordata[:, acc])


@pytest.mark.slow
def test_backends_agree_from_the_same_state_under_the_same_actions():
    """MJWarp (float32) and C MuJoCo (float64) from one standing state, 5 control steps (20 substeps)
    of noisy standing actions, a masked reset, then 3 more steps.

    Tolerances: on this model the backends differ by at most ~1e-6 in qpos, ~5e-5 in qvel, cvel
    and actuator force, ~2e-4 in sensor readings (accelerometer ~9.8 m/s^2) after 25 control
    steps -- float32 rounding (eps 1.2e-7) amplified by the stiff foot contacts through the
    constraint solver. The tolerances sit about 100x above that, so they hold across machines and
    solver nondeterminism, but stay far below what a real mismatch produces: a missing substep
    moves qpos by ~qvel*dt (>1e-3 here), a wrong ctrl or quaternion order by 1e-2 or more.
    """
    xml = g1_xml()
    tol = {
        "qpos": 1e-4,
        "qvel": 5e-3,
        "ctrl": 0.0,
        "xpos": 1e-4,
        "xquat": 1e-4,
        "cvel": 5e-3,
        "actuator_force": 1e-2,
        "sensordata": 2e-2,
    }

    def check(cpu: PhysicsState, warp: PhysicsState, when: str) -> None:
        for f, atol in tol.items():
            torch.testing.assert_close(getattr(warp, f), getattr(cpu, f), atol=atol, rtol=0, msg=f"{f} {when}")

    with (
        make_backend("mujoco", xml, N, DECIMATION, workers=2) as cpu,
        make_backend("mjwarp", xml, N, DECIMATION, device="cpu") as warp,
    ):
        check(reset_standing(cpu), reset_standing(warp), "after reset")
        acts = actions(8, cpu.dims.nu, seed=3)
        for k, a in enumerate(acts[:5]):
            check(cpu.step(a), warp.step(a), f"after step {k + 1}")
        mask = torch.tensor([False, True, False, True])
        qpos = standing()[0]
        qvel = torch.full((N, cpu.dims.nv), 0.05)
        check(cpu.reset(mask, qpos, qvel), warp.reset(mask, qpos, qvel), "after masked reset")
        for k, a in enumerate(acts[5:]):
            check(cpu.step(a), warp.step(a), f"after step {k + 6}")


@pytest.mark.slow
def test_mjwarp_capacities_are_the_requested_ones_and_an_overflow_survives_a_reset():
    """sim.njmax reaches MuJoCo Warp (default 300 rows per world, above what a falling G1 needs),
    and a world whose constraint rows overflowed is reported even after it was reset (MuJoCo Warp
    clears the flag on reset; the collector reads diagnostics only every 64 syncs)."""
    with make_backend("mjwarp", g1_xml(), N, DECIMATION, device="cpu") as roomy:
        reset_standing(roomy)
        roomy.step(standing()[1])
        d = roomy.diagnostics()
        assert (d["njmax"], d["overflow_worlds"]) == (300, 0) and d["nconmax"] >= 35
    with make_backend("mjwarp", g1_xml(), N, DECIMATION, device="cpu", njmax=8, nconmax=64) as tight:
        reset_standing(tight)
        tight.step(standing()[1])  # two feet on the floor: more than 8 rows
        tight.reset(torch.ones(N, dtype=torch.bool), standing()[0], torch.zeros(N, tight.dims.nv))
        d = tight.diagnostics()
        assert (d["njmax"], d["nconmax"]) == (8, 64)
        assert d["overflow_worlds"] == N and "NEFC" in d["overflow_kinds"], d


def test_closed_backend_refuses_to_step_and_close_is_idempotent():
    b = make_backend("mujoco", g1_xml(), 2, DECIMATION, workers=1)
    b.close()
    b.close()
    with pytest.raises(UnilabError, match="closed"):
        b.step(torch.zeros(2, b.dims.nu))


def test_mjwarp_refuses_a_physics_graph_on_the_cpu_device():
    with pytest.raises(UnilabError, match="physics_graph"):
        make_backend("mjwarp", g1_xml(), 2, DECIMATION, device="cpu", physics_graph=True)


def test_factory_refuses_options_the_backend_does_not_have():
    with pytest.raises(UnilabError, match="physics graph"):
        make_backend("mujoco", g1_xml(), 2, DECIMATION, physics_graph=True)
    with pytest.raises(UnilabError, match="runs on the CPU"):
        make_backend("mujoco", g1_xml(), 2, DECIMATION, device="cuda:0")
    with pytest.raises(UnilabError, match="workers"):
        make_backend("mjwarp", g1_xml(), 2, DECIMATION, workers=2)
    with pytest.raises(UnilabError, match="unknown physics backend"):
        make_backend("bullet", g1_xml(), 2, DECIMATION)  # type: ignore[arg-type]


def test_unusable_models_are_refused_with_a_clear_error(tmp_path):
    with pytest.raises(UnilabError, match="cannot compile"):
        make_backend("mujoco", "<mujoco><worldbody><geom type='nope'/></worldbody></mujoco>", 2, 1)
    with pytest.raises(UnilabError, match="does not exist"):
        make_backend("mujoco", str(tmp_path / "missing.xml"), 2, 1)
    rk4 = "<mujoco><option integrator='RK4'/><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>"
    with pytest.raises(UnilabError, match="RK4"):
        make_backend("mujoco", rk4, 2, 1)


@pytest.mark.slow
def test_mjwarp_graph_replay_matches_eager_launches():
    """The capture/replay plumbing (step graph, reset = reset graph + torch writes + forward graph),
    exercised on Warp's CPU device, whose graphs replay recorded launches (the public flag stays
    refused there; CUDA's stream handling is covered by tests/test_sim_cuda.py on a GPU)."""
    xml = g1_xml()
    with (
        make_backend("mjwarp", xml, N, DECIMATION, device="cpu") as eager,
        make_backend("mjwarp", xml, N, DECIMATION, device="cpu") as graph,
    ):
        graph._capture_graphs()  # what physics_graph=True does on CUDA
        assert graph.diagnostics()["graph_enabled"] is True
        reset_standing(eager)
        reset_standing(graph)
        for k, a in enumerate(actions(4, eager.dims.nu, seed=4)):
            eager.step(a)
            graph.step(a)
            if k == 1:
                mask = torch.tensor([True, False, False, True])
                eager.reset(mask, standing()[0], torch.zeros(N, eager.dims.nv))
                graph.reset(mask, standing()[0], torch.zeros(N, eager.dims.nv))
            for f in FIELDS:
                assert torch.equal(getattr(graph.state, f), getattr(eager.state, f)), f"{f} at step {k}"
        assert graph.diagnostics()["graph_replays"] == 4 + 2 * 2  # 4 steps, 2 resets of 2 graphs
        # Real MuJoCo Warp diagnostics read as warnings: a standing G1 overflows no buffer.
        from unilab.sim.contract import physics_warnings

        diag = graph.diagnostics()
        assert diag["overflow_worlds"] == 0 and physics_warnings(diag) == {}


def test_warps_no_driver_line_is_dropped_and_other_native_output_kept(capfd: pytest.CaptureFixture) -> None:
    """On Warp's CPU device the start-up's "no CUDA driver" line is noise; anything else native
    code writes to stderr meanwhile still reaches the user, in order."""
    import os

    from unilab.sim.mjwarp_backend import _NO_DRIVER_LINE, _native_line_dropped

    with _native_line_dropped(_NO_DRIVER_LINE, when=True):
        os.write(2, b"first\n")
        os.write(2, f"Warp CUDA warning: {_NO_DRIVER_LINE}. GPU execution will not be available.\n".encode())
        os.write(2, b"last\n")
    assert capfd.readouterr().err == "first\nlast\n"
    with _native_line_dropped(_NO_DRIVER_LINE, when=False):  # a CUDA device: nothing is dropped
        os.write(2, f"{_NO_DRIVER_LINE}\n".encode())
    assert _NO_DRIVER_LINE in capfd.readouterr().err
