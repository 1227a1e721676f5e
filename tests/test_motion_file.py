"""Reference motion files: the shipped clip loads; every malformed file is refused naming the key and a fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from unilab.errors import MotionFileError
from unilab.tasks.motion_file import (
    BUILTIN_DIR,
    REQUIRED_KEYS,
    builtin_motions,
    inspect_motion,
    load_motion,
    resolve_motion,
)

G1_BODIES = 30  # the composed G1 model: 31 bodies including the world
SHIPPED = BUILTIN_DIR / "g1_squat.npz"


def _clip(t: int = 5, j: int = 29, b: int = G1_BODIES) -> dict[str, np.ndarray]:
    quat = np.zeros((t, b, 4), dtype=np.float32)
    quat[..., 0] = 1.0
    return {
        "fps": np.array(50.0),
        "joint_pos": np.zeros((t, j), dtype=np.float32),
        "joint_vel": np.zeros((t, j), dtype=np.float32),
        "body_pos_w": np.zeros((t, b, 3), dtype=np.float32),
        "body_quat_w": quat,
        "body_lin_vel_w": np.zeros((t, b, 3), dtype=np.float32),
        "body_ang_vel_w": np.zeros((t, b, 3), dtype=np.float32),
    }


def _write(tmp_path: Path, arrays: dict[str, np.ndarray], name: str = "clip.npz") -> Path:
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_shipped_clip_is_accepted_and_small() -> None:
    info = inspect_motion(SHIPPED, num_joints=29, num_bodies=G1_BODIES)
    assert info.num_frames >= 100 and info.fps == 50.0 and info.num_bodies == G1_BODIES
    assert len(info.sha256) == 64
    assert SHIPPED.stat().st_size < 500_000
    m = load_motion(SHIPPED, num_bodies=G1_BODIES)
    assert m.joint_pos.shape == (info.num_frames, 29) and m.joint_pos.dtype == np.float32
    assert np.allclose(np.linalg.norm(m.body_quat_w, axis=-1), 1.0, atol=1e-5)
    # Body velocities agree with the positions (central differences), as the format promises.
    fd = (m.body_pos_w[2:] - m.body_pos_w[:-2]) * (m.fps / 2.0)
    assert np.abs(fd - m.body_lin_vel_w[1:-1]).max() < 1e-2


def test_valid_synthetic_clip_round_trips(tmp_path: Path) -> None:
    path = _write(tmp_path, _clip(t=7))
    info = inspect_motion(path, num_bodies=G1_BODIES)
    assert (info.num_frames, info.fps, info.num_bodies) == (7, 50.0, G1_BODIES)
    assert info.duration_s == pytest.approx(6 / 50.0)


def _refused(path: Path, *needles: str, num_bodies: int | None = G1_BODIES) -> MotionFileError:
    with pytest.raises(MotionFileError) as exc:
        inspect_motion(path, num_joints=29, num_bodies=num_bodies)
    text = exc.value.render()
    for n in needles:
        assert n in text, text
    assert exc.value.fix, "every refusal names a fix"
    return exc.value


def test_missing_file(tmp_path: Path) -> None:
    _refused(tmp_path / "nope.npz", "not found", "make_motion.py")


def test_not_an_npz(tmp_path: Path) -> None:
    bad = tmp_path / "clip.npz"
    bad.write_text("fps,joint_pos\n50,0\n")
    _refused(bad, "not an .npz archive", "not a zip file")
    npy = tmp_path / "array.npz"
    with npy.open("wb") as f:
        np.save(f, np.zeros(3))
    _refused(npy, "single-array .npy file", "numpy.savez")
    # numpy's own message for a text file suggests loading pickles; unilab never passes it on.
    with pytest.raises(MotionFileError) as e:
        inspect_motion(bad)
    assert "pickle" not in e.value.render()


def test_zero_quaternions_are_refused_at_plan_time(tmp_path: Path) -> None:
    """inspect_motion (what the plan runs) refuses what load_motion (the collector) would."""
    arrays = _clip()
    arrays["body_quat_w"][2, 7] = 0.0
    path = _write(tmp_path, arrays)
    for read in (inspect_motion, load_motion):
        with pytest.raises(MotionFileError, match=r"zero-length quaternions \(first at frame, body \(2, 7\)\)"):
            read(path, num_bodies=G1_BODIES)


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_missing_key(tmp_path: Path, key: str) -> None:
    arrays = _clip()
    del arrays[key]
    _refused(_write(tmp_path, arrays), f"lacks key {key}")


def test_wrong_joint_count(tmp_path: Path) -> None:
    _refused(_write(tmp_path, _clip(j=23)), "'joint_pos' has 23 joints", "29")


def test_wrong_body_count(tmp_path: Path) -> None:
    _refused(_write(tmp_path, _clip(b=24)), "24 bodies", "30")
    # Without a body count to compare against, any consistent count passes.
    assert inspect_motion(_write(tmp_path, _clip(b=24), "b24.npz"), num_bodies=None).num_bodies == 24


def test_body_arrays_disagree(tmp_path: Path) -> None:
    arrays = _clip()
    arrays["body_ang_vel_w"] = np.zeros((5, 29, 3), dtype=np.float32)
    _refused(_write(tmp_path, arrays), "'body_ang_vel_w' has 29 bodies")


def test_inconsistent_frame_counts(tmp_path: Path) -> None:
    arrays = _clip(t=5)
    arrays["joint_vel"] = np.zeros((4, 29), dtype=np.float32)
    _refused(_write(tmp_path, arrays), "disagree on the number of frames", "'joint_vel'")


def test_wrong_trailing_shape(tmp_path: Path) -> None:
    arrays = _clip()
    arrays["body_quat_w"] = np.zeros((5, G1_BODIES, 3), dtype=np.float32)
    _refused(_write(tmp_path, arrays), "'body_quat_w'", "w, x, y, z")
    arrays = _clip()
    arrays["joint_pos"] = np.zeros((5,), dtype=np.float32)
    _refused(_write(tmp_path, arrays, "flat.npz"), "'joint_pos' has shape (5,)")


@pytest.mark.parametrize("key", ["joint_pos", "body_pos_w", "body_quat_w"])
def test_non_finite_values(tmp_path: Path, key: str) -> None:
    arrays = _clip()
    arrays[key] = arrays[key].copy()
    arrays[key].flat[3] = np.nan
    _refused(_write(tmp_path, arrays), f"'{key}' holds non-finite")


@pytest.mark.parametrize("fps", [0.0, -30.0, np.inf])
def test_bad_fps(tmp_path: Path, fps: float) -> None:
    arrays = _clip()
    arrays["fps"] = np.array(fps)
    _refused(_write(tmp_path, arrays), "'fps'")


def test_fps_must_be_scalar(tmp_path: Path) -> None:
    arrays = _clip()
    arrays["fps"] = np.array([50.0, 60.0])
    _refused(_write(tmp_path, arrays), "'fps' must be one number")


def test_single_frame_refused(tmp_path: Path) -> None:
    _refused(_write(tmp_path, _clip(t=1)), "at least 2")


def test_resolve_builtin_and_relative(tmp_path: Path) -> None:
    assert "g1_squat" in builtin_motions()
    assert resolve_motion("builtin:g1_squat", tmp_path) == SHIPPED
    assert resolve_motion("clips/a.npz", tmp_path) == tmp_path / "clips" / "a.npz"
    assert resolve_motion(str(SHIPPED), tmp_path) == SHIPPED
    with pytest.raises(MotionFileError, match="unknown built-in motion") as exc:
        resolve_motion("builtin:moonwalk", tmp_path)
    assert "builtin:g1_squat" in exc.value.detail
    with pytest.raises(MotionFileError):
        resolve_motion("builtin:../g1_squat", tmp_path)


def test_planner_modules_import_no_heavy_packages() -> None:
    code = (
        "import sys, unilab.tasks.motion_file, unilab.tasks.declarations;"
        "heavy = [m for m in ('torch', 'mujoco', 'warp', 'numpy') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_joint_angles_in_degrees_are_refused(tmp_path: Path) -> None:
    arrays = _clip()
    arrays["joint_pos"][3, 10] = 45.0  # 45 degrees, not radians
    with pytest.raises(MotionFileError, match=r"reaches 45\.0, beyond any G1 joint's range in radians") as info:
        inspect_motion(_write(tmp_path, arrays), num_bodies=G1_BODIES)
    assert "np.deg2rad" in info.value.fix


def test_a_root_under_the_floor_is_refused(tmp_path: Path) -> None:
    arrays = _clip()
    arrays["body_pos_w"][:, :, 2] = 0.75 - 1.0  # a standing clip one metre too low
    with pytest.raises(MotionFileError, match=r"puts the root body 0\.25 m under the floor \(frame 0\)"):
        inspect_motion(_write(tmp_path, arrays), num_bodies=G1_BODIES)
    arrays["body_pos_w"][:, :, 2] = 0.75
    assert inspect_motion(_write(tmp_path, arrays), num_bodies=G1_BODIES).num_frames == 5


def test_a_clip_without_bodies_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MotionFileError, match="the body arrays hold no bodies"):
        inspect_motion(_write(tmp_path, _clip(b=0)))  # no robot to compare with: planning a broken MJCF
