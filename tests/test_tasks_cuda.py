"""Both tasks on MuJoCo Warp on a GPU: the collector step makes no host synchronisation."""

from __future__ import annotations

import pytest
import torch

from unilab.collect.build import build_collector
from unilab.spec.models import SimSpec, TaskSpec

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (tools/gpu_check.sh)"),
]
N = 256


@pytest.mark.parametrize("name", ["g1_walk", "g1_motion_tracking"])
@pytest.mark.parametrize("physics_graph", [False, True])
def test_collector_step_never_syncs_the_host(name: str, physics_graph: bool) -> None:
    task = TaskSpec(name=name, num_envs=N, motion="builtin:g1_squat", episode_length_s=0.5, push_interval_s=0.1)
    with build_collector(
        task, SimSpec(backend="mjwarp"), device="cuda:0", physics_graph=physics_graph, finite_check_interval=10_000
    ) as c:
        assert c.device.type == "cuda"
        c.reset_all()
        actions = torch.rand(8, N, 29, device=c.device) - 0.5
        for k in range(3):  # warm-up (allocator, lazy kernel loads)
            c.step(actions[k])
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for k in range(40):  # episodes of 25 steps: resets and pushes happen inside this loop
                obs, reward, _, _ = c.step(actions[k % 8])
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert obs.device.type == "cuda" and torch.isfinite(obs).all() and torch.isfinite(reward).all()
        assert c.episode_stats()["episodes"] >= N
        assert c.check_finite_now().ok
