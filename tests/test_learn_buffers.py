"""Normalizer, replay buffer, C51 projection and the skip-able Adam: the learners' building blocks."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from unilab.errors import UnilabError
from unilab.learn import categorical
from unilab.learn.normalizer import ObsNormalizer
from unilab.learn.optim import MaskedAdam, polyak_
from unilab.learn.replay import ReplayBuffer
from unilab.learn.reward_scale import RewardScaler

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------------- normalizer


def test_normalizer_matches_numpy_on_streamed_batches() -> None:
    rng = np.random.default_rng(0)
    # Large offset and mixed scales: where a naive float32 sum-of-squares loses precision.
    chunks = [rng.normal(1000.0, [0.01, 1.0, 50.0], size=(int(rng.integers(1, 300)), 3)) for _ in range(200)]
    norm = ObsNormalizer(3)
    for c in chunks:
        norm.update(torch.as_tensor(c, dtype=torch.float32))
    allx = np.concatenate([c.astype(np.float32).astype(np.float64) for c in chunks])
    np.testing.assert_allclose(norm.mean.numpy(), allx.mean(0), rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(norm.var.numpy(), allx.var(0), rtol=1e-9)
    assert float(norm.count) == len(allx)


def test_normalizer_normalizes_and_clips() -> None:
    norm = ObsNormalizer(2)
    x = torch.tensor([[0.0, 10.0], [2.0, 30.0]])
    norm.update(x)
    y = norm.normalize(x)
    torch.testing.assert_close(y, torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), atol=1e-4, rtol=0)
    far = norm.normalize(torch.tensor([[1e6, -1e6]]))
    assert far.tolist() == [[10.0, -10.0]]
    assert y.dtype == torch.float32


def test_a_normalizer_on_another_device_takes_observations_from_cpu_memory() -> None:
    """A GPU learner normalizes observations the collector left in CPU shared memory. The meta
    device stands in for the GPU here: mixing devices in one op fails on it the same way."""
    norm = ObsNormalizer(3, device="meta")
    obs = torch.ones(2, 3)  # as in the collector's shared buffer
    norm.update(obs)
    y = norm.normalize(obs)
    assert y.device.type == "meta" and y.shape == (2, 3) and y.dtype == torch.float32


def test_normalizer_state_dict_round_trip_and_shape_check() -> None:
    a = ObsNormalizer(4)
    a.update(torch.randn(100, 4) * 3 + 1)
    b = ObsNormalizer(4)
    b.load_state_dict(a.state_dict())
    x = torch.randn(7, 4)
    assert torch.equal(a.normalize(x), b.normalize(x))
    with pytest.raises(UnilabError, match=re.escape("checkpoint has dimension (4,), this run uses (5,)")):
        ObsNormalizer(5).load_state_dict(a.state_dict())
    with pytest.raises(UnilabError, match=re.escape("expects last dimension 4, got shape (3, 5)")):
        a.update(torch.zeros(3, 5))


# ---------------------------------------------------------------------------- replay


def _add(rb: ReplayBuffer, t: int, rewards: list[float], term: list[bool], trunc: list[bool]) -> None:
    """One env step for every env; obs encodes (env, t) so stored rows can be identified."""
    e = rb.num_envs
    obs = torch.tensor([[100.0 * i + t] for i in range(e)])
    nxt = obs + 0.5  # "next obs of step t" is recognisable as t + 0.5
    act = torch.full((e, 1), float(t))
    rb.add_batch(obs, act, torch.tensor(rewards), nxt, torch.tensor(term), torch.tensor(trunc))


def _rows(rb: ReplayBuffer) -> dict[float, tuple[float, float, float]]:
    n = len(rb)
    return {
        float(o): (float(r), float(no), float(d))
        for o, r, no, d in zip(rb._obs[:n, 0], rb._reward[:n], rb._next_obs[:n, 0], rb._discount[:n], strict=True)
    }


def test_replay_n_step_returns_match_hand_computed_sequence() -> None:
    g = 0.9
    rb = ReplayBuffer(100, 1, 1, num_envs=2, n_step=3, gamma=g)
    # env 0: rewards 1,2,3,4,5,6; terminates at t=2 (new episode from t=3), never truncates.
    # env 1: rewards 10,20,30,40,50,60; truncated (time limit) at t=3.
    r0, r1 = [1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60]
    for t in range(6):
        _add(rb, t, [r0[t], r1[t]], [t == 2, False], [False, t == 3])
    assert len(rb) == 2 * 4 and rb.pending == 2  # steps 4 and 5 wait for their windows
    rows = _rows(rb)
    # env 0, t=0: 1 + .9*2 + .81*3, ends in termination at t=2 -> discount 0, next obs of t=2.
    assert rows[0.0] == pytest.approx((1 + g * 2 + g * g * 3, 2.5, 0.0))
    # t=1: 2 + .9*3 (terminated at t=2), nothing from the next episode.
    assert rows[1.0] == pytest.approx((2 + g * 3, 2.5, 0.0))
    assert rows[2.0] == pytest.approx((3, 2.5, 0.0))
    # t=3: a new episode, full window 3,4,5 -> bootstrap from next obs of t=5 with g^3.
    assert rows[3.0] == pytest.approx((4 + g * 5 + g * g * 6, 5.5, g**3))
    # env 1, t=0: full window, no episode end.
    assert rows[100.0] == pytest.approx((10 + g * 20 + g * g * 30, 102.5, g**3))
    # t=1: window 1,2,3, truncated at t=3 (the window's last step): bootstraps from t=3's next obs.
    assert rows[101.0] == pytest.approx((20 + g * 30 + g * g * 40, 103.5, g**3))
    # t=2: truncated after 2 steps -> bootstrap with g^2 from the final observation of the episode.
    assert rows[102.0] == pytest.approx((30 + g * 40, 103.5, g**2))
    assert rows[103.0] == pytest.approx((40, 103.5, g))


def test_replay_drops_steps_not_kept_and_ends_windows_before_them() -> None:
    g = 0.9
    rb = ReplayBuffer(100, 1, 1, num_envs=2, n_step=3, gamma=g)
    nan = float("nan")
    r1 = [10.0, 20.0, nan, 40.0, 50.0, 60.0]  # env 1's world goes non-finite at t=2
    for t in range(6):
        e = 2
        obs = torch.tensor([[100.0 * i + t] for i in range(e)])
        nxt = obs + 0.5
        if t == 2:
            nxt[1] = nan
        keep = torch.tensor([True, t != 2])
        rb.add_batch(obs, torch.zeros(e, 1), torch.tensor([1.0, r1[t]]), nxt, torch.zeros(e), torch.zeros(e), keep)
    assert len(rb) == 4 + 3 and rb.total_added == 7
    rows = _rows(rb)
    assert 102.0 not in rows
    assert rows[100.0] == pytest.approx((10 + g * 20, 101.5, g**2))  # window ends before the dropped step
    assert rows[101.0] == pytest.approx((20, 101.5, g))
    assert rows[103.0] == pytest.approx((40 + g * 50 + g * g * 60, 105.5, g**3))
    assert rows[0.0] == pytest.approx((1 + g + g * g, 2.5, g**3))
    n = len(rb)
    assert torch.isfinite(rb._next_obs[:n]).all() and torch.isfinite(rb._reward[:n]).all()


def test_replay_one_step_ring_wraps_and_counts() -> None:
    rb = ReplayBuffer(5, 1, 1, num_envs=2, n_step=1, gamma=0.5)
    for t in range(4):
        _add(rb, t, [1.0, 2.0], [t == 1, False], [False, False])
    assert len(rb) == 5 and rb.total_added == 8
    rows = _rows(rb)
    # 8 writes into 5 slots: the oldest three (t=0 both envs, t=1 env 0) were overwritten.
    assert sorted(rows) == [2.0, 3.0, 101.0, 102.0, 103.0]
    assert rows[101.0] == (2.0, 101.5, 0.5)
    batch = rb.sample(64, torch.Generator().manual_seed(0))
    assert batch.obs.shape == (64, 1) and batch.discount.shape == (64,)
    assert set(batch.obs[:, 0].tolist()) <= set(rows)


def test_replay_refuses_wrong_shapes_and_empty_sample() -> None:
    rb = ReplayBuffer(10, 3, 2, num_envs=4)
    with pytest.raises(UnilabError, match="replay buffer is empty"):
        rb.sample(8)
    with pytest.raises(UnilabError, match=re.escape("expects obs/next_obs (4, 3) and action (4, 2)")):
        rb.add_batch(
            torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4), torch.zeros(4, 3), torch.zeros(4), torch.zeros(4)
        )
    with pytest.raises(UnilabError, match="capacity 3 is smaller than one env step of 4 envs"):
        ReplayBuffer(3, 3, 2, num_envs=4)


# ---------------------------------------------------------------------------- categorical projection


def test_c51_projection_hand_computed_case() -> None:
    # Support -1, 0, 1. Mass 0.5 at 0.25 -> 0.375 to atom 0, 0.125 to atom 1;
    # mass 0.3 at -3 (clipped to -1) -> atom -1; mass 0.2 exactly on atom 1.
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    values = torch.tensor([[0.25, -3.0, 1.0]])
    out = categorical.project(probs, values, -1.0, 1.0)
    torch.testing.assert_close(out, torch.tensor([[0.3, 0.375, 0.325]]))


def test_c51_projection_conserves_mass_and_identity() -> None:
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(64, 101, generator=g), -1)
    atoms = categorical.support(-5.0, 5.0, 101)
    values = torch.randn(64, 1, generator=g) * 3 + 0.9 * atoms * torch.rand(64, 1, generator=g) * 2
    out = categorical.project(probs, values, -5.0, 5.0)
    torch.testing.assert_close(out.sum(-1), torch.ones(64))
    assert (out >= 0).all()
    # Values already on the atoms: the projection is the identity.
    torch.testing.assert_close(categorical.project(probs, atoms.expand(64, -1), -5.0, 5.0), probs)
    # The mean is preserved where nothing is clipped.
    inner = values.clamp(-5, 5) == values
    keep = inner.all(-1)
    torch.testing.assert_close((out * atoms).sum(-1)[keep], (probs * values).sum(-1)[keep], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------- optimizer


def test_masked_adam_matches_torch_adam_and_skips_exactly() -> None:
    torch.manual_seed(0)
    p_ref = torch.randn(5, 3, requires_grad=True)
    p = p_ref.detach().clone().requires_grad_(True)
    ref = torch.optim.Adam([p_ref], lr=1e-2)
    opt = MaskedAdam([p], lr=1e-2)
    yes, no = torch.tensor(True), torch.tensor(False)
    for i in range(5):
        grad = torch.randn(5, 3)
        p_ref.grad = grad.clone()
        ref.step()
        p.grad.copy_(grad)
        opt.step(yes)
        if i == 2:  # a non-finite gradient, skipped: nothing may change
            before = (p.detach().clone(), [t.clone() for t in opt.exp_avg], opt.step_count.clone())
            p.grad.fill_(float("nan"))
            opt.step(no)
            assert torch.equal(p.detach(), before[0]) and torch.equal(opt.exp_avg[0], before[1][0])
            assert torch.equal(opt.step_count, before[2])
    torch.testing.assert_close(p.detach(), p_ref.detach(), rtol=1e-6, atol=1e-7)


def test_polyak_moves_target_by_tau_and_respects_flag() -> None:
    t, o = [torch.zeros(3)], [torch.ones(3)]
    polyak_(t, o, 0.1, torch.tensor(True))
    torch.testing.assert_close(t[0], torch.full((3,), 0.1))
    polyak_(t, o, 0.1, torch.tensor(False))
    torch.testing.assert_close(t[0], torch.full((3,), 0.1))


# ---------------------------------------------------------------------------- reward scale


def test_reward_scaler_bounds_returns_to_g_max() -> None:
    s = RewardScaler(gamma=0.9, g_max=5.0)
    assert float(s.scale()) == pytest.approx(1.0, rel=1e-6)
    for _ in range(50):  # constant reward 10: returns approach 100 with little variance
        s.observe(torch.full((8,), 10.0), torch.zeros(8, dtype=torch.bool), torch.zeros(8, dtype=torch.bool))
    assert float(s.g_abs_max) == pytest.approx(100 * (1 - 0.9**50), rel=1e-5)
    # max |G| * scale is at most g_max.
    assert float(s.g_abs_max * s.scale()) <= 5.0 + 1e-5
    s.observe(torch.full((8,), 1.0), torch.ones(8, dtype=torch.bool), torch.zeros(8, dtype=torch.bool))
    assert torch.equal(s.returns, torch.zeros(8))  # reset after episode end
    bad = torch.ones(8)
    bad[3] = float("nan")
    s.observe(bad, torch.zeros(8, dtype=torch.bool), torch.zeros(8, dtype=torch.bool))
    assert torch.isfinite(s.scale()) and float(s.returns[3]) == 0.0  # a NaN reward does not poison the scale


def test_c51_projection_of_non_finite_values_stays_non_finite_without_bad_indices() -> None:
    probs = torch.full((2, 5), 0.2)
    values = torch.tensor([[0.0, float("nan"), 1.0, 2.0, 3.0], [float("inf"), 0.0, 0.0, 0.0, 0.0]])
    out = categorical.project(probs, values, -2.0, 2.0)
    assert not torch.isfinite(out[0]).all() and not torch.isfinite(out[1]).all()


def test_a_replay_buffer_too_large_to_allocate_names_the_key() -> None:
    with pytest.raises(UnilabError, match=r"algo\.buffer_size = 10,000,000,000,000 transitions") as info:
        ReplayBuffer(10**13, 96, 29, num_envs=16, n_step=1, gamma=0.99)
    assert "--set algo.buffer_size=" in info.value.fix
