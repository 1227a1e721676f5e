"""Generate unilab's built-in reference motion: a procedural G1 squat with an arm swing.

    python tools/make_motion.py                      # writes ./g1_squat.npz
    python tools/make_motion.py --out clip.npz --duration 6 --fps 50 --depth 0.8
    python tools/make_motion.py --out unilab/assets/motions/g1_squat.npz --force   # regenerate the built-in

An existing --out is replaced only with --force; the file is written atomically (temp file, rename).

How the clip is made (docs/tasks.md repeats this):
1. Joint trajectories: smooth sinusoids around the G1 standing pose. With s(t) = (1 - cos(2 pi t / P)) / 2
   (0 at the start of each period, 1 at the bottom of the squat): knees bend by `depth * s`, hip pitch
   and ankle pitch each by `-depth * s / 2` (the thigh and shin rotate equally, keeping the foot flat and
   the torso upright), shoulders pitch forward by `0.6 * depth * s` and elbows extend by `0.4 * depth * s`.
   The clip is periodic, starts and ends standing.
2. Root: the pelvis stays at x = y = 0 with no rotation; its height is chosen per frame so that the
   lowest point of the feet's collision geoms touches the floor (z = 0).
3. Body poses: MuJoCo forward kinematics of the composed G1 model (unilab.robot.model.load_model).
4. Velocities: qvel by central finite differences of qpos (mj_differentiatePos; one-sided at the ends),
   joint_vel from it; body velocities from that qvel by MuJoCo's kinematics (mj_objectVelocity of each
   body frame, world orientation).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import mujoco
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from unilab.atomic import write_atomic  # noqa: E402
from unilab.errors import UnilabError  # noqa: E402
from unilab.robot import g1  # noqa: E402
from unilab.robot.model import RobotLayout, load_model  # noqa: E402

# In the working directory, not the packaged asset: replacing the built-in clip must be asked for.
DEFAULT_OUT = Path("g1_squat.npz")


def _geom_bottom(model: mujoco.MjModel, data: mujoco.MjData, g: int) -> float:
    pos, rot, size = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3), model.geom_size[g]
    kind = model.geom_type[g]
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return float(pos[2] - np.abs(rot[2, :]) @ size)
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return float(pos[2] - size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return float(pos[2] - abs(rot[2, 2]) * size[1] - size[0])
    return float(pos[2] - model.geom_rbound[g])


def joint_trajectory(times: np.ndarray, period: float, depth: float) -> np.ndarray:
    """[T, 29] joint positions in g1.JOINT_NAMES order."""
    base = np.array(g1.default_pose_vector())
    q = np.tile(base, (len(times), 1))
    s = 0.5 * (1.0 - np.cos(2.0 * math.pi * times / period))
    col = {name: i for i, name in enumerate(g1.JOINT_NAMES)}
    for side in ("left", "right"):
        q[:, col[f"{side}_knee_joint"]] += depth * s
        q[:, col[f"{side}_hip_pitch_joint"]] -= 0.5 * depth * s
        q[:, col[f"{side}_ankle_pitch_joint"]] -= 0.5 * depth * s
        q[:, col[f"{side}_shoulder_pitch_joint"]] -= 0.6 * depth * s
        q[:, col[f"{side}_elbow_joint"]] -= 0.4 * depth * s
    lo = np.array([g1.JOINT_RANGE[n][0] for n in g1.JOINT_NAMES])
    hi = np.array([g1.JOINT_RANGE[n][1] for n in g1.JOINT_NAMES])
    return np.clip(q, lo, hi)


def make_motion(
    duration: float, fps: float, period: float, depth: float, robot_mjcf: Path | None = None
) -> dict[str, np.ndarray]:
    model = load_model(robot_mjcf)
    layout = RobotLayout.from_model(model)
    data = mujoco.MjData(model)
    num_frames = round(duration * fps) + 1
    times = np.arange(num_frames) / fps
    joints = joint_trajectory(times, period, depth)
    feet_geoms = [g for geoms in layout.feet_geom_ids for g in geoms]
    b = layout.base_qpos_adr

    qpos = np.tile(layout.default_qpos, (num_frames, 1))
    for t in range(num_frames):
        qpos[t, layout.qpos_adr] = joints[t]
        qpos[t, b : b + 3] = 0.0
        qpos[t, b + 3 : b + 7] = (1.0, 0.0, 0.0, 0.0)
        data.qpos[:] = qpos[t]
        mujoco.mj_kinematics(model, data)
        qpos[t, b + 2] = -min(_geom_bottom(model, data, g) for g in feet_geoms)

    qvel = np.zeros((num_frames, model.nv))
    dt = 1.0 / fps
    for t in range(num_frames):
        lo, hi = max(t - 1, 0), min(t + 1, num_frames - 1)
        mujoco.mj_differentiatePos(model, qvel[t], (hi - lo) * dt, qpos[lo], qpos[hi])

    nb = model.nbody - 1
    body_pos = np.zeros((num_frames, nb, 3))
    body_quat = np.zeros((num_frames, nb, 4))
    body_lin = np.zeros((num_frames, nb, 3))
    body_ang = np.zeros((num_frames, nb, 3))
    vel6 = np.zeros(6)
    for t in range(num_frames):
        data.qpos[:] = qpos[t]
        data.qvel[:] = qvel[t]
        mujoco.mj_forward(model, data)
        body_pos[t] = data.xpos[1:]
        body_quat[t] = data.xquat[1:]
        for i in range(1, model.nbody):
            # XBODY: the body frame (not the inertial frame); flg_local=0: world orientation; [rot, lin].
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_XBODY, i, vel6, 0)
            body_ang[t, i - 1] = vel6[:3]
            body_lin[t, i - 1] = vel6[3:]

    f32 = np.float32
    return {
        "fps": np.array(fps, dtype=f32),
        "joint_pos": joints.astype(f32),
        "joint_vel": qvel[:, layout.qvel_adr].astype(f32),
        "body_pos_w": body_pos.astype(f32),
        "body_quat_w": body_quat.astype(f32),
        "body_lin_vel_w": body_lin.astype(f32),
        "body_ang_vel_w": body_ang.astype(f32),
    }


def check_args(args: argparse.Namespace) -> None:
    """Refuse what would write a broken clip, a file under another name, or over an existing one."""
    for flag in ("duration", "fps", "period"):
        value = getattr(args, flag)
        if not (math.isfinite(value) and value > 0):
            raise UnilabError(f"--{flag} must be a finite number > 0, got {value:g}", fix=f"e.g. --{flag} 2")
    if round(args.duration * args.fps) < 1:  # a clip needs T >= 2 frames
        raise UnilabError(
            f"--duration {args.duration:g} at --fps {args.fps:g} is under one frame interval; a clip needs 2 frames",
            fix=f"--duration {2 / args.fps:g} or more",
        )
    if not math.isfinite(args.depth):
        raise UnilabError(f"--depth must be finite, got {args.depth:g}", fix="e.g. --depth 1.0")
    out: Path = args.out
    if out.suffix != ".npz":  # numpy would add .npz itself and write a file other than the one named
        raise UnilabError(f"--out {out}: a motion clip is an .npz file", fix=f"pass --out {out}.npz")
    if out.is_dir():
        raise UnilabError(f"--out {out} is a directory", fix=f"pass a file name, e.g. --out {out / DEFAULT_OUT}")
    if out.exists() and not args.force:
        raise UnilabError(
            f"--out {out} already exists",
            fix="pass another --out, or --force to replace it (the built-in clip too: it ships with unilab)",
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output .npz, relative to the working directory")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--duration", type=float, default=4.0, help="clip length, s")
    p.add_argument("--fps", type=float, default=50.0, help="frames per second")
    p.add_argument("--period", type=float, default=2.0, help="one squat, s")
    p.add_argument("--depth", type=float, default=1.0, help="extra knee bend at the bottom, rad")
    p.add_argument(
        "--robot-mjcf",
        type=Path,
        default=None,
        help="a user's G1 MJCF (task.robot_mjcf): body poses of its bodies, in its model order (default: unilab's G1)",
    )
    args = p.parse_args(argv)
    try:
        check_args(args)
        if args.robot_mjcf is not None:
            from unilab.robot.inspect import inspect_mjcf

            inspect_mjcf(args.robot_mjcf)  # the plan's checks first: a clear error for a file unilab cannot use
        arrays = make_motion(args.duration, args.fps, args.period, args.depth, args.robot_mjcf)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(
            args.out,
            lambda f: np.savez_compressed(f, **arrays),  # to a file object: numpy adds no suffix
            "motion clip",
            fix="free disk space or choose another --out",
        )
    except UnilabError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except OSError as exc:  # the output's directory cannot be made
        print(f"error: cannot write {args.out}: {exc.strerror or exc}\nfix: choose another --out", file=sys.stderr)
        return 1
    t, b = arrays["body_pos_w"].shape[:2]
    print(f"wrote {args.out}: {t} frames at {args.fps:g} fps, {b} bodies, {args.out.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
