"""The terminal lines of `unilab apply`: the layout notes and the progress line."""

from __future__ import annotations

import io

import pytest

from unilab.records.progress import ProgressLine, cpu_ranges


@pytest.mark.parametrize(
    ("ids", "text"),
    [([0], "0"), ([1, 0], "0-1"), ([0, 1, 2, 5, 7, 8], "0-2,5,7-8"), ([], "-")],
)
def test_cpu_sets_print_as_ranges(ids: list[int], text: str) -> None:
    assert cpu_ranges(ids) == text


def test_progress_writes_one_line_per_update_off_a_terminal() -> None:
    out = io.StringIO()
    line = ProgressLine(1000, stream=out)
    line.note("rank 0 (cpu): learner on CPUs 0, collector on CPUs 1 with 1 physics worker")
    line.update(500, 250.0, 10.0, 1.5, 2.0)
    line.update(1000, 250.0, 10.0, None, 4.0)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("rank 0 (cpu): learner on CPUs 0")
    assert "50.0%" in lines[1] and "ETA 00:02" in lines[1] and "return     1.50" in lines[1]
    assert "100.0%" in lines[2] and "return       --" in lines[2]


def test_quiet_progress_writes_nothing() -> None:
    out = io.StringIO()
    line = ProgressLine(10, stream=out, enabled=False)
    line.note("x")
    line.update(5, 1.0, 1.0, None, 1.0)
    line.close()
    assert out.getvalue() == ""


def test_an_interval_without_finished_episodes_repeats_no_episode_figures(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The mean return is over the episodes that ended since the last record: an interval in which
    none ended gets no episode figures, not the previous interval's again as a new point."""
    import json
    from types import SimpleNamespace

    from tests.conftest import ROOT, host
    from unilab.plan.compile import compile_plan
    from unilab.records.events import EventLog
    from unilab.records.recorder import RunRecorder
    from unilab.spec.load import load_spec

    loaded = load_spec(ROOT / "specs" / "cartpole.toml")
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    out = io.StringIO()
    events = EventLog(tmp_path / "events.jsonl", run_id="r", rank=0)
    rec = RunRecorder(plan, host("cpu_laptop"), tmp_path, events, None, ProgressLine(1000, stream=out))
    metrics = {"elapsed_s": 1.0, "env_steps_run": 100.0, "updates_run": 10.0}
    for steps, episodes in ((100, 4), (200, 4), (300, 7)):
        prog = SimpleNamespace(
            env_steps=steps,
            updates=10,
            episodes=episodes,
            last_return=1.5,
            last_length=20.0,
            last_terminated_fraction=0.5,
            last_reward_terms={"upright": 1.5},
            physics_warnings={},
            last_health={},
            health_env_steps=0.0,
        )
        rec.on_log(prog, metrics)
    events.close()
    its = [json.loads(ln) for ln in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["episode_return"] for e in its] == [1.5, None, 1.5]
    assert its[1]["episode_reward"] == {} and its[1]["episode_length"] is None
    lines = out.getvalue().splitlines()
    assert "return     1.50" in lines[0] and "return       --" in lines[1]


def test_the_run_summary_averages_enough_episodes_to_stand_for_the_policy() -> None:
    """A run's last log interval may hold one early fall; the summary's mean reaches back over the
    newest intervals until it holds at least the episodes asked for."""
    from unilab.collect.collector_client import CollectorStats
    from unilab.records.progress import Progress

    prog = Progress()
    assert prog.recent_episodes(100) is None
    prog.fold(CollectorStats(episodes=60, return_sum=60 * 150.0, length_sum=60 * 1000.0))
    prog.fold(CollectorStats(episodes=120, return_sum=120 * 150.0, length_sum=120 * 1000.0))
    prog.fold(CollectorStats(episodes=121, return_sum=120 * 150.0 + 35.0, length_sum=120 * 1000.0 + 254.0))
    assert prog.last_return == pytest.approx(35.0)  # the interval's own figure, as the events log it
    n, ret, length = prog.recent_episodes(100)  # type: ignore[misc]
    assert n == 121  # the newest intervals back to the one that reaches 100
    assert ret == pytest.approx((120 * 150.0 + 35.0) / 121) and length == pytest.approx((120_000 + 254) / 121)
    assert prog.recent_episodes(50)[0] == 61  # type: ignore[index]
    assert prog.recent_episodes(1)[0] == 1  # type: ignore[index]
