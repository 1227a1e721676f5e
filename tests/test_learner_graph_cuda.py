"""The learner's whole update cycle captured as CUDA graphs against the eager update, at a fixed
seed (needs an NVIDIA GPU; run by tools/gpu_check.sh). The logic is tested on the CPU through the
eager twin in tests/test_learner_graph.py."""

from __future__ import annotations

import pytest
import torch

from unilab.algos.common import make_learner
from unilab.algos.flashsac.spec import FlashSacSpec
from unilab.algos.sac.spec import SacSpec
from unilab.learn.graph import LearnerGraph
from unilab.learn.replay import Batch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch"),
]

OBS, ACT, B = 45, 12, 256
SPECS = {
    "sac": SacSpec(name="sac", hidden_dims=(256, 256), batch_size=B, actor_update_every=2),
    "sac_c51": SacSpec(name="sac", hidden_dims=(256, 256), batch_size=B, critic="c51", layer_norm=True),
    "flashsac": FlashSacSpec(name="flashsac", hidden_dims=(128,), batch_size=B),
}


def _batch(seed: int, dev: torch.device) -> Batch:
    g = torch.Generator().manual_seed(seed)
    b = Batch(
        obs=torch.randn(B, OBS, generator=g),
        action=torch.rand(B, ACT, generator=g) * 2 - 1,
        reward=torch.randn(B, generator=g),
        next_obs=torch.randn(B, OBS, generator=g),
        discount=torch.where(torch.rand(B, generator=g) < 0.1, 0.0, 0.99),
    )
    return Batch(*(t.to(dev) for t in (b.obs, b.action, b.reward, b.next_obs, b.discount)))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_graph_replays_match_the_eager_updates(name: str) -> None:
    dev = torch.device("cuda:0")
    eager = make_learner(SPECS[name], OBS, ACT, dev, seed=1)
    graphed = make_learner(SPECS[name], OBS, ACT, dev, seed=1)
    runner = LearnerGraph(graphed, graphed.update, batch_size=B, mode="cuda_graph", warmup=3)
    for i in range(20):
        m_e, m_g = eager.update(_batch(i, dev)), runner(_batch(i, dev))
        for k in ("critic_loss", "q_mean"):
            torch.testing.assert_close(m_g[k], m_e[k], rtol=1e-4, atol=1e-5, msg=f"update {i} {k}")
    for pe, pg in zip(eager.optim_groups()["critic"], graphed.optim_groups()["critic"], strict=True):
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5)
    # One graph per cycle kind: "critic+actor" alone when the actor updates every time.
    kinds = 1 if SPECS[name].actor_update_every == 1 else 2
    assert runner.stats.captures == kinds and runner.stats.replays == 20 - runner.stats.eager_updates
    assert graphed.num_critic_updates == eager.num_critic_updates == 20
    # The update generator advanced on replays exactly as in the eager run.
    assert torch.equal(graphed.update_gen.get_state(), eager.update_gen.get_state())
