"""`task.reward_curriculum`: reward weights that change with the run's env steps, in the plan, the
collector process, a resumed run and `unilab eval`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import host, run_unilab
from unilab.collect.build import build_collector
from unilab.collect.collector_client import collector_for
from unilab.collect.curriculum import RewardCurriculum
from unilab.spec.models import SimSpec, task_spec
from unilab.tasks.registry import task_def

ROOT = Path(__file__).resolve().parents[1]
RAMP = {"track_ang_vel_z_exp": {"weight": 3.0, "start_env_steps": 1_000, "end_env_steps": 3_000}}


def test_a_ramp_moves_the_weight_linearly_between_its_ends_and_keeps_it_after() -> None:
    spec = task_spec(name="g1_walk", num_envs=4, reward_curriculum=RAMP)
    at = [task_def(spec).weights_at(spec, n)["track_ang_vel_z_exp"] for n in (0, 1_000, 2_000, 3_000, 10**9)]
    assert at == [1.0, 1.0, 2.0, 3.0, 3.0]
    # The other terms keep their weights throughout.
    others = {k: v for k, v in task_def(spec).weights(spec).items() if k != "track_ang_vel_z_exp"}
    assert {k: v for k, v in task_def(spec).weights_at(spec, 5_000).items() if k in others} == others


def test_a_change_without_an_end_is_a_step_from_the_spec_weight() -> None:
    spec = task_spec(
        name="g1_walk",
        num_envs=4,
        reward_weights={"track_ang_vel_z_exp": 2.0},
        reward_curriculum={"track_ang_vel_z_exp": {"weight": 3.0, "start_env_steps": 500}},
    )
    assert [task_def(spec).weights_at(spec, n)["track_ang_vel_z_exp"] for n in (499, 500)] == [2.0, 3.0]


def _alive_column(c) -> int:
    return c.task.reward_names.index("alive")


def test_the_collector_scores_each_step_under_the_weights_of_the_run_env_step() -> None:
    change = {"alive": {"weight": 3.0, "start_env_steps": 8, "end_env_steps": 24}}
    spec = task_spec(name="g1_walk", num_envs=4, reward_curriculum=change)
    alive0 = task_def(spec).weights(spec)["alive"]
    with build_collector(spec, SimSpec(workers=1), seed=1) as c:
        col, dt = _alive_column(c), c.task.step_dt
        c.reset_all()
        cur = RewardCurriculum.of(spec, env_steps_start=0, env_steps_per_step=4)
        assert cur is not None
        seen = []
        for t in range(8):
            cur.apply(c.task, t)
            c.step(torch.zeros(4, c.action_dim))
            standing = ~c.terminated
            seen.append(round(float(c.task.reward_terms[standing, col][0]) / dt, 6))
        # env steps 0, 4, 8: the spec's weight; 12 .. 24 linear to 3.0; then 3.0.
        ramp = [alive0 + (3.0 - alive0) * (n - 8) / 16 for n in (12, 16, 20, 24)]
        assert seen == pytest.approx([alive0, alive0, alive0, *ramp, 3.0], abs=1e-5)

        # A resumed session (its collector starts afresh at the run's env steps) scores as an
        # uninterrupted run does at the same env step.
        again = RewardCurriculum.of(spec, env_steps_start=16, env_steps_per_step=4)
        assert again is not None
        again.apply(c.task, 0)
        c.step(torch.zeros(4, c.action_dim))
        assert float(c.task.reward_terms[~c.terminated, col][0]) / dt == pytest.approx(ramp[1], abs=1e-5)


def test_a_resumed_run_collector_starts_at_the_run_env_steps() -> None:
    from unilab.plan.from_spec import plan

    plan = plan(ROOT / "specs" / "g1.toml", host_facts=host("cpu_laptop"))
    client = collector_for(plan, 0, {"counters": {"env_steps": 640, "syncs": 10, "updates": 0, "episodes": 0}})
    assert client.env_steps_start == 640 * plan.topology.world_size
    assert collector_for(plan, 0, None).env_steps_start == 0


def test_the_cartpole_task_takes_new_weights_too() -> None:
    spec = task_spec(name="cartpole", num_envs=2)
    with build_collector(spec, SimSpec(workers=1), seed=0) as c:
        c.reset_all()
        c.task.set_reward_weights([0.0, 0.0, 0.0])
        c.step(torch.zeros(2, c.action_dim))
        assert float(c.reward.abs().sum()) == 0.0


def test_apply_trains_under_the_curriculum_and_plans_show_it(tmp_path: Path) -> None:
    spec = tmp_path / "cartpole.toml"
    spec.write_text((ROOT / "specs" / "cartpole.toml").read_text())
    curriculum = (
        "task.reward_curriculum={upright={weight=0.0, start_env_steps=0}, centered={weight=0.0, start_env_steps=0}}"
    )
    sets = [
        "--set", "run.total_env_steps=3200",
        "--set", "algo.warmup_env_steps=1600",
        "--set", f'run.output_dir="{tmp_path / "runs"}"',
        "--set", "run.log_every_seconds=0.5",
        "--set", curriculum,
    ]  # fmt: skip
    planned = run_unilab("plan", str(spec), *sets)
    assert planned.returncode == 0, planned.stderr
    assert "[task.reward_curriculum.upright]" in planned.stdout
    done = run_unilab("apply", str(spec), *sets, "--quiet")
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    terms = [e["episode_reward"] for e in events if e.get("episode_reward")]
    assert terms, "no episode ended in the run"
    # Every episode was scored with upright and centered at 0; the action penalty kept its weight.
    assert all(t["upright"] == 0.0 and t["centered"] == 0.0 for t in terms)
    assert any(t["action_l2"] != 0.0 for t in terms)
