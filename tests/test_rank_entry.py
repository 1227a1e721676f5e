"""`python -m unilab.rank` (the torchrun entry) checks what holds on every node, and never writes
over a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SPECS
from unilab import rank
from unilab.errors import UnilabError
from unilab.host.probe import probe_host
from unilab.plan.compile import compile_plan
from unilab.spec.load import load_spec


def _plan():  # type: ignore[no-untyped-def]
    loaded = load_spec(SPECS / "cartpole.toml")
    return compile_plan(loaded.spec, probe_host(), loaded.spec_dir)


def test_a_node_with_other_package_versions_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan()
    rank.check_node(plan, 0)  # this node is the one planned for
    facts = probe_host()
    other = facts.model_copy(update={"packages": facts.packages.model_copy(update={"torch": "0.0.1"})})
    monkeypatch.setattr("unilab.host.probe.probe_host", lambda: other)
    with pytest.raises(UnilabError, match=r"software differs from the plan's: packages\.torch") as e:
        rank.check_node(plan, 0)
    assert "unilab host --json" in e.value.fix


def test_a_node_without_the_planned_cpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank is pinned to its block of the recorded node's CPU ids: a node that lacks one of
    them is told so before anything runs, not left to fail inside sched_setaffinity."""
    plan = _plan()
    rp = plan.ranks[0]
    planned = sorted(set(rp.collector_cpu_ids) | set(rp.learner_cpu_ids))
    facts = probe_host()
    fewer = facts.model_copy(update={"cpu": facts.cpu.model_copy(update={"affinity": planned[:-1]})})
    monkeypatch.setattr("unilab.host.probe.probe_host", lambda: fewer)
    with pytest.raises(UnilabError, match=rf"CPU {planned[-1]} is not in this node's CPU set") as e:
        rank.check_node(plan, 0)
    assert "--host-facts node.json" in e.value.fix


def test_a_run_dir_that_holds_a_run_is_never_overwritten(tmp_path: Path) -> None:
    from unilab.run.rank_dir import check_run_dir_free, drop_unstarted_run_dir, make_run_dir

    plan = _plan()
    fresh = tmp_path / "out" / "run"
    check_run_dir_free(fresh)
    made = make_run_dir(plan, fresh)
    assert made == [fresh, fresh.parent] and (fresh / "plan.toml").is_file()
    (fresh / "manifest.json").write_text("{}")
    before = (fresh / "plan.toml").read_bytes()
    with pytest.raises(UnilabError, match="is in use"):
        check_run_dir_free(fresh)  # make_run_dir holds its lock (a second open conflicts, even here)
    assert (fresh / "plan.toml").read_bytes() == before
    held = tmp_path / "held"  # a finished run, not locked by anyone
    held.mkdir()
    (held / "manifest.json").write_text("{}")
    with pytest.raises(UnilabError, match="already holds a run") as e:
        check_run_dir_free(held)
    assert f"--resume {held}" in e.value.fix
    drop_unstarted_run_dir(fresh, made)  # it has a manifest: it ran, it stays
    assert (fresh / "manifest.json").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    check_run_dir_free(empty)  # an existing empty directory is fine
    assert make_run_dir(plan, empty) == []
    drop_unstarted_run_dir(empty, [])  # a run that never started leaves it as it was
    assert empty.is_dir() and list(empty.iterdir()) == []
    drop_unstarted_run_dir(fresh.parent / "other", [])


def test_an_unstarted_run_leaves_no_directory(tmp_path: Path) -> None:
    from unilab.run.rank_dir import drop_unstarted_run_dir, make_run_dir

    run = tmp_path / "runs" / "r1"
    made = make_run_dir(_plan(), run)
    drop_unstarted_run_dir(run, made)
    assert list(tmp_path.iterdir()) == []


def test_outside_torchrun_it_says_how_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert rank.main([str(SPECS / "cartpole.toml")]) == 1
    assert "runs under torchrun" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--run-dir", "--resume"])
def test_rank0_refuses_a_run_dir_another_process_is_running(
    tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 0 holds the run directory's lock as `unilab apply` does: a second torchrun given the same
    directory is refused before it reads or writes anything there."""
    import os

    from unilab.plan.render import render
    from unilab.run.run_lock import lock_run_dir

    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(render(_plan()))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    fd = lock_run_dir(run_dir)  # the running job's lock (flock: another open file conflicts)
    assert fd is not None
    try:
        assert rank.main([str(plan_file), flag, str(run_dir)]) == 1
    finally:
        os.close(fd)
    assert f"run directory {run_dir} is in use" in capsys.readouterr().err
    assert list(run_dir.iterdir()) == []


def test_a_gpu_rank_whose_gpu_is_not_on_this_node_is_refused() -> None:
    """A plan pins GPUs by UUID of the host it was compiled for; another node lacks them."""
    from tests.conftest import FIXTURES
    from unilab.host.record import read_host_facts

    loaded = load_spec(SPECS / "g1.toml", ["training.devices=[0]", 'sim.backend="mjwarp"'])
    plan = compile_plan(loaded.spec, read_host_facts(FIXTURES / "hosts" / "one_h200.json"), loaded.spec_dir)
    assert plan.ranks[0].device == "cuda"
    with pytest.raises(UnilabError, match=f"rank 0's planned GPU {plan.ranks[0].gpu_uuid} is not on this node") as e:
        rank.check_node(plan, 0)
    # A node without an NVIDIA driver (this CPU machine) is told so, not only that the GPU is absent.
    assert ("no NVIDIA driver" in e.value.summary) == bool(probe_host().nvidia.nvml_error)
    assert "--nnodes 1" in e.value.fix


def test_a_launch_with_another_world_size_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from unilab.plan.render import render

    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(render(_plan()))  # one rank
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert rank.main([str(plan_file), "--run-dir", str(tmp_path / "run")]) == 1
    assert "the plan has 1 rank, the launcher started 3" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
