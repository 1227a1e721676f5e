"""Learning-health figures a user reads to see why a policy stands instead of walking: the critic's
bias (Q at an episode's start against the discounted return the episode then collected), the
collector's figures as means over the log window, what a run's events carry, and the go/no-go of
tools/bench_learning.py. The collector's own figures: tests/test_collector.py; eval's: tests/test_eval.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.conftest import SPECS, load_tool
from tests.conftest import run_unilab as unilab
from unilab.collect.collector_client import CollectorStats
from unilab.learn.critic_bias import StartValueBias
from unilab.records.progress import Progress

TINY_SAC = '{name="sac", batch_size=32, hidden_dims=[16], warmup_env_steps=64}'


def test_the_critic_bias_compares_q_at_the_start_with_the_discounted_return_collected() -> None:
    """Two worlds, gamma 0.5. World 0's episode collects 1, 2, 4 and ends: G0 = 1 + 0.5 * 2 + 0.25 * 4
    = 3 against its Q of 10. World 1's goes on, and is not counted until it ends."""
    bias = StartValueBias(2, gamma=0.5)
    bias.start(torch.tensor([0, 1]), torch.tensor([10.0, -1.0]))
    none, world0 = None, torch.tensor([True, False])
    bias.step(torch.tensor([1.0, 1.0]), none)
    bias.step(torch.tensor([2.0, 1.0]), none)
    bias.step(torch.tensor([4.0, 1.0]), world0)
    assert bias.read() == {"q_start": 10.0, "mc_return_start": 3.0, "q_bias": 7.0}
    assert bias.read() == {}  # cleared by the read
    # World 0's next episode starts from zero: 8 then the end, G0 = 8 (its Q 2); world 1 ends too:
    # 1 + 0.5 + 0.25 + 0.125 + 0.0625 = 1.9375 (its Q -1). Means over both episodes.
    bias.start(torch.tensor([0]), torch.tensor([2.0]))
    bias.step(torch.tensor([8.0, 1.0]), none)
    bias.step(torch.tensor([0.0, 1.0]), torch.tensor([True, True]))
    got = bias.read()
    assert got["q_start"] == pytest.approx((2.0 - 1.0) / 2)
    assert got["mc_return_start"] == pytest.approx((8.0 + 1.9375) / 2)
    assert got["q_bias"] == pytest.approx(got["q_start"] - got["mc_return_start"])


def test_an_episode_without_a_measured_start_or_ended_non_finite_is_left_out() -> None:
    bias = StartValueBias(3, gamma=0.9)
    bias.start(torch.tensor([1, 2]), torch.tensor([5.0, 7.0]))  # world 0's episode began unmeasured
    bias.step(torch.ones(3), torch.tensor([True, True, True]), dropped=torch.tensor([False, False, True]))
    assert bias.read() == {"q_start": 5.0, "mc_return_start": 1.0, "q_bias": 4.0}  # world 1's alone


def _learners() -> dict[str, object]:
    from unilab.algos.flashsac.learner import FlashSacLearner
    from unilab.algos.flashsac.spec import FlashSacSpec
    from unilab.algos.sac.learner import SacLearner
    from unilab.algos.sac.spec import SacSpec
    from unilab.algos.td3.learner import Td3Learner
    from unilab.algos.td3.spec import Td3Spec

    return {
        "sac": SacLearner(5, 2, SacSpec(name="sac", hidden_dims=(8,)), seed=1),
        "sac_c51": SacLearner(5, 2, SacSpec(name="sac", hidden_dims=(8,), critic="c51", num_atoms=11), seed=1),
        "td3_mean": Td3Learner(5, 2, Td3Spec(name="td3", hidden_dims=(8,), clipped_double_q=False), seed=1),
        "flashsac": FlashSacLearner(5, 2, FlashSacSpec(name="flashsac", hidden_dims=(8,)), seed=1),
    }


@pytest.mark.parametrize("name", ["sac", "sac_c51", "td3_mean", "flashsac"])
def test_each_learner_estimates_q_in_reward_units_as_its_actor_reads_the_critic(name: str) -> None:
    from unilab.learn import categorical

    learner = _learners()[name]
    gen = torch.Generator().manual_seed(0)
    obs, action = torch.randn(6, 5, generator=gen), torch.rand(6, 2, generator=gen) * 2 - 1
    q = learner.q_estimate(obs, action)  # type: ignore[attr-defined]
    assert q.shape == (6,) and not q.requires_grad
    critic = learner.critic  # type: ignore[attr-defined]
    if name == "flashsac":
        learner.reward_scale = lambda: torch.tensor(4.0)  # type: ignore[attr-defined]
        twin = categorical.expectation(critic(obs, action, train=False), learner.atoms)  # type: ignore[attr-defined]
        assert torch.allclose(learner.q_estimate(obs, action), twin.min(0).values / 4.0)  # type: ignore[attr-defined]
        return
    twin = learner._q_values(critic(obs, action)).detach()  # type: ignore[attr-defined]
    expect = twin.mean(0) if name == "td3_mean" else twin.min(0).values
    assert torch.allclose(q, expect)


def test_td3_reports_its_exploration_noise_std_once_it_has_acted() -> None:
    learner = _learners()["td3_mean"]
    assert learner.exploration_metrics() == {}  # type: ignore[attr-defined]
    learner.act(torch.zeros(4, 5))  # type: ignore[attr-defined]
    std = learner.exploration_metrics()["exploration_std"]  # type: ignore[attr-defined]
    assert float(std) == pytest.approx(float(learner.exploration_std.mean()))  # type: ignore[attr-defined]


def test_the_collectors_figures_are_means_per_env_step_over_the_window_published_since_the_last_fold() -> None:
    prog = Progress()
    prog.fold(CollectorStats(health_env_steps=100.0, health_sums={"action_saturation": 20.0, "swing_share": 5.0}))
    assert prog.last_health == {"action_saturation": 0.2, "swing_share": 0.05}
    prog.fold(CollectorStats(health_env_steps=100.0, health_sums={"action_saturation": 20.0, "swing_share": 5.0}))
    assert prog.last_health == {"action_saturation": 0.2, "swing_share": 0.05}  # nothing new: kept
    prog.fold(CollectorStats(health_env_steps=300.0, health_sums={"action_saturation": 20.0, "swing_share": 105.0}))
    assert prog.last_health == {"action_saturation": 0.0, "swing_share": 0.5} and prog.health_env_steps == 300.0


def test_a_runs_events_and_curves_carry_its_learning_health(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    r = unilab(
        "apply", str(SPECS / "cartpole.toml"), "--quiet",
        "--set", "run.total_env_steps=640", "--set", f"algo={TINY_SAC}", "--set", f'run.output_dir="{out}"',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = out.iterdir()
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    last = [e for e in events if e["event"] == "iteration"][-1]
    assert 0.0 <= last["action_saturation"] <= 1.0
    assert "swing_share" not in last  # the cart-pole declares no diagnostics
    # The untrained policy drops the pole within a second: episodes completed, each measured at its start.
    assert last["q_bias"] == pytest.approx(last["q_start"] - last["mc_return_start"], abs=2e-6)
    assert last["mc_return_start"] > 0  # the cart-pole's rewards are positive
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = EventAccumulator(str(run_dir / "tensorboard")).Reload().Tags()["scalars"]
    assert {"health/action_saturation", "learner/q_bias", "learner/q_start", "learner/mc_return_start"} <= set(tags)


def _bench() -> ModuleType:
    return load_tool("bench_learning")


def _walk_report(swing: float, lin: float) -> dict:
    return {
        "gait": {"swing_share": swing, "touchdowns_per_s": 1.0, "stance_width": 0.2},
        "action_saturation": 0.1,
        "command_tracking": {
            "lin_vel_xy_error": lin,
            "standing_lin_vel_xy_error": 1.0,
            "yaw_rate_error": 0.1,
            "standing_yaw_rate_error": 0.2,
        },
    }


def test_bench_learning_goes_at_1m_env_steps_only_on_a_swinging_tracking_policy() -> None:
    bench = _bench()
    early = (500_000, _walk_report(0.9, 0.1))  # before the mark: not what is judged
    assert bench.go_no_go([early, (1_000_000, _walk_report(0.3, 0.7))], 2_000_000).startswith("GO ")
    standing = bench.go_no_go([early, (1_000_000, _walk_report(0.05, 0.95))], 2_000_000)
    assert standing.startswith("NO-GO: swing share 0.050 < 0.2; lin-velocity error vs standing 0.950 > 0.8")
    assert bench.go_no_go([(1_250_000, _walk_report(0.3, 0.9))], 2_000_000).startswith(
        "NO-GO: lin-velocity error vs standing 0.900 > 0.8"
    )
    assert bench.go_no_go([early], 500_000).startswith("n/a (the run trained 500,000 env steps")
    assert bench.go_no_go([(1_000_000, {"gait": None})], 1_000_000).startswith("n/a (no gait")
    assert bench.gait_text(_walk_report(0.3, 0.7)) == "swing 0.300, 1.00 steps/s, stance 0.200 m; saturation 0.100"
