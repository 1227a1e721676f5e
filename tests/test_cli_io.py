"""The command line against hostile files and streams: unreadable, binary, deeply nested or
misplaced inputs and outputs get one clear paragraph and exit 1 (never a traceback, never
"internal error"), and no user file is overwritten."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT, SPECS
from tests.test_cli import HOST, assert_clean_error, unilab

CARTPOLE = str(SPECS / "cartpole.toml")


def _no_dac_prefix() -> list[str]:
    """Root ignores file modes; drop the capabilities that let it (chmod 000 then bites)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def unilab_unprivileged(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "UNILAB_DEBUG"}
    return subprocess.run(
        [*_no_dac_prefix(), sys.executable, "-m", "unilab", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=e,
        timeout=120,
    )


@contextmanager
def mode(path: Path, bits: int) -> Iterator[None]:
    before = path.stat().st_mode & 0o7777
    path.chmod(bits)
    try:
        yield
    finally:
        path.chmod(before)


def assert_io_error(r: subprocess.CompletedProcess[str], *names: str) -> None:
    assert_clean_error(r)
    assert "internal error" not in r.stderr and "This is a bug" not in r.stderr, r.stderr
    assert "fix:" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3, r.stderr
    for n in names:
        assert n in r.stderr, r.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    r = unilab(
        "apply",
        CARTPOLE,
        "--quiet",
        "--set",
        "run.total_env_steps=2400",  # past the 2,000-step warm-up: a few updates
        "--set",
        f'run.output_dir="{out}"',
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (found,) = [p for p in out.iterdir() if p.is_dir()]
    assert list((found / "checkpoints").glob("ckpt-*.pt"))
    return found


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / run_dir.name
    shutil.copytree(run_dir, dst)
    return dst


@pytest.fixture
def saved_plan(tmp_path: Path) -> Path:
    p = tmp_path / "saved.plan.toml"
    assert unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(p)).returncode == 0
    return p


# 1. unreadable, binary, nested inputs; unusable outputs and stdout


@pytest.mark.parametrize("cmd", ["plan", "apply", "diff"])
def test_unreadable_spec_or_plan(tmp_path: Path, saved_plan: Path, cmd: str) -> None:
    spec = tmp_path / "spec.toml"
    shutil.copy(CARTPOLE, spec)
    for target in (spec, saved_plan):
        args = [cmd, str(target)] + ([CARTPOLE] if cmd == "diff" else [])
        with mode(target, 0):
            r = unilab_unprivileged(*args)
        assert_io_error(r, str(target))
        assert "Permission denied" in r.stderr
        # A file that cannot be opened is not known to be a spec: it is not called one.
        assert "spec file" not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["export", "eval"])
def test_unreadable_run_dir_export(tmp_path: Path, run_dir: Path, cmd: str) -> None:
    run = copy_run(run_dir, tmp_path)
    with mode(run, 0):
        r = unilab_unprivileged(cmd, str(run))
    assert_io_error(r, str(run), "Permission denied")


@pytest.mark.parametrize("cmd", ["export", "eval"])
def test_export_of_a_file_names_the_run_directory(tmp_path: Path, run_dir: Path, cmd: str) -> None:
    """A file of a run (its manifest, a checkpoint) is not a run directory; the fix names the one it is in."""
    run = copy_run(run_dir, tmp_path)
    tb = next((run / "tensorboard").rglob("events.out.tfevents.*"))
    for f in (run / "manifest.json", sorted((run / "checkpoints").glob("*.pt"))[-1], tb):
        r = unilab(cmd, str(f))
        assert_io_error(r, f"{f} is a file")
        assert f"fix: unilab {cmd} {run}" in r.stderr, r.stderr


def test_apply_without_target(tmp_path: Path) -> None:
    r = unilab("apply")
    assert_io_error(r, "apply needs a SPEC or a saved PLAN")
    r = unilab("apply", "--resume", str(tmp_path))
    assert_io_error(r, f"{tmp_path} is not a unilab run directory (no plan.toml)")
    assert not list(tmp_path.iterdir())


def test_resume_never_replans(tmp_path: Path) -> None:
    """A run resumes with its own plan: --set cannot change it (its budget aside), and a plan made
    for other host facts is refused with a fix that does not send the user to re-plan (a new plan id)."""
    run = tmp_path / "run"
    run.mkdir()
    other = str(ROOT / "tests" / "fixtures" / "hosts" / "one_h200.json")  # not this machine's facts
    assert unilab("plan", CARTPOLE, "--host-facts", other, "--out", str(run / "plan.toml")).returncode == 0
    r = unilab("apply", "--resume", str(run), "--set", "task.num_envs=8")
    assert_io_error(r, "--set task.num_envs with --resume: a resumed run keeps its plan; only its budget may grow")
    assert "[resume.budget-only] task.num_envs: " in r.stderr
    r = unilab("apply", "--resume", str(run), "--set", "run.total_env_steps=9000000")
    assert_io_error(r, f"run {run} was planned for other host facts: ")
    assert "--replan --set run.total_env_steps=9000000" in r.stderr
    r = unilab("apply", "--resume", str(run))
    assert_io_error(r, f"run {run} was planned for other host facts: ")
    assert "re-plan" not in r.stderr and "start a new run: unilab apply SPEC" in r.stderr
    assert sorted(p.name for p in run.iterdir()) == ["plan.toml"]


def test_manifest_validate_directory_without_manifest(tmp_path: Path) -> None:
    r = unilab("manifest", "validate", str(tmp_path))
    assert_io_error(r, f"{tmp_path} is a directory without manifest.json")


@pytest.mark.parametrize("cmd", ["plan", "apply", "diff"])
def test_binary_plan_file(tmp_path: Path, cmd: str) -> None:
    p = tmp_path / "bin.plan.toml"
    p.write_bytes(b'plan_id = "x"\n' + bytes(range(128, 256)) * 3)
    r = unilab(cmd, str(p), *([CARTPOLE] if cmd == "diff" else []))
    assert_io_error(r, str(p), "not UTF-8")


@pytest.mark.parametrize("cmd", ["export", "eval"])
def test_binary_plan_in_run_dir_export(tmp_path: Path, run_dir: Path, cmd: str) -> None:
    run = copy_run(run_dir, tmp_path)
    (run / "plan.toml").write_bytes(b'plan_id = "x"\n' + bytes(range(128, 256)))
    r = unilab(cmd, str(run))
    assert_io_error(r, str(run / "plan.toml"))


def test_deeply_nested_spec(tmp_path: Path) -> None:
    p = tmp_path / "deep.toml"
    p.write_text("schema_version = 1\nx = " + "[" * 2000 + "]" * 2000 + "\n")
    r = unilab("plan", str(p))
    assert_io_error(r, str(p), "nested too deeply")


def test_schema_out_unusable(tmp_path: Path) -> None:
    f = tmp_path / "file.txt"
    f.write_text("keep me")
    r = unilab("schema", "--out", str(f))
    assert_io_error(r, str(f), "is not a directory")
    assert f.read_text() == "keep me"
    assert_io_error(unilab("schema", "--out", "/proc/unilab-schemas"), "/proc/unilab-schemas")
    ro = tmp_path / "ro"
    ro.mkdir()
    with mode(ro, 0o555):
        r = unilab_unprivileged("schema", "--out", str(ro))
    assert_io_error(r, str(ro), "Permission denied")
    assert not list(ro.iterdir())


def test_schema_check_binary_file_differs(tmp_path: Path) -> None:
    assert unilab("schema", "--out", str(tmp_path)).returncode == 0
    (tmp_path / "plan.v1.json").write_bytes(bytes(range(128, 256)))
    r = unilab("schema", "--check", "--out", str(tmp_path))
    assert_io_error(r, "plan.v1.json", "differ")


def test_profile_out_exists(tmp_path: Path) -> None:
    f = tmp_path / "f.txt"
    f.write_text("keep me")
    for out in (tmp_path, f):
        r = unilab("profile", CARTPOLE, "--out", str(out))
        assert_io_error(r, str(out), "already exists")
    assert f.read_text() == "keep me"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [["host"], ["rules"], ["plan", CARTPOLE, "--host-facts", HOST]])
def test_full_stdout_is_one_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "unilab", *args], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert r.returncode == 1
    assert r.stderr.strip() == "error: cannot write to standard output: No space left on device", r.stderr


def test_broken_pipe_is_quiet() -> None:
    p = subprocess.Popen(
        [sys.executable, "-m", "unilab", "rules", "--markdown"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    rc = p.wait(timeout=60)
    err = p.stderr.read().decode()
    assert "Traceback" not in err and "Exception ignored" not in err and "internal error" not in err, err
    assert rc in (0, 1)


def test_a_plan_to_a_closed_standard_output_is_an_error() -> None:
    """`unilab plan SPEC >&-`: no plan reached anyone, so the exit is not 0, and no internal error."""
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "plan", CARTPOLE, "--host-facts", HOST],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    assert r.returncode == 1 and "standard output is closed" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_a_plan_written_to_a_file_succeeds_without_standard_output(tmp_path: Path) -> None:
    """`unilab plan SPEC --out F >&-`: the plan is written; only its confirmation line is lost."""
    out = tmp_path / "p.toml"
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "plan", CARTPOLE, "--host-facts", HOST, "--out", str(out)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    assert r.returncode == 0 and r.stderr == "" and out.read_text().startswith("# unilab execution plan")


def test_errors_name_what_is_wrong_where(tmp_path: Path) -> None:
    """The message points at the real problem: a file where a directory should be, a run
    directory that does not exist, the side of a diff that cannot be planned."""
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", f"{CARTPOLE}/x.toml")
    assert_io_error(r, f"{CARTPOLE} is a file, not a directory")
    r = unilab("apply", "--resume", str(tmp_path / "nope"))
    assert_io_error(r, "no such directory")
    r = unilab("schema", "--out", "")
    assert r.returncode == 1 and "an empty path" in r.stderr
    (tmp_path / "spec.json").write_text('{"schema_version": 1, "run": {"name": "x"}}')
    r = unilab("plan", str(tmp_path / "spec.json"))
    assert_io_error(r, "looks like a spec written as JSON")
    r = unilab("diff", str(SPECS / "g1.toml"), CARTPOLE, "--host-facts", HOST, "--set", "task.reward_weights.alive=1.0")
    assert_io_error(r, f"B ({CARTPOLE}): the plan is refused")


# 2. fixes that fit the failure


def test_plan_out_to_directory_or_unwritable_path(tmp_path: Path) -> None:
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(tmp_path))
    assert_io_error(r, "is a directory")
    assert "--resume" not in r.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    with mode(ro, 0o555):
        r = unilab_unprivileged("plan", CARTPOLE, "--host-facts", HOST, "--out", str(ro / "p.toml"))
    assert_io_error(r, str(ro / "p.toml"), "Permission denied")
    assert "--resume" not in r.stderr and "run.output_dir" not in r.stderr


def test_plan_out_to_a_pipe_or_a_link_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """--out replaces a file whole: a named pipe (or a device, as root) or a symbolic link would be
    replaced by a regular file, not written through."""
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(fifo))
    assert_io_error(r, "is not a regular file")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    target = tmp_path / "target.toml"
    target.write_text("keep")
    link = tmp_path / "link.toml"
    link.symlink_to(target)
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(link))
    assert_io_error(r, "is a symbolic link")
    assert f"--out {target}" in r.stderr
    assert link.is_symlink() and target.read_text() == "keep"


def test_export_out_unusable(tmp_path: Path, run_dir: Path) -> None:
    for out, said in ((tmp_path / "missing" / "p.onnx", "does not exist"), (tmp_path, "is a directory")):
        r = unilab("export", str(run_dir), "--out", str(out))
        assert_io_error(r, said)
        assert "ONNX export failed" not in r.stderr and "report this" not in r.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    with mode(ro, 0o555):
        r = unilab_unprivileged("export", str(run_dir), "--out", str(ro / "p.onnx"))
    assert_io_error(r, str(ro / "p.onnx"), "Permission denied")
    assert "ONNX export failed" not in r.stderr
    assert not list(ro.iterdir())


def test_unreadable_checkpoint_is_not_called_corrupt(tmp_path: Path, run_dir: Path) -> None:
    run = copy_run(run_dir, tmp_path)
    ckpt = sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1]
    with mode(ckpt, 0):
        r = unilab_unprivileged("export", str(run))
    assert_clean_error(r)
    assert str(ckpt) in r.stderr and "Permission denied" in r.stderr
    assert "corrupt" not in r.stderr and "delete" not in r.stderr


def test_schema_check_missing_directory(tmp_path: Path) -> None:
    r = unilab("schema", "--check", "--out", str(tmp_path / "nope"))
    assert_io_error(r, "does not exist")
    assert "differ" not in r.stderr


def test_profile_of_a_saved_plan_says_it_takes_a_spec(saved_plan: Path) -> None:
    r = unilab("profile", str(saved_plan))
    assert_clean_error(r)
    assert r.stderr.splitlines()[0] == f"error: {saved_plan} is a saved plan; `unilab profile` takes a spec"
    assert "schema_version" not in r.stderr


# 3. never overwrite a user file


def test_export_never_overwrites_run_files(tmp_path: Path, run_dir: Path) -> None:
    run = copy_run(run_dir, tmp_path)
    ckpt = sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1]
    for victim in (run / "plan.toml", ckpt, run / "manifest.json"):
        before = digest(victim)
        r = unilab("export", str(run), "--out", str(victim))
        assert_io_error(r, "would overwrite")
        assert digest(victim) == before
    # a previous export is replaced, atomically (no temp file left behind)
    for _ in range(2):
        r = unilab("export", str(run))
        assert r.returncode == 0, r.stderr
    assert (run / "policy.onnx").stat().st_size > 0
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_plan_out_is_the_input(tmp_path: Path, saved_plan: Path) -> None:
    spec = tmp_path / "X.toml"
    shutil.copy(CARTPOLE, spec)
    for src in (spec, saved_plan):
        before = digest(src)
        r = unilab("plan", str(src), "--host-facts", HOST, "--out", str(src))
        assert_io_error(r, "is the input file")
        assert digest(src) == before
    r = unilab("plan", str(spec), "--host-facts", HOST, "--out", str(tmp_path / "." / "X.toml"))
    assert_io_error(r, "is the input file")
    assert digest(spec) == digest(Path(CARTPOLE))


def test_plan_out_is_one_of_the_plans_files(tmp_path: Path) -> None:
    """--out onto the host facts, the robot MJCF or the motion the plan pins would destroy them."""
    facts = tmp_path / "node.json"
    shutil.copy(HOST, facts)
    motion = tmp_path / "clip.npz"
    shutil.copy(ROOT / "unilab" / "assets" / "motions" / "g1_squat.npz", motion)
    mjcf = tmp_path / "g1.xml"
    shutil.copy(ROOT / "unilab" / "robot" / "assets" / "g1.xml", mjcf)
    spec = SPECS / "g1_motion_tracking.toml"
    sets = ["--set", f'task.motion="{motion}"', "--set", f'task.robot_mjcf="{mjcf}"']
    for target in (facts, motion, mjcf):
        before = digest(target)
        r = unilab("plan", str(spec), *sets, "--host-facts", str(facts), "--out", str(target))
        assert_io_error(r, "is the input file")
        assert digest(target) == before


def test_plan_format_follows_out_extension(tmp_path: Path) -> None:
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--format", "json", "--out", str(tmp_path / "pj.toml"))
    assert_io_error(r, "--format json does not match --out")
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--format", "toml", "--out", str(tmp_path / "pt.json"))
    assert_io_error(r, "--format toml does not match --out")
    assert not list(tmp_path.iterdir())
    pj = tmp_path / "p.json"
    assert unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(pj)).returncode == 0
    assert pj.read_text().startswith("{")
    pt = tmp_path / "p.toml"
    assert unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(pt)).returncode == 0
    assert unilab("diff", str(pj), str(pt)).returncode == 0


# 4. usage errors exit 1 (2 is `diff`'s "plans differ")


@pytest.mark.parametrize(
    "args", [["diff", CARTPOLE], ["diff", CARTPOLE, CARTPOLE, "--bogus"], ["plan"], ["bogus-command"]]
)
def test_usage_errors_exit_1(args: list[str]) -> None:
    r = unilab(*args)
    assert r.returncode == 1, r.stderr
    assert "usage: unilab" in r.stderr and "Traceback" not in r.stderr


# 5. help texts say what the commands do


def test_help_texts() -> None:
    apply = " ".join(unilab("apply", "--help").stdout.split())
    assert "Plan TARGET" not in apply and "SPEC|PLAN" in apply
    assert "<run.output_dir>/<run.name>-<utc time>/" in apply and "runs/<name>" not in apply
    assert "only the final summary" in apply
    profile = " ".join(unilab("profile", "--help").stdout.split())
    assert "<run.output_dir>/profile-<utc time>" in profile and "runs/profile-" not in profile
    top = " ".join(unilab("--help").stdout.split())
    assert "compare two specs, saved plans or runs' plans" in top and "two plans key" not in top
    plan = " ".join(unilab("plan", "--help").stdout.split())
    assert "json when FILE ends in .json" in plan


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_inputs_that_are_not_regular_files_are_refused(tmp_path: Path, kind: str) -> None:
    """/dev/zero grew `unilab plan` to gigabytes; a named pipe blocked it for ever."""
    src = Path("/dev/zero")
    if kind == "fifo":
        src = tmp_path / "in.fifo"
        os.mkfifo(src)
    for args, what in (
        (["plan", str(src)], "spec file"),
        (["plan", CARTPOLE, "--host-facts", str(src)], "host facts file"),
        (["manifest", "validate", str(src)], "manifest"),
    ):
        r = unilab(*args)
        assert_clean_error(r)
        assert f"{what} {src} is not a regular file" in r.stderr, r.stderr


def test_json_plans_read_back_in_any_key_order_and_suffix_case(tmp_path: Path) -> None:
    r = unilab("plan", CARTPOLE, "--host-facts", HOST, "--out", str(tmp_path / "P.JSON"))
    assert r.returncode == 0, r.stderr
    data = json.loads((tmp_path / "P.JSON").read_text())
    (tmp_path / "sorted.json").write_text(json.dumps(data, sort_keys=True))  # `jq -S .` or a minifier
    for name in ("P.JSON", "sorted.json"):
        r = unilab("diff", str(tmp_path / name), str(tmp_path / "P.JSON"))
        assert r.returncode == 0 and "no changes" in r.stdout, r.stdout + r.stderr
