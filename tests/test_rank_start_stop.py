"""A stop request that arrives while a rank's collector starts ends the run before anything ran:
no manifest, so `unilab apply` keeps no run directory (as for a stop a moment earlier)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.conftest import ROOT
from unilab.errors import EXIT_INTERRUPTED
from unilab.host.probe import probe_host
from unilab.plan.compile import compile_plan
from unilab.plan.render import render
from unilab.run.rank_run import RankJob, run_rank
from unilab.spec.load import load_spec
from unilab.stop import StopFlag


@pytest.mark.slow
def test_a_stop_during_the_collector_start_records_nothing(tmp_path: Path) -> None:
    loaded = load_spec(ROOT / "specs" / "cartpole.toml")
    plan = compile_plan(loaded.spec, probe_host(), loaded.spec_dir)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plan.toml").write_text(render(plan))
    stop = StopFlag()
    stop.signal = signal.SIGTERM  # arrived after the stop handler was installed, before the collector said hello
    cpus = os.sched_getaffinity(0)
    try:
        code = run_rank(RankJob(plan, 0, run_dir, progress=False), stop)
    finally:
        os.sched_setaffinity(0, cpus)  # the rank pins its learner (this process) to the plan's CPUs
    assert code == EXIT_INTERRUPTED
    assert not (run_dir / "manifest.json").exists()
    assert not any((run_dir / "checkpoints").glob("*"))
