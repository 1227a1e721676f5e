"""Saved plans as files a user moves around: told apart from specs, their input files (robot MJCF,
motion) found from the directory the plan was made in and refused when changed since."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_cli import assert_clean_error, unilab
from unilab.digests import file_sha256
from unilab.plan.render import is_plan_file
from unilab.robot.inspect import builtin_mjcf_path, mjcf_digest, mjcf_matches
from unilab.tasks.motion_file import BUILTIN_DIR

SPEC = """\
# A spec that is not a plan, though this comment mentions plan_id = "x".
schema_version = 1
[run]
name = "track"
total_env_steps = 256
output_dir = "runs"
[task]
name = "g1_motion_tracking"
num_envs = 4
motion = "clip.npz"
[sim]
backend = "mujoco"
workers = 1
[algo]
name = "sac"
batch_size = 32
hidden_dims = [32]
warmup_env_steps = 64
[training]
devices = "cpu"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A spec in a subdirectory with its motion next to it, planned from the project root."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "track.toml").write_text(SPEC)
    shutil.copy(BUILTIN_DIR / "g1_squat.npz", tmp_path / "sub" / "clip.npz")
    r = unilab("plan", "sub/track.toml", "--out", "sub/track.plan.toml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path


def test_a_comment_mentioning_plan_id_does_not_make_a_spec_a_plan(project: Path) -> None:
    assert not is_plan_file(project / "sub" / "track.toml")
    assert is_plan_file(project / "sub" / "track.plan.toml")
    r = unilab("plan", "sub/track.toml", "--format", "json", "--out", "p.json", cwd=project)
    assert r.returncode == 0, r.stderr
    assert is_plan_file(project / "p.json")


def test_a_saved_plan_runs_the_motion_it_names_from_the_directory_it_was_made_in(project: Path) -> None:
    plan_text = (project / "sub" / "track.plan.toml").read_text()
    assert 'source = "sub/clip.npz"' in plan_text  # relative to where `unilab plan` ran
    r = unilab("apply", "sub/track.plan.toml", "--quiet", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = (project / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "succeeded"


def test_a_saved_plan_whose_motion_changed_is_refused_before_any_run_directory(project: Path) -> None:
    clip = project / "sub" / "clip.npz"
    clip.write_bytes(clip.read_bytes() + b"\0")  # any change to the bytes the plan digested
    r = unilab("apply", "sub/track.plan.toml", cwd=project)
    assert_clean_error(r)
    assert "task.motion: sub/clip.npz changed since the plan was made" in r.stderr
    assert "unilab plan SPEC" in r.stderr
    assert not (project / "runs").exists()


def test_a_saved_plan_applied_from_another_directory_names_where_paths_are_taken(project: Path) -> None:
    r = unilab("apply", str(project / "sub" / "track.plan.toml"), cwd=project / "sub")
    assert_clean_error(r)
    assert "task.motion: the plan's file sub/clip.npz cannot be read from" in r.stderr
    assert "working directory it was made in" in r.stderr
    assert not (project / "sub" / "runs").exists()


def _robot_in_two_files(project: Path) -> Path:
    """A Menagerie-style scene.xml that includes the robot's own file."""
    robot = project / "sub" / "robot"
    robot.mkdir()
    shutil.copy(builtin_mjcf_path(), robot / "g1.xml")
    (robot / "scene.xml").write_text('<mujoco model="scene">\n  <include file="g1.xml"/>\n</mujoco>\n')
    return robot


def test_an_mjcf_digest_covers_its_includes(project: Path) -> None:
    robot = _robot_in_two_files(project)
    one_file = mjcf_digest(robot / "g1.xml")
    assert one_file == file_sha256(robot / "g1.xml")  # a one-file model: the file's digest, as before
    before = mjcf_digest(robot / "scene.xml")
    assert before != file_sha256(robot / "scene.xml")
    text = (robot / "g1.xml").read_text()
    (robot / "g1.xml").write_text(text.replace("<mujoco", "<!-- edited -->\n<mujoco", 1))
    assert mjcf_digest(robot / "scene.xml") != before and not mjcf_matches(robot / "scene.xml", before)
    # A plan made before includes were digested recorded the main file's sha256: it still holds.
    assert mjcf_matches(robot / "scene.xml", file_sha256(robot / "scene.xml"))


def test_a_saved_plan_whose_included_robot_file_changed_is_refused(project: Path) -> None:
    robot = _robot_in_two_files(project)
    r = unilab(
        "plan", "sub/track.toml", "--set", 'task.robot_mjcf="robot/scene.xml"', "--out", "robot.plan.toml", cwd=project
    )
    assert r.returncode == 0, r.stderr
    (robot / "g1.xml").write_text((robot / "g1.xml").read_text() + "\n<!-- an edit after planning -->\n")
    r = unilab("apply", "robot.plan.toml", cwd=project)
    assert_clean_error(r)
    assert "task.robot_mjcf: sub/robot/scene.xml changed since the plan was made" in r.stderr
    assert "its includes or its meshes" in r.stderr
    assert not (project / "runs").exists()


def test_a_resume_from_another_directory_names_the_directory_the_run_was_applied_in(project: Path) -> None:
    r = unilab("apply", "sub/track.plan.toml", "--quiet", cwd=project)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (project / "runs").iterdir()
    r = unilab("apply", "--resume", str(run_dir), cwd=project / "sub")
    assert_clean_error(r)
    assert "cannot be read from" in r.stderr
    assert f"cd {project} && unilab apply --resume {run_dir}" in r.stderr
    assert "re-plan" not in r.stderr  # a new plan could not resume this run


def test_export_from_elsewhere_finds_the_robot_files_where_the_run_was_applied(project: Path) -> None:
    """A user MJCF's joint names, pose and action scale reach the ONNX file whatever directory
    `unilab export` runs in: the manifest says where the plan's relative paths were resolved."""
    pytest.importorskip("onnx")
    _robot_in_two_files(project)
    r = unilab("apply", "sub/track.toml", "--set", 'task.robot_mjcf="robot/scene.xml"', "--quiet", cwd=project)
    assert r.returncode == 0, r.stderr
    (run_dir,) = (project / "runs").iterdir()
    r = unilab("export", str(run_dir), "--out", str(project / "p.onnx"), cwd=project / "sub")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(project / "p.onnx")).metadata_props}
    assert "unilab.joints" not in meta and len(json.loads(meta["unilab.joint_names"])) == 29
    # With the robot files changed since the run, the constants are left out, and export says so.
    g1 = project / "sub" / "robot" / "g1.xml"
    g1.write_text(g1.read_text() + "\n<!-- edited -->\n")
    r = unilab("export", str(run_dir), "--out", str(project / "q.onnx"), cwd=project)
    assert r.returncode == 0 and "warning: " in r.stderr and "lacks the joint names" in r.stderr, r.stderr


def test_a_tilde_in_run_output_dir_is_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run.output_dir = "~/runs"` used to make a directory literally named `~` in the working directory."""
    from tests.conftest import ROOT, host
    from unilab.plan.compile import compile_plan
    from unilab.run.run_dir import new_run_dir
    from unilab.spec.load import load_spec

    monkeypatch.setenv("HOME", str(tmp_path))
    loaded = load_spec(ROOT / "specs" / "cartpole.toml", ['run.output_dir="~/rv"'])
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    assert new_run_dir(plan).parent == tmp_path / "rv"


def test_a_single_rank_gpu_run_pins_its_planned_gpu_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank sees only its planned GPU (by UUID), as cuda:0, from before anything initialises
    CUDA: a one-rank run used to take whichever GPU was cuda:0."""
    import unilab.run.rank_run
    from tests.conftest import ROOT, host
    from unilab.plan.compile import compile_plan
    from unilab.run.apply import ApplyRequest, run_apply
    from unilab.spec.load import load_spec

    facts = host("node_8gpu_mps")
    loaded = load_spec(ROOT / "specs" / "g1.toml", ["training.devices=[3]", f'run.output_dir="{tmp_path}"'])
    plan = compile_plan(loaded.spec, facts, loaded.spec_dir)
    seen: list[str | None] = []

    def run_rank(job: object, stop: object) -> int:
        import os

        seen.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return 0

    monkeypatch.setattr(unilab.run.rank_run, "run_rank", run_rank)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # restored after the test
    import signal

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert run_apply(ApplyRequest(plan=plan, progress=False)).code == 0
    assert seen == [facts.nvidia.gpus[3].uuid]
    # A caller that goes on (a test, a notebook) gets its stop-signal handlers back, not SIG_IGN.
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.parametrize(
    ("forge", "says"),
    [
        (lambda d: d.update(ranks=[]), "ranks must be numbered 0..0"),
        (lambda d: d["ranks"][0].update(collector_cpu_ids=[1_000_000]), "outside the host's CPU affinity"),
    ],
)
def test_a_hand_made_plan_with_a_recomputed_id_still_cannot_run_impossible_ranks(
    tmp_path: Path, forge, says: str
) -> None:
    """The plan_id only proves a plan was not edited by accident; what compile guarantees about its
    ranks is checked again on reading, so apply never meets a plan it cannot run."""
    import hashlib

    r = unilab("plan", str(ROOT / "specs" / "cartpole.toml"), "--format", "json")
    data = json.loads(r.stdout)
    forge(data)
    body = {k: v for k, v in data.items() if k != "plan_id"}
    data["plan_id"] = (
        "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    )
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(data))
    r = unilab("apply", str(path), "--quiet", cwd=tmp_path)
    assert_clean_error(r)
    assert says in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


def test_a_saved_plan_with_a_home_path_reads_on_a_host_without_that_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~alice/runs` was checked where the plan was made; reading the plan elsewhere (re-render,
    diff, export, manifest validate) does not ask this host about alice."""
    import os

    from unilab.plan.render import load_plan

    out = tmp_path / "p.toml"
    r = unilab("plan", str(ROOT / "specs" / "cartpole.toml"), "--set", 'run.output_dir="~/runs"', "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert 'output_dir = "~/runs"' in text
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)  # a host that resolves no home directory
    assert load_plan(out).run.output_dir == "~/runs"
