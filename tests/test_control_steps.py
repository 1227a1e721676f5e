"""Control-step arithmetic: the plan and the runtime task compute the time limit and the push period
with the same functions (unilab.tasks.timing), so they agree; a push interval is never rounded."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, host, spec_data
from unilab.errors import UnilabError
from unilab.plan.compile import compile_plan
from unilab.spec.load import validate_spec_data
from unilab.tasks.timing import (
    control_dt,
    max_episode_steps,
    nearest_whole_step_seconds,
    whole_steps,
)


def test_whole_steps_absorbs_float_noise_only() -> None:
    dt = control_dt(0.003, 10)
    assert 0.9 / dt > 30  # 30.000000000000004: a plain ceil gives 31
    assert whole_steps(0.9, dt) == 30
    assert whole_steps(0.06, 0.02) == 3
    assert whole_steps(0.03, 0.02) is None
    assert whole_steps(0.01, 0.02) is None  # less than one step
    assert whole_steps(0.9 * (1 + 1e-6), dt) is None


def test_max_episode_steps_rounds_up_and_is_at_least_one() -> None:
    assert max_episode_steps(0.9, control_dt(0.003, 10)) == 30
    assert max_episode_steps(20.0, 0.02) == 1000
    assert max_episode_steps(0.91, 0.02) == 46
    assert max_episode_steps(1e-6, 0.02) == 1


def test_nearest_whole_step_seconds_are_whole_steps() -> None:
    assert nearest_whole_step_seconds(0.03, 0.02) == ["0.02", "0.04"]
    assert nearest_whole_step_seconds(0.01, 0.02) == ["0.02"]
    dt = control_dt(0.003, 10)
    assert nearest_whole_step_seconds(0.1, dt) == ["0.09", "0.12"]
    for v in nearest_whole_step_seconds(0.1, dt):
        assert whole_steps(float(v), dt) is not None


@pytest.mark.parametrize("task", ["cartpole", "g1_walk"])
def test_plan_and_task_agree_on_max_episode_steps(task: str) -> None:
    from unilab.collect.build import build_collector

    dotted = {"task__name": task, "task__num_envs": 1, "task__episode_length_s": 0.9}
    spec = validate_spec_data(spec_data(**dotted, sim__timestep=0.003, sim__decimation=10), "t")
    plan = compile_plan(spec, host("cpu_laptop"), ROOT / "specs")
    assert plan.task.max_episode_steps == 30
    collector = build_collector(spec.task, spec.sim, spec_dir=ROOT / "specs", workers=1)
    try:
        assert collector.task.max_episode_steps == plan.task.max_episode_steps
    finally:
        collector.close()


def test_push_period_is_the_exact_number_of_steps() -> None:
    from unilab.collect.build import build_collector

    dotted = {"task__num_envs": 1, "task__push_interval_s": 0.09}
    spec = validate_spec_data(spec_data(**dotted, sim__timestep=0.003, sim__decimation=10), "t")
    compile_plan(spec, host("cpu_laptop"), ROOT / "specs")  # task.push-interval passes
    collector = build_collector(spec.task, spec.sim, spec_dir=ROOT / "specs", workers=1)
    try:
        (push,) = [e for e in collector.task.events if e.name == "push_robot"]
        assert push.period_steps == 3
    finally:
        collector.close()


def test_task_refuses_a_push_interval_that_is_not_whole_steps() -> None:
    from unilab.collect.build import build_collector
    from unilab.spec.models import SimSpec, task_spec

    # Built without a plan (the plan refuses it first, rule task.push-interval): 0.03 s is 1.5 steps
    # of 0.02 s; it used to run silently as 0.04 s.
    with pytest.raises(UnilabError) as e:
        build_collector(task_spec(name="g1_walk", num_envs=1, push_interval_s=0.03), SimSpec(), workers=1)
    assert "not a whole number of 0.02 s control steps" in e.value.summary
    assert e.value.fix == "set task.push_interval_s = 0.02 or 0.04"
