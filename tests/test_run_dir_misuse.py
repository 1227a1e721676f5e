"""A run directory damaged or left half-made, met by each command that reads one: every refusal
names what is wrong with the run, in the command's own terms, and changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_unilab


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("finished")
    shutil.copytree(ROOT / "specs", cwd / "specs")
    r = run_unilab("apply", "specs/cartpole.toml", "--smoke", "--quiet", cwd=cwd)
    assert r.returncode == 0, r.stderr[-2000:]
    (run_dir,) = (cwd / "runs").iterdir()
    return run_dir


def _copy(finished: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    return run


@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_corrupt_checkpoint_read_by_eval_or_export_points_at_another_checkpoint(
    finished: Path, tmp_path: Path, command: str
) -> None:
    run = _copy(finished, tmp_path)
    ckpt = sorted((run / "checkpoints").glob("*.pt"))[-1]
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    r = run_unilab(command, str(run), cwd=tmp_path)
    assert r.returncode == 1 and "is corrupt or unreadable" in r.stderr
    fix = r.stderr.splitlines()[-1]
    assert "--checkpoint NAME" in fix and "resume" not in fix, fix


@pytest.mark.parametrize("content", ["", "garbage = [", 'schema_version = 1\n[run]\nname = "x"\n'])
def test_a_resume_whose_plan_was_emptied_or_replaced_names_the_runs_plan(
    finished: Path, tmp_path: Path, content: str
) -> None:
    run = _copy(finished, tmp_path)
    (run / "plan.toml").write_text(content)
    r = run_unilab("apply", "--resume", str(run), "--set", "run.total_env_steps=9000", cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert f"{run}/plan.toml is not the plan `unilab apply` wrote for run {run}" in r.stderr
    assert "schema_version" not in r.stderr and "spec format" not in r.stderr
    assert (run / "plan.toml").read_text() == content


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_a_resume_without_the_runs_manifest_is_refused_not_started_afresh(
    finished: Path, tmp_path: Path, damage: str
) -> None:
    run = _copy(finished, tmp_path)
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "manifest.json"}
    if damage == "deleted":
        (run / "manifest.json").unlink()
    else:
        (run / "manifest.json").write_text("")
    r = run_unilab("apply", "--resume", str(run), "--set", "run.total_env_steps=9000", cwd=tmp_path)
    assert r.returncode == 1
    assert "manifest.json is" in r.stderr and "record of its sessions and checkpoint digests is gone" in r.stderr
    assert f'run.init_from="{run}"' in r.stderr
    after = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert after == before


@pytest.mark.parametrize(
    "command", [["manifest", "validate"], ["eval"], ["export"], ["apply", "--resume"]], ids=lambda c: c[0]
)
def test_a_run_that_stopped_before_it_started_is_named_so(finished: Path, tmp_path: Path, command: list[str]) -> None:
    run = tmp_path / "unstarted"
    run.mkdir()
    shutil.copy(finished / "plan.toml", run / "plan.toml")
    (run / "events.jsonl").write_text('{"event": "run_not_started"}\n')
    r = run_unilab(*command, str(run), cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert f"{run} is a run that stopped before it started" in r.stderr
    assert f"fix: start it again with its plan: unilab apply {run}/plan.toml" in r.stderr
    assert sorted(p.name for p in run.iterdir()) == ["events.jsonl", "plan.toml"]


def test_a_run_that_updated_nothing_says_why() -> None:
    """A run whose transitions never reached the replay (every world's physics diverging) ends at its
    budget with no update: the summary names the cause instead of reporting a success alone."""
    from types import SimpleNamespace

    from unilab.run.rank_run import _why_no_updates

    def manifest(**counters: int) -> SimpleNamespace:
        base = {"updates": 0, "env_steps": 6400, "transitions_produced": 6400, "transitions_stored": 6400}
        return SimpleNamespace(
            status="succeeded", counters=SimpleNamespace(**{**base, "nonfinite_resets": 0, **counters})
        )

    diverged = _why_no_updates(manifest(transitions_stored=0, nonfinite_resets=6400))
    assert diverged is not None and "6,400 of its 6,400 transitions were not stored" in diverged
    assert "physics diverged" in diverged
    assert _why_no_updates(manifest(updates=3)) is None
    assert _why_no_updates(manifest(env_steps=0)) is None
    assert "never updated" in (_why_no_updates(manifest()) or "")
