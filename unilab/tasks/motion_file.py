"""Reference motion files (.npz, the BeyondMimic / mjlab tracking layout): resolve, inspect, load.

Planner-safe: importing this module costs nothing; numpy is imported inside the functions.

Layout (T frames, J joints, B bodies = the robot's bodies in model order, world body excluded):

    fps            scalar           frames per second, > 0
    joint_pos      [T, J]           joint positions, rad (model joint order)
    joint_vel      [T, J]           joint velocities, rad/s
    body_pos_w     [T, B, 3]        body positions in the world frame, m
    body_quat_w    [T, B, 4]        body orientations in the world frame (w, x, y, z)
    body_lin_vel_w [T, B, 3]        body linear velocities in the world frame, m/s
    body_ang_vel_w [T, B, 3]        body angular velocities in the world frame, rad/s
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unilab.digests import file_sha256
from unilab.errors import MotionFileError

if TYPE_CHECKING:
    import numpy as np

BUILTIN_PREFIX = "builtin:"
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "assets" / "motions"

# key -> (trailing shape after T, with "J"/"B" placeholders)
_LAYOUT: dict[str, tuple[str | int, ...]] = {
    "joint_pos": ("J",),
    "joint_vel": ("J",),
    "body_pos_w": ("B", 3),
    "body_quat_w": ("B", 4),
    "body_lin_vel_w": ("B", 3),
    "body_ang_vel_w": ("B", 3),
}
REQUIRED_KEYS: tuple[str, ...] = ("fps", *_LAYOUT)
# Every G1 hinge joint's range is within +-3.1 rad; 2 pi leaves room for any user model's.
_MAX_JOINT_RAD = 6.283185307179586  # 2 pi
# The root (pelvis) of a G1 on the floor is above it; a little below allows for retargeting noise.
_MIN_ROOT_Z = -0.05
_REGENERATE = (
    "re-export the clip in the layout docs/tasks.md documents (`python tools/make_motion.py --out CLIP.npz` "
    "writes an example)"
)


@dataclass(frozen=True)
class MotionInfo:
    """What the planner records about a motion file."""

    num_frames: int
    fps: float
    num_bodies: int
    sha256: str

    @property
    def duration_s(self) -> float:
        return (self.num_frames - 1) / self.fps


@dataclass(frozen=True)
class Motion:
    """A validated reference motion as float32 numpy arrays (see the module docstring for shapes)."""

    info: MotionInfo
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    body_pos_w: np.ndarray
    body_quat_w: np.ndarray
    body_lin_vel_w: np.ndarray
    body_ang_vel_w: np.ndarray

    @property
    def fps(self) -> float:
        return self.info.fps

    @property
    def num_frames(self) -> int:
        return self.info.num_frames


def builtin_motions() -> list[str]:
    """Names usable as `builtin:NAME`."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.npz"))


def resolve_motion(ref: str, spec_dir: Path) -> Path:
    """Turn a spec's `task.motion` value into a file path.

    `builtin:NAME` names a clip shipped in `unilab/assets/motions/NAME.npz`; anything else is a
    path, relative paths taken against the directory of the spec file. Existence of a path is
    checked by `inspect_motion`; an unknown builtin name is refused here.
    """
    if ref.startswith(BUILTIN_PREFIX):
        name = ref[len(BUILTIN_PREFIX) :]
        path = BUILTIN_DIR / f"{name}.npz"
        if not name or "/" in name or "\\" in name or not path.is_file():
            available = ", ".join(f"builtin:{n}" for n in builtin_motions()) or "none"
            raise MotionFileError(
                f"unknown built-in motion {ref!r}",
                detail=f"task.motion: no file {path}; built-in motions: {available}",
                fix="set task.motion to one of the built-in motions or to a .npz path",
            )
        return path
    if not ref.strip():
        raise MotionFileError(
            "task.motion is empty", fix='set task.motion to "builtin:NAME" or a path to a .npz reference motion'
        )
    path = Path(ref).expanduser()
    if not path.is_absolute():
        path = Path(spec_dir) / path
    return path


def _read_npz(path: Path) -> dict[str, Any]:
    import numpy as np

    if not path.exists():
        raise MotionFileError(
            f"motion file not found: {path}",
            detail="task.motion points at a file that does not exist (a relative path, in the spec or in "
            "--set, resolves against the spec file's directory)",
            fix="correct task.motion, or generate a clip with `python tools/make_motion.py --out PATH`",
        )
    if not path.is_file():
        raise MotionFileError(f"motion path is not a file: {path}", fix="point task.motion at a .npz file")
    with path.open("rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x93NUMPY"):  # np.save's single array, not np.savez's archive of them
        raise MotionFileError(
            f"motion file {path} is a single-array .npy file, not an .npz archive",
            fix=f"save the motion with numpy.savez with keys {', '.join(REQUIRED_KEYS)}; {_REGENERATE}",
        )
    if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # numpy's own message would suggest pickles
        raise MotionFileError(
            f"motion file is not an .npz archive: {path} (not a zip file)",
            fix=f"save the motion with numpy.savez with keys {', '.join(REQUIRED_KEYS)}; {_REGENERATE}",
        )
    try:
        _check_members(path)
        with np.load(path, allow_pickle=False) as data:
            if not isinstance(data, np.lib.npyio.NpzFile):  # pragma: no cover - np.load returns NpzFile here
                raise TypeError
            # Only the members unilab reads are inflated: an archive may carry others of any size.
            return {k: data[k] for k in data.files if k in REQUIRED_KEYS}
    except MotionFileError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, TypeError, EOFError, AttributeError) as e:
        raise MotionFileError(
            f"motion file is not an .npz archive: {path}",
            detail=f"numpy could not read it as an npz of arrays ({type(e).__name__}: {e})",
            fix=f"save the motion with numpy.savez with keys {', '.join(REQUIRED_KEYS)}; {_REGENERATE}",
        ) from e


MAX_MEMBER_BYTES = 256 * 2**20  # one array: a 10-minute 50 fps clip of 30 bodies is about 50 MB
MAX_READ_BYTES = 1024 * 2**20  # all the arrays unilab reads from one motion file


def _check_members(path: Path) -> None:
    """Before anything is inflated: each member unilab reads holds a plain array whose header
    claims a size within the limits, and the archive agrees (a 2 MB zip can inflate to gigabytes,
    and a header can claim 2^40 elements)."""
    import numpy as np

    def refuse(what: str, detail: str | None = None) -> MotionFileError:
        return MotionFileError(
            f"motion file {path}: {what}",
            detail=detail
            or f"unilab reads at most {MAX_MEMBER_BYTES // 2**20} MiB per array and "
            f"{MAX_READ_BYTES // 2**20} MiB per motion file, checked before decompressing",
            fix=f"split or trim the clip; {_REGENERATE}",
        )

    total = 0
    with zipfile.ZipFile(path) as z:
        members = {i.filename.removesuffix(".npy"): i for i in z.infolist()}
        for key in REQUIRED_KEYS:
            info = members.get(key)
            if info is None:
                continue  # _validate names a missing key with its fix
            if info.file_size > MAX_MEMBER_BYTES + 4096:  # an array's bytes and its header
                raise refuse(f"`{key}` inflates to {info.file_size:,} bytes")
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                read_header = (
                    np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(f)
            if dtype.hasobject:
                raise refuse(f"`{key}` holds Python objects, not numbers", "motion arrays are read without pickles")
            size = math.prod(shape) * dtype.itemsize
            if size > MAX_MEMBER_BYTES:
                raise refuse(f"`{key}`'s header claims {math.prod(shape):,} elements ({size:,} bytes)")
            total += size
    if total > MAX_READ_BYTES:
        raise refuse(f"its arrays hold {total:,} bytes")


def _validate(
    path: Path, raw: dict[str, Any], num_joints: int, num_bodies: int | None
) -> tuple[int, float, int, dict[str, np.ndarray]]:
    """The clip's frame count, fps, body count and arrays, checked in this order: keys, fps, array
    dtypes and ranks, frame counts, joint and body columns, then the values themselves."""
    _check_keys(path, raw)
    fps = _read_fps(path, raw)
    arrays = _read_arrays(path, raw, num_joints)
    t = _frame_count(path, arrays)
    b = _body_count(path, arrays, num_joints, num_bodies)
    _check_values(path, arrays, b)
    return t, fps, b, arrays


def _check_keys(path: Path, raw: dict[str, Any]) -> None:
    """Every required key is there (all of the missing ones named at once)."""
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise MotionFileError(
            f"motion file {path} lacks key{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
            detail=f"present keys: {', '.join(sorted(raw)) or 'none'}; required: {', '.join(REQUIRED_KEYS)}",
            fix=f"add the missing arrays; {_REGENERATE}",
        )


def _read_fps(path: Path, raw: dict[str, Any]) -> float:
    """The clip's frame rate: one finite number > 0."""
    import numpy as np

    fps_arr = np.asarray(raw["fps"])
    if fps_arr.size != 1 or not np.issubdtype(fps_arr.dtype, np.number):
        raise MotionFileError(
            f"motion file {path}: key 'fps' must be one number, got shape {fps_arr.shape} dtype {fps_arr.dtype}",
            fix="store fps as a scalar, e.g. numpy.savez(..., fps=50.0)",
        )
    fps = float(fps_arr.reshape(()))
    if not np.isfinite(fps) or fps <= 0:
        raise MotionFileError(
            f"motion file {path}: key 'fps' is {fps}, it must be a finite number > 0",
            fix="store the clip's frame rate (frames per second) under 'fps'",
        )
    return fps


def _read_arrays(path: Path, raw: dict[str, Any], num_joints: int) -> dict[str, np.ndarray]:
    """The layout's arrays, each of a numeric dtype and of its rank (T plus its trailing dims)."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {}
    for key, tail in _LAYOUT.items():
        a = np.asarray(raw[key])
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise MotionFileError(
                f"motion file {path}: key {key!r} has dtype {a.dtype}, expected floating point",
                fix=f"store {key!r} as float32 or float64",
            )
        if a.ndim != 1 + len(tail):
            want = ", ".join(["T", *[str(t) for t in tail]])
            raise MotionFileError(
                f"motion file {path}: key {key!r} has shape {a.shape}, expected [{want}]",
                fix=f"store {key!r} with shape [{want}] (J = {num_joints} joints, B = robot bodies without world)",
            )
        arrays[key] = a
    return arrays


def _frame_count(path: Path, arrays: dict[str, np.ndarray]) -> int:
    """T, the same for every array and at least 2."""
    t = arrays["joint_pos"].shape[0]
    lengths = {k: a.shape[0] for k, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        odd = [k for k, n in lengths.items() if n != t]
        raise MotionFileError(
            f"motion file {path}: arrays disagree on the number of frames T",
            detail="frames per key: "
            + ", ".join(f"{k}={n}" for k, n in lengths.items())
            + f"; first disagreeing key: {odd[0]!r}",
            fix=f"every array must have the same first dimension T; {_REGENERATE}",
        )
    if t < 2:
        raise MotionFileError(
            f"motion file {path}: the clip has {t} frame(s); at least 2 are needed",
            fix="export a clip of at least two frames",
        )
    return t


def _body_count(path: Path, arrays: dict[str, np.ndarray], num_joints: int, num_bodies: int | None) -> int:
    """B, after the joint columns match the robot and the body arrays agree on their bodies and trailing dims."""
    for key in ("joint_pos", "joint_vel"):
        if arrays[key].shape[1] != num_joints:
            raise MotionFileError(
                f"motion file {path}: key {key!r} has {arrays[key].shape[1]} joints, the robot has {num_joints}",
                detail="joint columns must follow the robot model's joint order (29 G1 joints, free joint excluded)",
                fix=f"re-export the motion for the {num_joints}-joint robot in model joint order",
            )

    b = arrays["body_pos_w"].shape[1]
    for key in ("body_quat_w", "body_lin_vel_w", "body_ang_vel_w"):
        if arrays[key].shape[1] != b:
            raise MotionFileError(
                f"motion file {path}: key {key!r} has {arrays[key].shape[1]} bodies, 'body_pos_w' has {b}",
                fix=f"all body arrays must list the same bodies; {_REGENERATE}",
            )
    for key, tail in _LAYOUT.items():
        if tail[-1] != "J" and tail[-1] != "B" and arrays[key].shape[-1] != tail[-1]:
            raise MotionFileError(
                f"motion file {path}: key {key!r} has last dimension {arrays[key].shape[-1]}, expected {tail[-1]}",
                fix=f"store {key!r} with shape [T, B, {tail[-1]}]"
                + (" (quaternions as w, x, y, z)" if key == "body_quat_w" else ""),
            )
    if num_bodies is not None and b != num_bodies:
        raise MotionFileError(
            f"motion file {path}: the clip has {b} bodies, the robot model has {num_bodies} (world excluded)",
            detail="body arrays must list every body of the robot model in model order, without the world body",
            fix="re-export the motion with the robot model used for training (docs/tasks.md); unilab's squat "
            "for your model: python tools/make_motion.py --robot-mjcf YOUR.xml --out clip.npz",
        )
    return b


def _check_values(path: Path, arrays: dict[str, np.ndarray], b: int) -> None:
    """Values a shape check cannot see: non-finite numbers, zero quaternions, degrees, a root under the floor."""
    import numpy as np

    for key, a in arrays.items():
        finite = np.isfinite(a)
        if not finite.all():
            first = tuple(int(i) for i in np.argwhere(~finite)[0])
            raise MotionFileError(
                f"motion file {path}: key {key!r} holds non-finite values (first at index {first})",
                fix=f"remove NaN/inf values from {key!r}; {_REGENERATE}",
            )
    zero = np.linalg.norm(arrays["body_quat_w"], axis=-1) < 1e-6
    if zero.any():
        first = tuple(int(i) for i in np.argwhere(zero)[0])
        raise MotionFileError(
            f"motion file {path}: key 'body_quat_w' holds zero-length quaternions (first at frame, body {first})",
            fix=f"store unit quaternions (w, x, y, z); {_REGENERATE}",
        )
    # Units and frames a shape check cannot see, in the two forms a conversion gets wrong most:
    # joint angles in degrees, and positions in another frame or unit (the root under the floor).
    worst = float(np.abs(arrays["joint_pos"]).max())
    if worst > _MAX_JOINT_RAD:
        raise MotionFileError(
            f"motion file {path}: key 'joint_pos' reaches {worst:.1f}, beyond any G1 joint's range in radians "
            f"(|q| <= {_MAX_JOINT_RAD:.2f}): the clip looks like it holds degrees",
            fix=f"store joint angles in radians (np.deg2rad); {_REGENERATE}",
        )
    if b == 0:
        raise MotionFileError(
            f"motion file {path}: the body arrays hold no bodies",
            detail="body arrays list every body of the robot model, the root first",
            fix=f"store the robot's body poses; {_REGENERATE}",
        )
    root_z = arrays["body_pos_w"][:, 0, 2]
    low = int(np.argmin(root_z))
    if float(root_z[low]) < _MIN_ROOT_Z:
        raise MotionFileError(
            f"motion file {path}: key 'body_pos_w' puts the root body {float(-root_z[low]):.2f} m under the floor "
            f"(frame {low})",
            detail="positions are world-frame metres, z up, the floor at z = 0, bodies in the robot model's order "
            "(the root first)",
            fix=f"convert the positions to that frame (metres, z up, floor at 0); {_REGENERATE}",
        )


def inspect_motion(path: Path, num_joints: int = 29, num_bodies: int | None = None) -> MotionInfo:
    """Validate a motion file and summarise it; raises MotionFileError naming the key and the fix."""
    path = Path(path)
    raw = _read_npz(path)
    t, fps, b, _ = _validate(path, raw, num_joints, num_bodies)
    return MotionInfo(num_frames=t, fps=fps, num_bodies=b, sha256=file_sha256(path))


def load_motion(path: Path, num_joints: int = 29, num_bodies: int | None = None) -> Motion:
    """Validate and load a motion file as float32 arrays (quaternions normalised)."""
    import numpy as np

    path = Path(path)
    raw = _read_npz(path)
    t, fps, b, arrays = _validate(path, raw, num_joints, num_bodies)
    out = {k: np.ascontiguousarray(a, dtype=np.float32) for k, a in arrays.items()}
    out["body_quat_w"] = out["body_quat_w"] / np.linalg.norm(out["body_quat_w"], axis=-1, keepdims=True)
    info = MotionInfo(num_frames=t, fps=fps, num_bodies=b, sha256=file_sha256(path))
    return Motion(info=info, **out)
