"""tools/make_motion.py: an .npz --out, validated numbers, no silent overwrite (the built-in clip
included), atomic writes; every refusal is one paragraph and exit 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools import make_motion

SHORT = ["--duration", "0.2", "--fps", "10"]


def _refused(argv: list[str], capsys: pytest.CaptureFixture, says: str) -> None:
    assert make_motion.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and "fix: " in err, err
    assert "Traceback" not in err


def test_writes_the_named_npz(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "sub" / "clip.npz"
    assert make_motion.main(["--out", str(out), *SHORT]) == 0
    assert f"wrote {out}: 3 frames" in capsys.readouterr().out
    with np.load(out) as z:
        assert z["joint_pos"].shape == (3, 29)
    assert sorted(p.name for p in out.parent.iterdir()) == ["clip.npz"]  # no temp file left


def test_an_out_without_npz_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _refused(["--out", str(tmp_path / "clip"), *SHORT], capsys, "a motion clip is an .npz file")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--fps", "0"), ("--fps", "-5"), ("--duration", "0"), ("--duration", "nan"), ("--period", "0")],
)
def test_bad_numbers_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture, flag: str, value: str) -> None:
    argv = ["--out", str(tmp_path / "c.npz"), *SHORT, flag, value]
    _refused(argv, capsys, f"{flag} must be a finite number > 0")
    assert list(tmp_path.iterdir()) == []


def test_a_clip_shorter_than_two_frames_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _refused(["--out", str(tmp_path / "c.npz"), "--duration", "0.01", "--fps", "10"], capsys, "needs 2 frames")


def test_an_existing_file_is_replaced_only_with_force(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "c.npz"
    out.write_bytes(b"keep")
    _refused(["--out", str(out), *SHORT], capsys, "already exists")
    assert out.read_bytes() == b"keep"
    assert make_motion.main(["--out", str(out), *SHORT, "--force"]) == 0
    with np.load(out) as z:
        assert "body_pos_w" in z


def test_the_default_out_is_not_the_packaged_clip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert make_motion.DEFAULT_OUT == Path("g1_squat.npz")
    monkeypatch.chdir(tmp_path)
    assert make_motion.main(SHORT) == 0
    assert (tmp_path / "g1_squat.npz").is_file()


def test_a_clip_for_a_users_robot_has_its_bodies_and_passes_the_plan_check(tmp_path: Path) -> None:
    """A model with one more body than unilab's G1 gets a clip with that body (the builtin clip
    would be refused for it), and the plan's motion check takes it."""
    from unilab.robot.inspect import builtin_mjcf_path, inspect_mjcf
    from unilab.tasks.motion_file import inspect_motion

    text = builtin_mjcf_path().read_text()
    extra = '<body name="camera_mount" pos="0.05 0 0.45"><geom type="box" size="0.02 0.02 0.02" mass="0.1"/></body>'
    torso = '<body name="torso_link">'
    (tmp_path / "g1_cam.xml").write_text(text.replace(torso, torso + extra, 1))
    out = tmp_path / "cam.npz"
    assert make_motion.main(["--robot-mjcf", str(tmp_path / "g1_cam.xml"), "--out", str(out)]) == 0
    bodies = len(inspect_mjcf(tmp_path / "g1_cam.xml").body_names)
    assert np.load(out)["body_pos_w"].shape[1] == bodies == 31
    assert inspect_motion(out, num_bodies=bodies).num_bodies == 31
