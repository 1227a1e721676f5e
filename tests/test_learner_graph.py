"""The learner graph runner (`unilab.learn.graph`): its eager twin on the CPU must be bitwise the
plain eager update, keep the host counters right although a replay runs no Python, recapture when
what it captured no longer holds, and fail on every rank together. The CUDA capture itself runs in
tests/test_learner_graph_cuda.py on a GPU."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.conftest import random_batch
from unilab.algos.flashsac.learner import FlashSacLearner
from unilab.algos.flashsac.spec import FlashSacSpec
from unilab.algos.sac.learner import SacLearner
from unilab.algos.sac.spec import SacSpec
from unilab.errors import UnilabError
from unilab.learn.graph import LearnerGraph
from unilab.learn.replay import Batch

OBS, ACT, B = 7, 3, 16


pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(seed: int) -> Batch:
    return random_batch(seed, B, OBS, ACT)


def _sac(dtype: torch.dtype = torch.float32) -> SacLearner:
    cfg = SacSpec(name="sac", hidden_dims=(16, 16), batch_size=B, actor_update_every=2)
    return SacLearner(OBS, ACT, cfg, seed=5, compute_dtype=dtype)


def _flash(dtype: torch.dtype = torch.float32) -> FlashSacLearner:
    cfg = FlashSacSpec(name="flashsac", hidden_dims=(16,), batch_size=B, v_min=-5.0, v_max=5.0)
    return FlashSacLearner(OBS, ACT, cfg, seed=5, compute_dtype=dtype)


MAKERS = {
    "sac": _sac,
    "flashsac": _flash,
    "sac_bf16": lambda: _sac(torch.bfloat16),
    "flashsac_bf16": lambda: _flash(torch.bfloat16),
}


def _params(learner: object) -> list[torch.Tensor]:
    return [p.detach().clone() for ps in learner.optim_groups().values() for p in ps]  # type: ignore[attr-defined]


class SyncCounter:
    """Stands in for the data-parallel sync: a host counter the update body advances."""

    def __init__(self) -> None:
        self.syncs = 0


def _twin(learner: object, warmup: int = 2, counter: SyncCounter | None = None) -> LearnerGraph:
    def body(b: Batch) -> dict[str, torch.Tensor]:
        if counter is not None:
            counter.syncs += 1
        return learner.update(b)  # type: ignore[attr-defined]

    extra = [(counter, "syncs")] if counter is not None else []
    return LearnerGraph(learner, body, batch_size=B, mode="eager_twin", warmup=warmup, host_counters=extra)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_twin_is_bitwise_the_eager_update(name: str) -> None:
    eager, graphed = MAKERS[name](), MAKERS[name]()
    counter = SyncCounter()
    runner = _twin(graphed, warmup=2, counter=counter)
    for i in range(9):
        m_e = eager.update(_batch(i))
        m_g = runner(_batch(i))
        assert m_e.keys() == m_g.keys(), i
        for k in m_e:
            assert torch.equal(m_e[k], m_g[k]), (i, k)
    for a, b in zip(_params(eager), _params(graphed), strict=True):
        assert torch.equal(a, b)
    assert graphed.num_critic_updates == eager.num_critic_updates
    assert graphed.num_actor_updates == eager.num_actor_updates
    assert counter.syncs == 9  # one per update, although replays run no Python of the body
    s = runner.stats
    # Two cycle kinds (with and without the actor), each warmed twice, then captured once.
    assert (s.eager_updates, s.captures, s.replays, s.state) == (4, 2, 5, "captured")
    assert sorted(c.split(":")[0] for c in s.capture_ids) == ["critic", "critic+actor"]


def test_replays_read_the_static_buffers_not_the_first_batch() -> None:
    learner = _sac()
    runner = _twin(learner, warmup=1)
    for i in range(4):  # both kinds captured
        runner(_batch(i))
    a = runner(_batch(100))["critic_loss"]
    b = runner(_batch(100))["critic_loss"]
    c = runner(_batch(200))["critic_loss"]
    assert not torch.equal(a, c) and not torch.equal(b, c)
    assert torch.equal(runner.static.obs, _batch(200).obs)


def test_loading_a_checkpoint_invalidates_and_recaptures() -> None:
    learner, twin_ref = _sac(), _sac()
    runner = _twin(learner, warmup=1)
    for i in range(4):
        runner(_batch(i))
        twin_ref.update(_batch(i))
    state = copy.deepcopy(learner.state_dict())
    runner.load_state_dict(state)
    twin_ref.load_state_dict(state)
    assert runner.stats.state == "invalidated" and runner.stats.invalidations == 1
    assert runner.stats.last_invalidation == "checkpoint loaded"
    for i in range(4, 8):
        m = runner(_batch(i))
        r = twin_ref.update(_batch(i))
        assert torch.equal(m["critic_loss"], r["critic_loss"])
    assert runner.stats.captures == 4 and runner.stats.state == "captured"


def test_replaced_body_or_moved_parameters_force_a_recapture() -> None:
    learner = _sac()
    runner = _twin(learner, warmup=1)
    for i in range(4):
        runner(_batch(i))
    runner.set_body(lambda b: learner.update(b))
    assert runner.stats.last_invalidation == "update body replaced"
    for i in range(4):
        runner(_batch(i))
    captures = runner.stats.captures
    p = next(learner.critic.parameters())
    p.data = p.data.clone()  # same values, new storage: a graph would write to the old address
    runner(_batch(9))
    assert runner.stats.last_invalidation == "parameter or buffer storage moved"
    runner(_batch(10))
    runner(_batch(11))
    assert runner.stats.captures > captures


def test_a_capture_failure_raises_with_the_fix_and_leaves_state_untouched() -> None:
    learner = _sac()
    calls = {"n": 0}

    def body(b: Batch) -> dict[str, torch.Tensor]:
        calls["n"] += 1
        if calls["n"] == 3:  # one warm-up of each cycle kind, then the first capture
            raise RuntimeError("operation not permitted when stream is capturing")
        return learner.update(b)

    runner = LearnerGraph(learner, body, batch_size=B, mode="eager_twin", warmup=1)
    runner(_batch(0))
    runner(_batch(1))
    before = _params(learner)
    with pytest.raises(UnilabError) as e:
        runner(_batch(2))
    assert "operation not permitted" in str(e.value) and "learner_graph" in e.value.fix
    assert runner.stats.state == "failed"
    assert all(torch.equal(a, b) for a, b in zip(before, _params(learner), strict=True))


def test_every_rank_fails_when_another_rank_failed_to_capture() -> None:
    learner = _sac()
    seen: list[bool] = []

    def agree(local_failed: bool) -> bool:  # what DpContext.any_rank returns when rank 1 failed
        seen.append(local_failed)
        return True

    runner = LearnerGraph(learner, learner.update, batch_size=B, mode="eager_twin", warmup=1, agree=agree)
    runner(_batch(0))
    runner(_batch(1))
    with pytest.raises(UnilabError, match="another rank"):
        runner(_batch(2))
    assert seen == [False]


def test_a_cuda_graph_of_a_cpu_learner_is_refused() -> None:
    learner = _sac()
    with pytest.raises(UnilabError, match="CUDA learner"):
        LearnerGraph(learner, learner.update, batch_size=B, mode="cuda_graph")
    with pytest.raises(UnilabError, match="warm-up"):
        LearnerGraph(learner, learner.update, batch_size=B, mode="eager_twin", warmup=0)
