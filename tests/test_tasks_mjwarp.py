"""Both tasks on MuJoCo Warp (Warp's CPU device here; CUDA via tools/gpu_check.sh), against CPU MuJoCo."""

from __future__ import annotations

import pytest
import torch

from unilab.collect.build import build_collector
from unilab.spec.models import SimSpec, task_spec

N = 4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["g1_walk", "g1_motion_tracking"])
def test_task_on_mjwarp_matches_cpu_mujoco_at_reset(name: str) -> None:
    task = task_spec(
        name=name, num_envs=N, push_interval_s=0.1, **({"motion": "builtin:g1_squat"} if name != "g1_walk" else {})
    )
    with (
        build_collector(task, SimSpec(backend="mjwarp"), device="cpu", seed=7) as warp,
        build_collector(task, SimSpec(backend="mujoco", workers=1), seed=7) as cpu,
    ):
        assert type(warp.backend).__name__ == "MjwarpBackend"
        # Same seed, same reset draws: the post-reset observations agree across engines.
        torch.testing.assert_close(warp.reset_all(), cpu.reset_all(), atol=1e-4, rtol=1e-4)
        gen = torch.Generator().manual_seed(0)
        for _ in range(12):  # pushes every 5 steps: the interval event goes through MJWarp's reset
            obs, reward, terminated, truncated = warp.step(torch.rand(N, 29, generator=gen) - 0.5)
            assert obs.shape == (N, warp.obs_dim) and torch.isfinite(obs).all() and torch.isfinite(reward).all()
            assert not (terminated & truncated).any()
        assert warp.check_finite_now().ok
