"""Both tasks on MuJoCo Warp on a GPU: the collector step makes no host synchronisation."""

from __future__ import annotations

import pytest
import torch

from unilab.collect.build import build_collector
from unilab.spec.models import SimSpec, task_spec

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (tools/gpu_check.sh)"),
]
N = 256


def _motion(task: str) -> dict[str, str]:
    return {"motion": "builtin:g1_squat"} if task == "g1_motion_tracking" else {}


@pytest.mark.parametrize("name", ["g1_walk", "g1_motion_tracking"])
@pytest.mark.parametrize("physics_graph", [False, True])
def test_collector_step_never_syncs_the_host(name: str, physics_graph: bool) -> None:
    # Pushes and domain randomization too: their device-side writes must not sync either.
    task = task_spec(
        name=name,
        num_envs=N,
        **_motion(name),
        episode_length_s=0.5,
        push_interval_s=0.1,
        domain_randomization=True,
    )
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


@pytest.mark.parametrize("name", ["g1_walk", "g1_motion_tracking"])
def test_update_state_graph_matches_the_eager_collector(name: str) -> None:
    """The experimental update-state graph against the eager collector, same seed and actions."""
    task = task_spec(name=name, num_envs=N, **_motion(name), episode_length_s=0.5)
    kw = {"device": "cuda:0", "physics_graph": True, "finite_check_interval": 16, "seed": 5}
    with (
        build_collector(task, SimSpec(backend="mjwarp"), **kw) as eager,  # type: ignore[arg-type]
        build_collector(task, SimSpec(backend="mjwarp"), update_graph="cuda_graph", **kw) as graphed,  # type: ignore[arg-type]
    ):
        eager.reset_all()
        graphed.reset_all()
        actions = torch.rand(8, N, 29, device="cuda:0", generator=torch.Generator("cuda:0").manual_seed(1)) - 0.5
        for k in range(60):  # resets inside the window (25-step episodes)
            a = eager.step(actions[k % 8])
            b = graphed.step(actions[k % 8])
            torch.testing.assert_close(b[0], a[0], rtol=1e-4, atol=1e-4, msg=f"obs at step {k}")
            torch.testing.assert_close(b[1], a[1], rtol=1e-4, atol=1e-4, msg=f"reward at step {k}")
            assert torch.equal(b[2], a[2]) and torch.equal(b[3], a[3]), k
        s = graphed.update_graph.stats  # type: ignore[union-attr]
        assert s.state == "captured" and s.replays == 60 - s.eager_updates
        assert s.allocated_bytes.get("replay_growth", 0) == 0
        assert graphed.task._step_count == eager.task._step_count == 60
