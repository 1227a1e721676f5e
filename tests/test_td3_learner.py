"""TD3 learner: metrics and actor cadence, targets, exploration noise, precision, checkpoints, a bandit."""

from __future__ import annotations

import io

import pytest
import torch
from pydantic import ValidationError

from tests.conftest import random_batch
from unilab.algos.td3.learner import Td3Learner
from unilab.algos.td3.spec import Td3Spec
from unilab.errors import UnilabError
from unilab.learn import categorical
from unilab.learn.replay import Batch

pytestmark = pytest.mark.usefixtures("one_thread")

OBS, ACT, B = 7, 3, 32


def _batch(seed: int = 0, b: int = B) -> Batch:
    return random_batch(seed, b, OBS, ACT)


def _td3(dtype: torch.dtype = torch.float32, seed: int = 3, **kw: object) -> Td3Learner:
    widths = {} if "actor_hidden_dims" in kw else {"hidden_dims": (32, 32)}
    spec = {"name": "td3", **widths, "batch_size": B, "num_atoms": 21, "v_min": -10.0, "v_max": 10.0, **kw}
    return Td3Learner(OBS, ACT, Td3Spec(**spec), seed=seed, compute_dtype=dtype)  # type: ignore[arg-type]


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"critic": "mse", "clipped_double_q": False},
        {"layer_norm": True, "activation": "silu", "clipped_double_q": False, "max_grad_norm": 1.0},
    ],
    ids=["c51", "mse_mean", "c51_ln_silu_mean"],
)
def test_update_metrics_are_finite_0dim_tensors(kw: dict[str, object]) -> None:
    learner = _td3(**kw)
    for i in range(4):
        m = learner.update(_batch(i))
        expected = {"critic_loss", "critic_finite", "q_mean", "critic_grad_norm"}
        if i % 2 == 0:
            expected |= {"actor_loss", "actor_finite", "actor_grad_norm"}
        assert expected <= set(m)
        for k, v in m.items():
            assert isinstance(v, torch.Tensor) and v.dim() == 0, k
            assert torch.isfinite(v.float()), k
        assert bool(m["critic_finite"])
    assert (learner.num_critic_updates, learner.num_actor_updates) == (4, 2)


def test_actor_updates_only_every_actor_update_every_calls() -> None:
    learner = _td3(actor_update_every=3)
    kinds, moved = [], []
    for i in range(6):
        kinds.append(learner.cycle_kind())
        actor, actor_target = _params(learner.actor), _params(learner.actor_target)
        m = learner.update(_batch(i))
        assert ("actor_loss" in m) == (kinds[-1] == "critic+actor")
        moved.append(not _same(actor, _params(learner.actor)))
        assert moved[-1] == (not _same(actor_target, _params(learner.actor_target)))  # target follows the step
    assert kinds == ["critic+actor", "critic", "critic", "critic+actor", "critic", "critic"]
    assert moved == [True, False, False, True, False, False]
    assert learner.num_actor_updates == 2


def test_targets_move_by_polyak() -> None:
    learner = _td3(critic="mse")
    tau = learner.cfg.tau
    for net, target in ((learner.critic, learner.critic_target), (learner.actor, learner.actor_target)):
        assert _same(_params(net), _params(target))  # targets start as copies
    critic_t, actor_t = _params(learner.critic_target), _params(learner.actor_target)
    learner.update(_batch())
    for before, net, target in (
        (critic_t, learner.critic, learner.critic_target),
        (actor_t, learner.actor, learner.actor_target),
    ):
        for b, o, a in zip(before, net.parameters(), target.parameters(), strict=True):
            torch.testing.assert_close(a.detach(), b + tau * (o.detach() - b), rtol=1e-5, atol=1e-6)
        assert not _same(before, _params(target))


@pytest.mark.parametrize("critic", ["mse", "c51"])
@pytest.mark.parametrize("cdq", [True, False])
def test_critic_loss_matches_a_hand_computed_target(critic: str, cdq: bool) -> None:
    """Target action from the target actor plus the smoothing noise, clamped; lower critic (or mean)."""
    learner = _td3(critic=critic, clipped_double_q=cdq)
    for i in range(3):  # online and target networks apart
        learner.update(_batch(i))
    batch = _batch(9)
    smoothing = torch.full((B, ACT), 0.5)  # pushes some actions past 1: the clamp matters
    loss, _ = learner._critic_loss_eager(batch, smoothing)
    with torch.no_grad():
        next_a = (learner.actor_target(batch.next_obs) + 0.5).clamp(-1, 1)
        t_out = learner.critic_target(batch.next_obs, next_a)
        out = learner.critic(batch.obs, batch.action)
        if critic == "mse":
            t_q = t_out.min(0).values if cdq else t_out.mean(0)
            target = batch.reward + batch.discount * t_q
            expected = ((out[0] - target) ** 2).mean() + ((out[1] - target) ** 2).mean()
        else:
            probs = torch.softmax(t_out, -1)
            q = (probs * learner.atoms).sum(-1)
            if cdq:
                p = torch.stack([probs[0, j] if q[0, j] <= q[1, j] else probs[1, j] for j in range(B)])
            else:
                p = (probs[0] + probs[1]) / 2
            values = batch.reward[:, None] + batch.discount[:, None] * learner.atoms
            target = categorical.project(p, values, learner.cfg.v_min, learner.cfg.v_max)
            logp = torch.log_softmax(out, -1)
            expected = -(target * logp[0]).sum(-1).mean() - (target * logp[1]).sum(-1).mean()
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-5, atol=1e-5)


def test_smoothing_noise_is_clipped() -> None:
    learner = _td3(target_noise_std=1.0, target_noise_clip=0.3)
    seen: list[torch.Tensor] = []

    def spy(batch: Batch, smoothing: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(smoothing)
        return learner._critic_loss_eager(batch, smoothing)

    learner._critic_loss = spy  # type: ignore[method-assign]
    learner.update(_batch())
    assert seen[0].shape == (B, ACT) and seen[0].abs().max() == pytest.approx(0.3)


def test_non_finite_loss_is_flagged_and_skipped() -> None:
    learner = _td3()
    learner.update(_batch(0))
    nets = [learner.critic, learner.critic_target, learner.actor, learner.actor_target]
    before = [_params(n) for n in nets]
    bad = _batch(1)
    m = learner.update(Batch(bad.obs, bad.action, bad.reward.clone().fill_(float("nan")), bad.next_obs, bad.discount))
    assert not bool(m["critic_finite"])
    assert all(_same(b, _params(n)) for b, n in zip(before[:2], nets[:2], strict=True))
    assert torch.isfinite(learner.update(_batch(2))["critic_loss"])


def test_update_makes_no_host_read(monkeypatch: pytest.MonkeyPatch) -> None:
    learner = _td3()
    batch = _batch()

    def host_read(*_: object, **__: object) -> None:
        raise AssertionError("read a tensor value on the host")

    learner.act(torch.zeros(4, OBS))
    for attr in ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, attr, host_read)
    for _ in range(2):  # both cadences
        learner.update(batch)
    learner.observe_rewards(torch.zeros(4), torch.tensor([True, False, False, False]), torch.zeros(4, dtype=torch.bool))
    learner.act(torch.zeros(4, OBS))
    monkeypatch.undo()
    assert learner.num_critic_updates == 2


def test_optim_groups_and_runtime_views() -> None:
    learner = _td3()
    groups = learner.optim_groups()
    assert set(groups) == {"critic", "actor"}
    assert [id(p) for p in groups["critic"]] == [id(p) for p in learner.critic.parameters()]
    want = [learner.actor, learner.critic, learner.critic_target, learner.actor_target]
    assert learner.replicated() == want
    assert learner.running_stat_modules() == []
    obs = torch.randn(5, OBS)
    policy = learner.deterministic_actor()
    with torch.no_grad():
        assert torch.equal(policy(obs), learner.act(obs, deterministic=True))


def test_exploration_noise_is_clamped_and_stds_redraw_only_for_ended_envs() -> None:
    learner = _td3(exploration_std_min=0.05, exploration_std_max=1.0)
    n = 64
    obs = torch.randn(n, OBS, generator=torch.Generator().manual_seed(1)) * 3
    a = learner.act(obs)
    assert a.shape == (n, ACT) and a.dtype == torch.float32
    assert (a.abs() <= 1).all() and (a.abs() == 1).any()  # std up to 1: the clamp is exercised
    assert not torch.equal(a, learner.act(obs, deterministic=True))
    std = learner.exploration_std
    assert std is not None and std.shape == (n, 1)
    assert ((std >= 0.05) & (std <= 1.0)).all() and std.unique().numel() == n
    learner.act(obs)  # acting does not redraw
    assert torch.equal(learner.exploration_std, std)
    terminated = torch.zeros(n, dtype=torch.bool)
    truncated = torch.zeros(n, dtype=torch.bool)
    terminated[[0, 5]] = True
    truncated[[5, 9]] = True
    learner.observe_rewards(torch.zeros(n), terminated, truncated)
    new = learner.exploration_std
    ended = terminated | truncated
    assert (new[ended] != std[ended]).all() and torch.equal(new[~ended], std[~ended])
    assert ((new >= 0.05) & (new <= 1.0)).all()
    # Float flags as well as bool ones; a new env count draws a fresh set.
    learner.observe_rewards(torch.zeros(n), torch.zeros(n), torch.zeros(n))
    assert torch.equal(learner.exploration_std, new)
    assert learner.act(obs[:8]).shape == (8, ACT) and learner.exploration_std.shape == (8, 1)


def test_exploration_noise_scales_with_the_env_std() -> None:
    """A row's noise has that row's std: with the stds set by hand, the per-row spread matches."""
    learner = _td3()
    obs = torch.zeros(2, OBS)
    learner.act(obs)
    learner.exploration_std = torch.tensor([[0.01], [0.2]])
    base = learner.act(obs, deterministic=True)
    noise = torch.stack([learner.act(obs) - base for _ in range(400)])  # [400, 2, ACT]
    spread = noise.std(dim=(0, 2))
    assert spread[0] == pytest.approx(0.01, rel=0.2) and spread[1] == pytest.approx(0.2, rel=0.2)


def test_bfloat16_compute_runs_and_keeps_float32_state() -> None:
    learner = _td3(torch.bfloat16, layer_norm=True)
    for i in range(4):
        m = learner.update(_batch(i))
        assert all(torch.isfinite(v.float()) for v in m.values())
        assert bool(m["critic_finite"])
    assert learner.num_actor_updates == 2
    assert all(p.dtype == torch.bfloat16 for p in learner._critic_w.params + learner._actor_target_w.params)
    assert all(p.dtype == torch.float32 for p in learner.critic.parameters())
    # The working copies hold the float32 weights after each step.
    for w, p in zip(learner._actor_w.params, learner.actor.parameters(), strict=True):
        assert torch.equal(w, p.detach().to(torch.bfloat16))
    a = learner.act(torch.randn(3, OBS))
    assert a.dtype == torch.float32 and (a.abs() <= 1).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip_is_bitwise(dtype: torch.dtype) -> None:
    a = _td3(dtype)
    for i in range(3):
        a.update(_batch(i))
        a.act(torch.randn(6, OBS))
        a.observe_rewards(torch.zeros(6), torch.tensor([True, False, False, False, False, True]), torch.zeros(6))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = _td3(dtype, seed=11)
    b.load_state_dict(torch.load(buf, weights_only=False))
    assert (b.num_critic_updates, b.num_actor_updates) == (3, 2)
    assert torch.equal(a.exploration_std, b.exploration_std)  # type: ignore[arg-type]
    for i in range(3, 5):  # both cadences
        ma, mb = a.update(_batch(i)), b.update(_batch(i))
        assert set(ma) == set(mb)
        for k in ma:
            assert torch.equal(ma[k], mb[k]), k
    obs = torch.randn(6, OBS)
    assert torch.equal(a.act(obs), b.act(obs))
    for name in ("actor", "actor_target", "critic", "critic_target"):
        assert _same(_params(getattr(a, name)), _params(getattr(b, name))), name


def test_load_weights_takes_networks_only_and_refuses_other_algos() -> None:
    a, b = _td3(), _td3(seed=11)
    for i in range(2):
        a.update(_batch(i))
    b.load_weights(a.state_dict())
    for name in ("actor", "actor_target", "critic", "critic_target"):
        assert _same(_params(getattr(a, name)), _params(getattr(b, name))), name
    assert b.num_critic_updates == 0 and b.exploration_std is None
    with pytest.raises(UnilabError, match="'sac'"):
        b.load_weights({**a.state_dict(), "algo": "sac"})


def test_bad_sizes_and_empty_support_are_refused() -> None:
    with pytest.raises(UnilabError, match="positive"):
        _td3_dims(0, ACT)
    with pytest.raises(UnilabError, match="support is empty"):
        _td3(v_min=1.0, v_max=1.0)
    with pytest.raises(ValidationError, match="at least exploration_std_min"):  # the spec refuses it first
        _td3(exploration_std_min=0.5, exploration_std_max=0.1)
    _td3(critic="mse", v_min=1.0, v_max=1.0)  # the support only matters to c51


def _td3_dims(obs_dim: int, act_dim: int) -> Td3Learner:
    return Td3Learner(obs_dim, act_dim, Td3Spec(name="td3", hidden_dims=(8,)))  # type: ignore[call-arg]


def test_seed_fixes_init_without_touching_the_global_rng() -> None:
    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    a, b = _td3(seed=5), _td3(seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert _same(_params(a.actor), _params(b.actor)) and _same(_params(a.critic), _params(b.critic))
    assert not _same(_params(a.actor), _params(_td3(seed=6).actor))


def test_one_step_bandit_actor_approaches_the_best_action() -> None:
    """Reward -||a - M obs||^2, discount 0: the critic learns the quadratic, the actor its peak."""
    obs_dim, act_dim, b = 3, 2, 128
    cfg = Td3Spec(  # type: ignore[call-arg]
        name="td3", hidden_dims=(64, 64), batch_size=b, critic="mse", actor_lr=1e-3, critic_lr=1e-3
    )
    learner = Td3Learner(obs_dim, act_dim, cfg, seed=0)
    g = torch.Generator().manual_seed(100)
    m = torch.tensor([[0.4, -0.2], [0.1, 0.3], [-0.2, 0.2]])  # best actions within [-0.7, 0.7]
    test_obs = torch.rand(512, obs_dim, generator=g) * 2 - 1

    def error() -> float:
        return float((learner.act(test_obs, deterministic=True) - test_obs @ m).square().sum(-1).mean())

    zero_action_error = float((test_obs @ m).square().sum(-1).mean())  # about 0.12
    for _ in range(300):
        obs = torch.rand(b, obs_dim, generator=g) * 2 - 1
        action = torch.rand(b, act_dim, generator=g) * 2 - 1
        reward = -(action - obs @ m).square().sum(-1)
        learner.update(Batch(obs, action, reward, torch.rand(b, obs_dim, generator=g) * 2 - 1, torch.zeros(b)))
    assert error() < 0.25 * zero_action_error  # measured about 0.006 (0.005-0.01 over seeds)
