"""Collector lifecycle: automatic masked resets, terminal observations, statistics, finite verdict, timings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from unilab.collect.build import build_collector
from unilab.collect.collector import Collector
from unilab.collect.timing import PHASES
from unilab.spec.models import SimSpec, TaskSpec, task_spec

N = 4


def _walk(**fields: object) -> Collector:
    fields.setdefault("num_envs", N)
    return build_collector(task_spec(name="g1_walk", **fields), SimSpec(workers=1), finite_check_interval=4, seed=3)


@pytest.fixture
def walk() -> Iterator[Collector]:
    with _walk() as c:
        yield c


def test_time_limit_publishes_terminal_obs_then_resets() -> None:
    # 0.1 s episodes at a 0.02 s env step: every world is truncated at its 5th step.
    with _walk(episode_length_s=0.1) as c:
        c.reset_all()
        layout = c.task.observation_layout()
        cmd, act = layout["velocity_command"], layout["last_action"]
        actions = torch.full((N, 29), 0.05)
        for i in range(5):
            cmd_before = c.task.velocity_command.clone()
            obs, _reward, terminated, truncated = c.step(actions)
            if i < 4:
                assert not (terminated | truncated).any()
                assert torch.equal(c.next_obs, obs)
        survivors = ~terminated
        assert truncated[survivors].all()
        ended = terminated | truncated
        # next_obs: the last observation of the finished episode (old command, the action just taken) ...
        assert torch.allclose(c.next_obs[ended, cmd], cmd_before[ended])
        assert torch.allclose(c.next_obs[ended, act], actions[ended])
        # ... obs: the first observation of the new one (new command, no previous action).
        assert torch.allclose(obs[ended, cmd], c.task.velocity_command[ended])
        assert not torch.allclose(obs[ended, cmd], cmd_before[ended])
        assert (obs[ended, act] == 0).all()
        assert (c.task.episode_step[ended] == 0).all()
        stats = c.episode_stats()
        # No world ended before the 5th step (checked above) and every one that stood was truncated at it,
        # so every world's episode ended now, five steps long, whether it fell or timed out.
        assert ended.all() and stats["episodes"] == N
        assert stats["episode_length"] == 5.0
        assert stats["terminated_fraction"] == pytest.approx(terminated.float().mean().item())
        assert c.episode_stats() == {"episodes": 0.0}  # cleared by the read


def test_nan_world_is_caught_within_the_interval_and_only_it_is_reset(walk: Collector) -> None:
    walk.reset_all()
    actions = torch.zeros(N, 29)
    walk.step(actions)  # step 1
    steps_before = walk.task.episode_step.clone()
    bad_actions = actions.clone()
    bad_actions[2, 5] = float("nan")
    obs, reward, terminated, truncated = walk.step(bad_actions)  # step 2: world 2 goes non-finite
    assert walk.nonfinite.tolist() == [False, False, True, False]
    assert truncated[2] and not terminated[2] and reward[2] == 0.0
    assert torch.isfinite(obs).all() and torch.isfinite(walk.next_obs).all()
    assert torch.isfinite(walk.backend.state.qpos).all()
    # Only world 2 restarted its episode; the host has not read anything yet (interval = 4 steps).
    assert walk.task.episode_step[2] == 0
    others = torch.tensor([0, 1, 3])
    assert torch.equal(walk.task.episode_step[others], steps_before[others] + 1)
    assert walk.finite_verdict is None
    walk.step(actions)  # step 3
    walk.step(actions)  # step 4: interval boundary, the verdict is read
    verdict = walk.finite_verdict
    assert verdict is not None and verdict.step == 4
    assert verdict.worlds == (2,) and verdict.events == 1 and not verdict.ok
    assert walk.nonfinite_worlds_total == 1
    for _ in range(4):
        walk.step(actions)
    assert walk.finite_verdict.ok and walk.finite_verdict.step == 8


def test_timings_cover_every_phase(walk: Collector) -> None:
    walk.reset_all()
    walk.reset_timings()
    for _ in range(3):
        walk.step(torch.zeros(N, 29))
    t = walk.timings()
    assert tuple(t) == PHASES
    for phase in (
        "action_apply",
        "physics_step",
        "state_read",
        "observation",
        "reward",
        "termination",
        "metrics",
        "events_commands",
        "reset_mask",
        "publication",
        "post_reset_observation",
    ):
        assert t[phase].calls == 3, phase
        assert t[phase].total_s > 0
    assert t["physics_step"].mean_us > 0


def test_worker_processes_and_motion_tracking() -> None:
    task = task_spec(name="g1_motion_tracking", num_envs=6, motion="builtin:g1_squat", observation_noise=True)
    with build_collector(task, SimSpec(workers=2), finite_check_interval=10) as c:
        assert len(c.backend.worker_pids()) == 2
        c.reset_all()
        gen = torch.Generator().manual_seed(0)
        for _ in range(20):
            obs, reward, _terminated, _truncated = c.step(torch.rand(6, 29, generator=gen) - 0.5)
            assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
        assert c.check_finite_now().ok


@pytest.mark.parametrize(
    "task",
    [
        task_spec(name="g1_walk", num_envs=N, domain_randomization=True, observation_noise=True),
        task_spec(name="g1_motion_tracking", num_envs=N, motion="builtin:g1_squat"),
    ],
    ids=["g1_walk", "g1_motion_tracking"],
)
def test_tasks_that_skip_the_acceleration_solve_do_not_read_its_sensors(
    task: TaskSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector skips the backend's end-of-step constraint solve for tasks that declare they
    read no acceleration-stage sensor (unilab.collect.build.reads_acceleration_sensors); the
    same run with the solve gives bitwise the same observations, rewards and episode ends."""
    import unilab.collect.build as build

    def run() -> list[tuple[torch.Tensor, ...]]:
        out = []
        with build_collector(task, SimSpec(workers=1), finite_check_interval=4, seed=5) as c:
            assert c.backend.acc_sensors is build.reads_acceleration_sensors(task)
            c.reset_all()
            gen = torch.Generator().manual_seed(1)
            for _ in range(30):
                out.append(tuple(t.clone() for t in c.step(torch.rand(N, 29, generator=gen) * 2 - 1)))
        return out

    lean = run()
    monkeypatch.setattr(build, "reads_acceleration_sensors", lambda _task: True)
    full = run()
    for k, (a, b) in enumerate(zip(lean, full, strict=True)):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y), f"step {k}"


def test_wrong_action_shape_is_refused(walk: Collector) -> None:
    from unilab.errors import UnilabError

    walk.reset_all()
    with pytest.raises(UnilabError, match="actions have shape"):
        walk.step(torch.zeros(N, 12))


def test_finite_monitor_flags_exactly_the_worlds_with_a_non_finite_input() -> None:
    """Each of the five inputs, NaN, +inf, -inf, +inf and -inf in one row (they cancel to NaN in a
    row sum), and finite values that overflow the row sum; finite rows stay clean."""
    from unilab.collect.finite import FiniteMonitor

    n = 8
    mon = FiniteMonitor(n, torch.device("cpu"), interval=10)
    gen = torch.Generator().manual_seed(0)
    actions, qpos, qvel = (torch.randn(n, d, generator=gen) for d in (29, 36, 35))
    obs, reward = torch.randn(n, 96, generator=gen), torch.randn(n, generator=gen)
    inf = float("inf")
    actions[0, 3] = float("nan")
    qpos[1, 0] = inf
    qvel[2, 7] = -inf
    obs[3, 5], obs[3, 6] = inf, -inf
    reward[4] = float("nan")
    obs[5, :2] = 3e38  # finite entries whose sum overflows: a diverged world
    bad = mon.record(actions, qpos, qvel, obs, reward)
    assert bad.tolist() == [True] * 6 + [False] * 2
    assert torch.isfinite(obs[6:]).all()  # the inputs are not modified
    verdict = mon.read(step=1)
    assert verdict.worlds == (0, 1, 2, 3, 4, 5) and verdict.events == 6
    clean = mon.record(*(torch.zeros_like(t) for t in (actions, qpos, qvel, obs, reward)))
    assert not clean.any() and mon.read(step=2).ok


def test_action_saturation_is_the_share_of_action_components_at_the_bound(walk: Collector) -> None:
    """Learning health: the share of the action's components beyond 0.95 in magnitude, per env
    step, since the last read (which clears it); a non-finite component never reaches the physics
    and does not count."""
    walk.reset_all()
    assert walk.health_stats() == {}  # no step yet
    for _ in range(3):
        walk.step(torch.ones(N, 29))
    assert walk.health_stats()["action_saturation"] == 1.0
    walk.step(torch.zeros(N, 29))
    assert walk.health_stats()["action_saturation"] == 0.0
    mixed = torch.full((N, 29), 0.9)
    mixed[:, :10] = -1.0  # 10 of 29 components at the bound
    mixed[0, 10] = float("nan")
    walk.step(mixed)
    walk.step(torch.zeros(N, 29))
    assert walk.health_stats()["action_saturation"] == pytest.approx(10 / 29 / 2)


def _lift_left_foot(c: Collector, world: int) -> None:
    """Reset `world` with its left hip and knee bent: its left foot starts well above the floor."""
    task, layout = c.task, c.task.layout
    qpos, qvel = task.state.qpos.clone(), torch.zeros_like(task.state.qvel)
    adr = dict(zip(layout.joint_names, layout.qpos_adr.tolist(), strict=True))
    qpos[world, adr["left_hip_pitch_joint"]] = -0.8
    qpos[world, adr["left_knee_joint"]] = 1.6
    mask = torch.arange(c.num_envs) == world
    task.after_reset(mask, c.backend.reset(mask, qpos, qvel))


def test_swing_share_is_zero_standing_and_counts_a_lifted_foot() -> None:
    """g1_walk's diagnostics: the share of env steps with a foot in swing (body origin at or above
    the contact height) and the mean share of feet in swing, reported beside action_saturation."""
    with _walk(num_envs=2) as c:
        assert c.health_names == ["action_saturation", "swing_share", "feet_air_share"]
        c.reset_all()
        for _ in range(10):
            c.step(torch.zeros(2, 29))  # the standing pose: both feet stay down
        standing = c.health_stats()
        assert standing["swing_share"] == 0.0 and standing["feet_air_share"] == 0.0
        _lift_left_foot(c, world=1)
        for _ in range(3):  # the lifted foot takes a few steps to come down
            c.step(torch.zeros(2, 29))
        lifted = c.health_stats()
        # World 1's left foot alone is up: half of the steps (of two worlds) swing, with one foot of two.
        assert lifted["swing_share"] == pytest.approx(0.5)
        assert lifted["feet_air_share"] == pytest.approx(lifted["swing_share"] / 2)
