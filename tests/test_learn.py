"""SAC and FlashSAC learners: shapes, finiteness, targets, skipped steps and bitwise checkpoint round trips."""

from __future__ import annotations

import io
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.conftest import random_batch
from unilab.algos.flashsac.learner import BatchNorm, FlashSacLearner, RMSNorm, UnitLinear
from unilab.algos.flashsac.spec import FlashSacSpec
from unilab.algos.sac.learner import SacLearner
from unilab.algos.sac.spec import SacSpec
from unilab.errors import UnilabError
from unilab.learn.replay import Batch

pytestmark = pytest.mark.usefixtures("one_thread")


OBS, ACT, B = 7, 3, 32


def _batch(seed: int = 0, b: int = B) -> Batch:
    return random_batch(seed, b, OBS, ACT)


def _sac(dtype: torch.dtype = torch.float32, **kw: object) -> SacLearner:
    widths = {} if "actor_hidden_dims" in kw else {"hidden_dims": (32, 32)}
    cfg = SacSpec(**{"name": "sac", **widths, "batch_size": B, **kw})  # type: ignore[arg-type]
    return SacLearner(OBS, ACT, cfg, seed=3, compute_dtype=dtype)


def _flash(dtype: torch.dtype = torch.float32, **kw: object) -> FlashSacLearner:
    spec = {"name": "flashsac", "hidden_dims": (16,), "batch_size": B, "v_min": -5.0, "v_max": 5.0, **kw}
    return FlashSacLearner(OBS, ACT, FlashSacSpec(**spec), seed=3, compute_dtype=dtype)  # type: ignore[arg-type]


BF16 = torch.bfloat16
LEARNERS = {
    "sac_mse": lambda: _sac(),
    "sac_c51_ln": lambda: _sac(critic="c51", layer_norm=True, num_atoms=21, v_min=-10.0, v_max=10.0),
    "sac_actor_every_2": lambda: _sac(actor_update_every=2, max_grad_norm=1.0),
    "flashsac": lambda: _flash(),
    # The plan's precision = "bfloat16": every guarantee above holds for it too.
    "sac_c51_ln_silu_bf16": lambda: _sac(BF16, critic="c51", layer_norm=True, num_atoms=21, activation="silu"),
    "sac_mse_bf16": lambda: _sac(BF16, actor_update_every=2, actor_hidden_dims=(16,), critic_hidden_dims=(32, 8)),
    "flashsac_bf16": lambda: _flash(BF16),
}


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_act_and_update_shapes_and_finite(name: str) -> None:
    learner = LEARNERS[name]()
    obs = torch.randn(5, OBS, generator=torch.Generator().manual_seed(0))
    a = learner.act(obs)
    assert a.shape == (5, ACT) and a.dtype == torch.float32
    # tanh rounds to exactly +-1 in float32 once |u| > ~9 (FlashSAC's std reaches e^2 at init): closed interval.
    assert (a.abs() <= 1).all() and torch.isfinite(a).all()
    d1, d2 = learner.act(obs, deterministic=True), learner.act(obs, deterministic=True)
    assert torch.equal(d1, d2)
    for i in range(3):
        m = learner.update(_batch(i))
        for k, v in m.items():
            assert isinstance(v, torch.Tensor) and v.dim() == 0, k
            assert torch.isfinite(v.float()), k
        for flag in ("critic_finite",):
            assert m[flag].dtype == torch.bool and bool(m[flag])
    assert learner.num_critic_updates == 3


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_update_never_reads_a_tensor_value_on_the_host(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No .item(), bool(tensor) or float(tensor) in the update path: no host sync, capturable as a graph."""
    learner = LEARNERS[name]()
    batch = _batch()

    def host_read(*_: object, **__: object) -> None:
        raise AssertionError("update read a tensor value on the host")

    for attr in ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, attr, host_read)
    with pytest.raises(AssertionError):  # the trap works
        bool(torch.ones(()) > 0)
    for _ in range(2):  # both cadences: with and without the actor update
        learner.update(batch)
    monkeypatch.undo()
    assert learner.num_critic_updates == 2


# aten ops that need a tensor's value on the host: on CUDA each is a sync, and illegal in a capture.
HOST_READ_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "unique", "repeat_interleave"}


class _AtenHostReads(TorchDispatchMode):
    """Host reads made below Python (e.g. an op whose C++ argument parser turns a tensor into a number)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.__name__.split(".")[0] in HOST_READ_OPS:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_update_makes_no_host_read_at_the_aten_level(name: str) -> None:
    """The Python-level trap above cannot see reads made inside torch's C++ (a `_foreach_lerp_`
    with a tensor weight once did one per optimizer step); the dispatcher sees every one."""
    learner = LEARNERS[name]()
    batch = _batch()
    learner.update(batch)
    trap = _AtenHostReads()
    with trap:
        for _ in range(2):  # both cadences
            learner.update(batch)
    assert trap.reads == []


def test_actor_cadence_follows_actor_update_every() -> None:
    learner = _sac(actor_update_every=3)
    keys = [("actor_loss" in learner.update(_batch(i))) for i in range(6)]
    assert keys == [True, False, False, True, False, False]
    flash = _flash(actor_update_every=2)
    assert [("actor_loss" in flash.update(_batch(i))) for i in range(4)] == [True, False, True, False]


@pytest.mark.parametrize("name", ["sac_mse", "flashsac"])
def test_target_critic_moves_by_polyak(name: str) -> None:
    learner = LEARNERS[name]()
    tau = learner.cfg.tau
    before = [p.detach().clone() for p in learner.critic_target.parameters()]
    learner.update(_batch())
    online = [p.detach() for p in learner.critic.parameters()]
    after = [p.detach() for p in learner.critic_target.parameters()]
    moved = False
    for b, o, a in zip(before, online, after, strict=True):
        torch.testing.assert_close(a, b + tau * (o - b), rtol=1e-5, atol=1e-6)
        moved |= not torch.equal(a, b)
    assert moved


@pytest.mark.parametrize("name", ["sac_c51_ln", "flashsac"])
def test_non_finite_loss_is_flagged_and_skipped_without_side_effects(name: str) -> None:
    learner = LEARNERS[name]()
    learner.update(_batch(0))
    params = {n: p.detach().clone() for n, p in learner.critic.named_parameters()}
    target = [p.detach().clone() for p in learner.critic_target.parameters()]
    bad = _batch(1)
    bad = Batch(bad.obs, bad.action, bad.reward.clone().fill_(float("nan")), bad.next_obs, bad.discount)
    m = learner.update(bad)
    assert not bool(m["critic_finite"])
    for n, p in learner.critic.named_parameters():
        assert torch.equal(p.detach(), params[n]), n
    for a, b in zip(learner.critic_target.parameters(), target, strict=True):
        assert torch.equal(a.detach(), b)
    assert torch.isfinite(learner.update(_batch(2))["critic_loss"])


def test_grads_and_steps_are_separable_for_data_parallel() -> None:
    """Gradients can be edited (all-reduced) between `*_grads` and `*_step`, and a step can be vetoed."""
    learner = _sac()
    groups = learner.optim_groups()
    assert set(groups) == {"critic", "actor", "alpha"}
    before = [p.detach().clone() for p in groups["critic"]]
    m = learner.critic_grads(_batch())
    assert bool(m["critic_finite"])
    assert any(p.grad.abs().sum() > 0 for p in groups["critic"])  # type: ignore[union-attr]
    learner.critic_step(torch.tensor(False))  # another rank reported a non-finite loss
    assert all(torch.equal(p.detach(), b) for p, b in zip(groups["critic"], before, strict=True))
    learner.critic_grads(_batch())
    for p in groups["critic"]:
        p.grad.mul_(0.5)  # type: ignore[union-attr]  # what an averaging all-reduce would do
    learner.critic_step(torch.tensor(True))
    assert any(not torch.equal(p.detach(), b) for p, b in zip(groups["critic"], before, strict=True))


@pytest.mark.parametrize("name", ["sac_mse", "flashsac"])
def test_update_sync_hook_sits_between_backward_and_step_and_can_veto(name: str) -> None:
    learner = LEARNERS[name]()
    calls: list[str] = []

    def sync(opt: str, ok: torch.Tensor) -> torch.Tensor:
        calls.append(opt)
        # Gradients of this optimizer are ready here; veto the critic step as a peer rank would.
        assert any(p.grad.abs().sum() > 0 for p in learner.optim_groups()[opt])  # type: ignore[union-attr]
        return ok & torch.tensor(opt != "critic")

    before = [p.detach().clone() for p in learner.critic.parameters()]
    m = learner.update(_batch(), sync=sync)
    assert sorted(calls) == ["actor", "alpha", "critic"]
    assert not bool(m["critic_finite"]) and bool(m["actor_finite"])
    assert all(torch.equal(p.detach(), b) for p, b in zip(learner.critic.parameters(), before, strict=True))


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_state_dict_round_trip_is_bitwise(name: str) -> None:
    a = LEARNERS[name]()
    for i in range(3):
        a.update(_batch(i))
        a.act(torch.randn(4, OBS))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = LEARNERS[name]()
    b.update(_batch(9))  # diverge first, so loading has to restore everything
    b.load_state_dict(torch.load(buf))  # weights_only: a checkpoint needs no pickled code
    obs = torch.randn(6, OBS)
    assert torch.equal(a.act(obs), b.act(obs))
    assert torch.equal(a.act(obs, deterministic=True), b.act(obs, deterministic=True))
    ma, mb = a.update(_batch(5)), b.update(_batch(5))
    assert ma.keys() == mb.keys()
    for k in ma:
        assert torch.equal(ma[k], mb[k]), k
    for pa, pb in zip(a.actor.state_dict().values(), b.actor.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    for pa, pb in zip(a.critic_target.state_dict().values(), b.critic_target.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)


def test_both_learners_offer_the_runtime_protocol() -> None:
    from unilab.learn.protocol import OffPolicyLearner

    assert isinstance(_sac(), OffPolicyLearner) and isinstance(_flash(), OffPolicyLearner)
    from unilab.algos.td3.learner import Td3Learner
    from unilab.algos.td3.spec import Td3Spec

    assert isinstance(Td3Learner(4, 2, Td3Spec(name="td3")), OffPolicyLearner)


def test_checkpoint_of_other_algo_is_refused() -> None:
    with pytest.raises(UnilabError, match="checkpoint holds a 'flashsac' learner, this run uses 'sac'"):
        _sac().load_state_dict(_flash().state_dict())


def test_same_seed_same_learner_and_caller_rng_untouched() -> None:
    torch.manual_seed(123)
    expect = torch.rand(1)
    torch.manual_seed(123)
    a, b = _flash(), _flash()
    assert torch.equal(torch.rand(1), expect)
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_flashsac_weights_stay_on_the_unit_sphere() -> None:
    learner = _flash()
    for i in range(3):
        learner.update(_batch(i))
    for net in (learner.actor, learner.critic):
        for m in net.modules():
            if isinstance(m, UnitLinear):
                torch.testing.assert_close(m.weight.norm(dim=-1), torch.ones(m.weight.shape[:2]))
            elif isinstance(m, BatchNorm):
                d = m.weight.shape[-1]
                norm = (m.weight.square() + m.bias.square()).sum(-1).sqrt()
                torch.testing.assert_close(norm, torch.full_like(norm, d**0.5))
            elif isinstance(m, RMSNorm):
                torch.testing.assert_close(
                    m.weight.norm(dim=-1), torch.full((m.weight.shape[0],), m.weight.shape[1] ** 0.5)
                )


def test_flashsac_entropy_target_from_action_std_and_reward_scale_applied() -> None:
    learner = _flash(target_action_std=0.15)
    # 0.5 * A * log(2 pi e sigma^2), A = 3.
    assert learner.target_entropy == pytest.approx(
        1.5 * torch.log(torch.tensor(2 * torch.pi * torch.e * 0.0225)).item()
    )
    for _ in range(20):
        learner.observe_rewards(torch.full((4,), 100.0), torch.zeros(4), torch.zeros(4))
    assert float(learner.update(_batch())["reward_scale"]) < 0.1
    off = _flash(reward_scaling=False)
    off.observe_rewards(torch.full((4,), 100.0), torch.zeros(4), torch.zeros(4))
    assert float(off.update(_batch())["reward_scale"]) == 1.0


def test_flashsac_refuses_support_without_zero() -> None:
    with pytest.raises(UnilabError, match=re.escape("critic support [1.0, 5.0] must contain 0")):
        _flash(v_min=1.0, v_max=5.0)


@pytest.mark.parametrize("algo", ["sac", "flashsac"])
def test_bf16_update_keeps_float32_state_and_follows_float32_gradients(algo: str) -> None:
    """bfloat16 compute: the networks, their gradients and optimizer state stay float32 (what
    checkpoints and `act` read); the first update's critic gradient is the float32 one to within
    bf16 rounding, and the working copies follow the float32 weights after every step."""
    kw = {"critic": "c51", "layer_norm": True} if algo == "sac" else {}
    make = _sac if algo == "sac" else _flash
    ref, low = make(**kw), make(BF16, **kw)  # type: ignore[operator]
    ref.critic_grads(_batch(0))
    g_low = low.critic_grads(_batch(0))
    assert torch.isfinite(g_low["critic_loss"])
    flat = lambda ps: torch.cat([p.grad.flatten() for p in ps])  # noqa: E731
    a, b = flat(ref.critic.parameters()), flat(low.critic.parameters())
    assert b.dtype == torch.float32
    assert float((a - b).norm() / a.norm()) < 0.1  # measured: sac 0.01, flashsac 0.05 (bf16 keeps 8 bits)
    for i in range(3):
        low.update(_batch(i))
    for net, work in (
        (low.actor, low._actor_w),
        (low.critic, low._critic_w),
        (low.critic_target, low._critic_target_w),
    ):
        for p, w in zip(net.parameters(), work.params, strict=True):
            assert p.dtype == torch.float32 and w.dtype == BF16
            assert torch.equal(p.detach().to(BF16), w.detach())
    assert all(t.dtype == torch.float32 for t in low.critic_opt.exp_avg + low.critic_opt.exp_avg_sq)


def test_bf16_working_copies_follow_a_loaded_checkpoint() -> None:
    src, dst = _sac(BF16), _sac(BF16)
    src.update(_batch(0))
    dst.load_state_dict(src.state_dict())
    for p, w in zip(dst.critic.parameters(), dst._critic_w.params, strict=True):
        assert torch.equal(p.detach().to(BF16), w.detach())
    assert torch.equal(src.update(_batch(1))["critic_loss"], dst.update(_batch(1))["critic_loss"])


def test_flashsac_bf16_advances_the_float32_networks_batchnorm_statistics() -> None:
    learner = _flash(BF16)
    before = learner.critic.trunk.bn_in.running_mean.clone()
    learner.update(_batch(0))
    assert not torch.equal(before, learner.critic.trunk.bn_in.running_mean)
    assert learner.critic.trunk.bn_in.running_mean.dtype == torch.float32


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU visible to torch")
@pytest.mark.parametrize("algo", ["sac", "flashsac"])
def test_learners_update_on_cuda_from_a_cuda_replay(algo: str) -> None:
    from unilab.learn.normalizer import ObsNormalizer
    from unilab.learn.replay import ReplayBuffer

    dev = torch.device("cuda:0")
    if algo == "sac":
        cfg_s = SacSpec(name="sac", hidden_dims=(32, 32), batch_size=B, critic="c51", layer_norm=True)
        learner: SacLearner | FlashSacLearner = SacLearner(OBS, ACT, cfg_s, dev, seed=1)
        n_step = 1
    else:
        cfg_f = FlashSacSpec(name="flashsac", hidden_dims=(16,), batch_size=B, v_min=-5.0, v_max=5.0)
        learner = FlashSacLearner(OBS, ACT, cfg_f, dev, seed=1)
        n_step = cfg_f.n_step
    rb = ReplayBuffer(1000, OBS, ACT, 16, n_step=n_step, device=dev)
    norm = ObsNormalizer(OBS, dev)
    obs = torch.randn(16, OBS)  # the collector's tensors may live on the CPU
    for _ in range(8):
        norm.update(obs.to(dev))
        act = learner.act(norm.normalize(obs.to(dev)))
        nxt = torch.randn(16, OBS)
        rb.add_batch(obs, act, torch.randn(16), nxt, torch.zeros(16), torch.zeros(16))
        learner.observe_rewards(torch.randn(16, device=dev), torch.zeros(16, device=dev), torch.zeros(16, device=dev))
        obs = nxt
    gen = torch.Generator(device=dev).manual_seed(0)
    for _ in range(3):
        m = learner.update(rb.sample(B, gen).normalized(norm))
    assert all(v.device.type == "cuda" for v in m.values())
    assert bool(m["critic_finite"]) and torch.isfinite(m["critic_loss"])
    state = learner.state_dict()
    again = type(learner)(OBS, ACT, learner.cfg, dev, seed=9)  # type: ignore[arg-type]
    again.load_state_dict(state)
    o = torch.randn(4, OBS, device=dev)
    assert torch.equal(learner.act(o), again.act(o))
