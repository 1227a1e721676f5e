"""MuJoCo Warp on CUDA with and without the physics graph (needs an NVIDIA GPU; run by the GPU check)."""

from __future__ import annotations

import pytest
import torch

from tests.sim_models import pose_state
from unilab.robot import g1
from unilab.robot.model import build_model_xml
from unilab.sim.factory import make_backend

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch"),
]

N = 64
DECIMATION = 4
FIELDS = ("qpos", "qvel", "ctrl", "xpos", "xquat", "cvel", "actuator_force", "sensordata")
# As in tests/test_sim_backends.py (cross-backend agreement), where the choice is explained.
TOL = {
    "qpos": 1e-4,
    "qvel": 5e-3,
    "ctrl": 0.0,
    "xpos": 1e-4,
    "xquat": 1e-4,
    "cvel": 5e-3,
    "actuator_force": 1e-2,
    "sensordata": 2e-2,
}


def _run(physics_graph: bool) -> tuple[list[dict[str, torch.Tensor]], dict]:
    xml = build_model_xml()
    qpos1, ctrl1 = pose_state(xml, g1.DEFAULT_POSE, g1.DEFAULT_BASE_HEIGHT)
    dev = torch.device("cuda:0")
    qpos = torch.tensor(qpos1, device=dev).repeat(N, 1)
    hold = torch.tensor(ctrl1, device=dev).repeat(N, 1)
    g = torch.Generator(device=dev).manual_seed(0)
    out = []
    with make_backend("mjwarp", xml, N, DECIMATION, device="cuda:0", physics_graph=physics_graph) as b:
        assert b.device == dev and all(getattr(b.state, f).device == dev for f in FIELDS)
        b.reset(torch.ones(N, dtype=torch.bool, device=dev), qpos, torch.zeros(N, b.dims.nv, device=dev))
        for k in range(6):
            s = b.step(hold + 0.3 * (torch.rand(hold.shape, generator=g, device=dev) - 0.5))
            if k == 2:
                before = {f: getattr(s, f).clone() for f in FIELDS}
                mask = torch.arange(N, device=dev) % 3 == 0
                b.reset(mask, qpos, torch.zeros(N, b.dims.nv, device=dev))
                for f in FIELDS:  # unmasked worlds untouched, masked ones at the requested state
                    assert torch.equal(getattr(s, f)[~mask], before[f][~mask]), f
                assert torch.equal(s.qpos[mask], qpos[mask])
            out.append({f: getattr(s, f).clone() for f in FIELDS})
        torch.cuda.synchronize()
        return out, b.diagnostics()


def test_physics_graph_replays_the_same_physics_as_eager_launches():
    eager, d_eager = _run(physics_graph=False)
    graph, d_graph = _run(physics_graph=True)
    assert d_eager["graph_enabled"] is False and d_eager["graph_replays"] == 0
    assert d_graph["graph_requested"] is True and d_graph["graph_enabled"] is True
    assert d_graph["graph_replays"] == 6 + 2 * 2  # 6 steps; 2 resets of 2 graphs each
    for k, (a, b) in enumerate(zip(eager, graph, strict=True)):
        for f in FIELDS:
            # GPU contact ordering is not deterministic: compare at the cross-backend tolerances
            torch.testing.assert_close(b[f], a[f], atol=TOL[f], rtol=0, msg=f"{f} at step {k}")
