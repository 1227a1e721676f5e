"""A manifest's fields agree with each other: the checks `unilab manifest validate` adds to the schema."""

from __future__ import annotations

from pathlib import Path

from unilab.manifest.consistency import check_fields, check_manifest
from unilab.manifest.models import (
    ApplySession,
    BackendDiagnostics,
    CheckpointRecord,
    Counters,
    FirstError,
    GraphEvidence,
    Manifest,
    Metrics,
    Provenance,
    RankEvidence,
    SharingEvidence,
    Timing,
    Topology,
)

SHA = "sha256:" + "a" * 64


def manifest(**kw: object) -> Manifest:
    off = GraphEvidence(requested="off", enabled=False, disable_reason="off")
    base: dict[str, object] = dict(
        run_id="r",
        plan_id=SHA,
        spec_digest=SHA,
        task="cartpole",
        algo="sac",
        status="succeeded",
        started_at="2026-11-29T10:00:00Z",
        updated_at="2026-11-29T10:05:00Z",
        finished_at="2026-11-29T10:05:00Z",
        provenance=Provenance.model_construct(),
        topology=Topology(world_size=1, process_group_backend="gloo", launcher="inline"),
        backend=BackendDiagnostics(physics="mujoco", physics_graph=off, learner_graph=off),
        cuda_process_sharing=SharingEvidence(configured="none", effective="none"),
        counters=Counters(env_steps=1000),
        ranks=[RankEvidence.model_construct(rank=0)],
    )
    base.update(kw)
    return Manifest.model_construct(**base)


def _session(ended: str) -> ApplySession:
    return ApplySession(started_at="2026-11-29T10:00:00Z", plan_id=SHA, ended=ended)  # type: ignore[arg-type]


def test_a_coherent_manifest_has_no_problem() -> None:
    assert check_fields(manifest()) == []
    assert check_fields(manifest(sessions=[_session("killed"), _session("interrupted"), _session("succeeded")])) == []


def test_each_contradiction_is_named() -> None:
    err = FirstError(where="rank0.collector", message="boom")
    cases = {
        "first_error is missing": manifest(status="failed"),
        "but first_error is set": manifest(first_error=err),
        "running but finished_at is set": manifest(status="running"),
        "finished_at is missing": manifest(status="interrupted", finished_at=None),
        "updated_at 2026-11-29T09:00:00Z is before": manifest(updated_at="2026-11-29T09:00:00Z"),
        "dropped 3 transitions": manifest(counters=Counters(env_steps=1000, dropped_transitions=3)),
        "train_s 20.0 exceeds the session's wall_s 10.0": manifest(timing=Timing(wall_s=10.0, train_s=20.0)),
        "not increasing": manifest(
            checkpoints=[
                CheckpointRecord(path="checkpoints/b", env_steps=500, sha256="0" * 64),
                CheckpointRecord(path="checkpoints/a", env_steps=400, sha256="0" * 64),
            ]
        ),
        "a time stamp is not a valid date and time": manifest(started_at="2026-13-45T99:99:99Z"),
        "past counters.env_steps": manifest(
            checkpoints=[CheckpointRecord(path="checkpoints/a", env_steps=2000, sha256="0" * 64)]
        ),
        "ranks [] are not the 1 rank(s)": manifest(ranks=[]),
        "ranks [0, 0] are not the 1 rank(s)": manifest(
            ranks=[RankEvidence.model_construct(rank=0), RankEvidence.model_construct(rank=0)]
        ),
        "timing.wall_s is nan (not a finite number)": manifest(timing=Timing(wall_s=float("nan"))),
        "metrics.episode_return_mean is inf": manifest(metrics=Metrics(episode_return_mean=float("inf"))),
        "the last session ended running but status is succeeded": manifest(sessions=[_session("running")]),
        "session 0 still says running": manifest(sessions=[_session("running"), _session("succeeded")]),
    }
    for says, m in cases.items():
        problems = check_fields(m)
        assert len(problems) == 1 and says in problems[0], (says, problems)
    # A run that failed before its ranks' evidence was gathered records none, and says why.
    assert check_fields(manifest(ranks=[], status="failed", first_error=err)) == []


def test_a_checkpoint_path_outside_the_run_dir_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "secret").write_bytes(b"x")
    (run / "checkpoints").mkdir()
    m = manifest(checkpoints=[CheckpointRecord(path="../secret", env_steps=10, sha256="0" * 64)])
    report = check_manifest(m, run / "manifest.json")
    assert "checkpoint ../secret is outside the run directory" in report.problems


def _run_dir_with_plan(tmp_path: Path) -> tuple[Path, str]:
    from tests.conftest import SPECS, host
    from unilab.plan.compile import compile_plan
    from unilab.plan.render import render
    from unilab.spec.load import load_spec

    loaded = load_spec(SPECS / "cartpole.toml")
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    run = tmp_path / "run"
    run.mkdir()
    (run / "plan.toml").write_text(render(plan))
    return run, plan.plan_id


def test_the_run_directorys_plan_is_the_one_that_ran(tmp_path: Path) -> None:
    """plan.toml must be there, be the manifest's plan, and still hash to its own plan_id (a body
    edited after the run is not the plan that ran, even with its id line intact)."""
    run, plan_id = _run_dir_with_plan(tmp_path)
    m = manifest(plan_id=plan_id)
    report = check_manifest(m, run / "manifest.json")
    assert report.problems == [] and report.plan_checked
    text = (run / "plan.toml").read_text()
    (run / "plan.toml").write_text(text.replace("num_envs = 16", "num_envs = 8", 1))
    assert any("was edited" in p for p in check_manifest(m, run / "manifest.json").problems)
    # Another unilab's plan (fields this one may hash differently) is compared by its plan_id only.
    older = text.replace('unilab_version = "', 'unilab_version = "0.0.1-was-', 1)
    assert older != text
    (run / "plan.toml").write_text(older)
    report = check_manifest(m, run / "manifest.json")
    assert report.problems == [] and report.plan_checked
    (run / "plan.toml").unlink()
    (run / "events.jsonl").write_text("")
    assert any("plan.toml is missing" in p for p in check_manifest(m, run / "manifest.json").problems)


def test_a_manifest_copied_out_alone_is_checked_by_its_fields_only(tmp_path: Path) -> None:
    report = check_manifest(manifest(), tmp_path / "manifest.json")
    assert report.problems == [] and not report.run_dir_checked
