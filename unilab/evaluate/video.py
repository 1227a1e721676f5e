"""Render evaluation episodes to an MP4 file.

The rollout records each filmed world's joint state (``qpos``) as its episode goes; the frames are
rendered afterwards from a copy of the model in this process (``mj_forward`` then MuJoCo's
offscreen renderer), so filming never touches the physics being measured. The encoder is the
ffmpeg binary that imageio-ffmpeg ships: nothing to install on the system but an OpenGL library
for the renderer (EGL by default, ``MUJOCO_GL`` decides).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from unilab.atomic import fsync_dir
from unilab.errors import UnilabError
from unilab.evaluate.gl import GL_FIX, gl_setting
from unilab.evaluate.status import StatusLine

if TYPE_CHECKING:
    import torch

WIDTH, HEIGHT = 640, 480  # MuJoCo's default offscreen buffer (render_model makes sure of it)
MAX_FPS = 30.0  # a 50 Hz control rate is filmed at 25 frames per second: every second step
GHOST_RGBA = (0.3, 0.85, 0.4, 0.35)  # the tracked reference pose
COMMAND_RGBA = (0.2, 0.9, 0.3, 0.9)  # the commanded velocity (green, as mjlab draws it)
VELOCITY_RGBA = (0.2, 0.5, 1.0, 0.9)  # the base's actual velocity (blue)
ARROW_HEIGHT = 0.5  # m above the base, clear of the robot's head


def frame_stride(control_dt: float) -> int:
    """Film every n-th env step, so that a video plays at no more than MAX_FPS."""
    return max(1, math.ceil((1.0 / control_dt) / MAX_FPS - 1e-9))


@dataclass(frozen=True)
class Frame:
    qpos: np.ndarray  # [nq] the robot
    reference: np.ndarray | None = None  # [nq] the pose the task tracks at this step, drawn as a ghost
    command: np.ndarray | None = None  # [3] the commanded (vx, vy, yaw rate) in the heading frame, an arrow
    velocity: np.ndarray | None = None  # [3] the base's linear velocity in the world frame, an arrow beside it


@dataclass
class ClipRecorder:
    """The states of worlds 0..worlds-1 during their first episode: the reset, every ``stride``-th
    step after it, and the final state (the fall itself, for an episode that ends in one)."""

    worlds: int
    stride: int
    frames: list[list[Frame]] = field(init=False)

    def __post_init__(self) -> None:
        self.frames = [[] for _ in range(self.worlds)]

    def record(
        self,
        qpos: torch.Tensor,
        step: int,
        filming: torch.Tensor,
        ending: torch.Tensor | None = None,
        reference: torch.Tensor | None = None,
        command: torch.Tensor | None = None,
        velocity: torch.Tensor | None = None,
    ) -> None:
        """``qpos`` [N, nq] after ``step`` env steps of the episode, before any reset; ``filming``
        [N] marks the worlds whose first episode is still going, ``ending`` [N] those whose episode
        ends with this step; ``reference`` [worlds, nq], ``command`` [worlds, 3] and ``velocity``
        [worlds, 3], if given: the pose the task tracks, its velocity command and the base's velocity."""
        filming_now = filming[: self.worlds].tolist()
        ending_now = ending[: self.worlds].tolist() if ending is not None else [False] * self.worlds
        for w in range(self.worlds):
            if not filming_now[w] or (step % self.stride and not ending_now[w]):
                continue
            # Copies: ``qpos`` is the physics' shared memory, overwritten by the next step.
            self.frames[w].append(
                Frame(
                    qpos[w].numpy().astype(np.float64),
                    reference=_row(reference, w),
                    command=_row(command, w),
                    velocity=_row(velocity, w),
                )
            )


def _row(rows: torch.Tensor | None, w: int) -> np.ndarray | None:
    return None if rows is None else rows[w].numpy().astype(np.float64)


def render_model(model_xml: str) -> mujoco.MjModel:
    """The physics model of the run plus a sky (the physics' own model has none: it is not part of
    what the run simulated, and its digest stays the run's)."""
    spec = mujoco.MjSpec.from_string(model_xml)
    sky = spec.add_texture(name="unilab_video_sky", type=mujoco.mjtTexture.mjTEXTURE_SKYBOX)
    sky.builtin = mujoco.mjtBuiltin.mjBUILTIN_GRADIENT
    sky.rgb1, sky.rgb2 = [0.35, 0.5, 0.7], [0.05, 0.07, 0.1]
    sky.width, sky.height = 256, 1536
    # A user's MJCF may ask for a smaller offscreen buffer than the video's frames.
    spec.visual.global_.offwidth = max(spec.visual.global_.offwidth, WIDTH)
    spec.visual.global_.offheight = max(spec.visual.global_.offheight, HEIGHT)
    model = spec.compile()
    if model.nlight == 0:  # the cart-pole's model has none: the headlight alone leaves it dark
        light = spec.worldbody.add_light()
        light.name, light.pos, light.dir = "unilab_video_light", [0.0, -1.0, 3.0], [0.0, 0.3, -1.0]
        light.type = mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
        model = spec.compile()
    return model


class VideoRenderer:
    """An offscreen renderer for ``model`` with a camera that follows the robot's floating base (a
    fixed camera on the whole model for a robot without one, the cart-pole)."""

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self._ghost: tuple[mujoco.MjData, mujoco.MjvOption, mujoco.MjvPerturb] | None = None
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        self._free_qpos = int(model.jnt_qposadr[free[0]]) if free.size else None  # the floating base
        try:
            with warnings.catch_warnings():  # glfw warns before it fails; the refusal below says it all
                warnings.simplefilter("ignore")
                self.renderer = mujoco.Renderer(model, HEIGHT, WIDTH)
        except Exception as exc:  # any GL failure (a missing library, no display) is the same refusal
            raise UnilabError(
                f"MuJoCo cannot render here (MUJOCO_GL={gl_setting()}): {_first_line(exc)}",
                detail="--video renders the episodes offscreen with OpenGL; nothing was played or written",
                fix=GL_FIX,
            ) from exc
        # The floor's mirror image costs a fifth of a software-rendered frame and shows nothing;
        # shadows stay (they show when a foot is down).
        self.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        self.camera = mujoco.MjvCamera()
        extent = float(model.stat.extent)
        if free.size:
            self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            self.camera.trackbodyid = int(model.jnt_bodyid[free[0]])
            self.camera.azimuth, self.camera.elevation = 135.0, -15.0
            self.camera.distance = 2.2 * extent  # the G1 (extent 1.4 m) at about 3 m
        else:
            self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
            self.camera.lookat[:] = model.stat.center
            self.camera.azimuth, self.camera.elevation = 90.0, -10.0
            self.camera.distance = 1.2 * extent  # the whole model in view

    def frame(self, frame: Frame) -> np.ndarray:
        """An RGB image [HEIGHT, WIDTH, 3] of the model posed at ``frame.qpos``, with the reference
        pose, if any, as a translucent green ghost and the velocity command, if any, as arrows."""
        self.data.qpos[:] = frame.qpos
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, camera=self.camera)
        if frame.reference is not None:
            self._add_ghost(frame.reference)
        if frame.command is not None and self._free_qpos is not None:
            self._add_velocity_arrows(frame)
        return self.renderer.render()

    def _add_velocity_arrows(self, frame: Frame) -> None:
        """The commanded planar velocity (rotated from the heading frame) and the base's actual one,
        as arrows from a point above the base, 1 m per m/s."""
        a = self._free_qpos
        base = frame.qpos[a : a + 3]
        w, x, y, z = frame.qpos[a + 3 : a + 7]
        yaw = np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        c, s = np.cos(yaw), np.sin(yaw)
        start = base + np.array([0.0, 0.0, ARROW_HEIGHT])
        vx, vy = frame.command[0], frame.command[1]
        self._arrow(start, start + np.array([c * vx - s * vy, s * vx + c * vy, 0.0]), COMMAND_RGBA)
        if frame.velocity is not None:
            self._arrow(start, start + np.array([frame.velocity[0], frame.velocity[1], 0.0]), VELOCITY_RGBA)

    def _arrow(self, start: np.ndarray, end: np.ndarray, rgba: tuple[float, ...]) -> None:
        scene = self.renderer.scene
        if scene.ngeom >= scene.maxgeom or np.linalg.norm(end - start) < 1e-3:
            return  # no room, or a zero velocity: nothing to point
        geom = scene.geoms[scene.ngeom]
        arrow = mujoco.mjtGeom.mjGEOM_ARROW
        mujoco.mjv_initGeom(geom, arrow, np.zeros(3), np.zeros(3), np.eye(3).ravel(), np.array(rgba))
        mujoco.mjv_connector(geom, arrow, 0.02, start, end)
        scene.ngeom += 1

    def _add_ghost(self, qpos: np.ndarray) -> None:
        if self._ghost is None:
            self._ghost = (mujoco.MjData(self.model), mujoco.MjvOption(), mujoco.MjvPerturb())
        data, option, perturb = self._ghost
        data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, data)
        scene = self.renderer.scene
        first = scene.ngeom
        # The robot's geoms only (dynamic: on moving bodies), not the floor or the sky.
        mujoco.mjv_addGeoms(self.model, data, option, perturb, mujoco.mjtCatBit.mjCAT_DYNAMIC, scene)
        for i in range(first, scene.ngeom):
            scene.geoms[i].rgba[:] = GHOST_RGBA
            scene.geoms[i].matid = -1
            scene.geoms[i].transparent = 1  # set from the alpha by mjv_addGeoms, before the colour changed
            scene.geoms[i].castshadow = 0

    def close(self) -> None:
        self.renderer.close()


def write_video(
    renderer: VideoRenderer, clips: list[list[Frame]], fps: float, path: Path, progress: bool
) -> WrittenVideo:
    """Render the clips one after the other into ``path``, each clip's last frame held for half a
    second before the next begins. The file is written under a temporary name, its frames counted
    back, and only then renamed: a failed or interrupted encoding leaves no video, never a
    truncated one."""
    import imageio_ffmpeg

    hold = max(1, round(fps / 2))
    total = sum(len(c) for c in clips) + (hold - 1) * (len(clips) - 1)  # each held frame is sent hold times
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial.mp4")
    status = StatusLine(progress)
    starts: list[int] = []
    done = 0
    try:
        writer = imageio_ffmpeg.write_frames(
            str(tmp), (WIDTH, HEIGHT), fps=fps, quality=7, macro_block_size=16, ffmpeg_log_level="error"
        )
        try:
            writer.send(None)  # starts ffmpeg
            for i, clip in enumerate(clips):
                starts.append(done)
                for j, frame in enumerate(clip):
                    image = renderer.frame(frame)
                    for _ in range(hold if j == len(clip) - 1 and i < len(clips) - 1 else 1):
                        writer.send(image)
                        done += 1
                    status.update(f"rendering {path.name}: frame {done:,}/{total:,}")
        finally:
            writer.close()
        written, _ = imageio_ffmpeg.count_frames_and_secs(str(tmp))
        if written != total:
            raise OSError(f"the encoder wrote {written} of {total} frames")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, RuntimeError) as exc:  # ffmpeg failed or was killed, the disk is full, ...
        raise UnilabError(
            f"cannot write the video {path}: {_first_line(exc)}",
            detail="ffmpeg's own message, if any, is printed above; the evaluation's figures are unaffected, "
            "and no partial video was left",
            fix="free disk space or pass --video with a file elsewhere, and rerun",
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
        status.close()
    return WrittenVideo(frames=total, starts=starts)


@dataclass(frozen=True)
class WrittenVideo:
    frames: int
    starts: list[int]  # the frame at which each clip starts


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
