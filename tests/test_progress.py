"""The terminal lines of `unilab apply`: the layout notes and the progress line."""

from __future__ import annotations

import io

import pytest

from unilab.run.progress import ProgressLine, cpu_ranges


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
