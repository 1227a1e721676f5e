"""MuJoCo's OpenGL platform for offscreen rendering (`unilab eval --video`).

MuJoCo picks the platform once, when it is first imported, from ``MUJOCO_GL``. An invalid value, or
a platform library that fails to load, breaks that import itself, so it is done here first, where
the failure can be named; a platform that loads but cannot open a context (glfw without a display)
fails later, when the renderer is made (unilab.evaluate.video.VideoRenderer).
"""

from __future__ import annotations

import os

from unilab.errors import UnilabError

GL_FIX = (
    "install an OpenGL library MuJoCo can render with headless: EGL (on Debian or Ubuntu "
    "`apt install libegl1 libegl-mesa0 libgl1-mesa-dri`; MUJOCO_GL=egl is the default here) or OSMesa "
    "(`apt install libosmesa6`, then rerun with MUJOCO_GL=osmesa); on a desktop MUJOCO_GL=glfw also works. "
    "Or leave out --video"
)


def gl_setting() -> str:
    return os.environ.get("MUJOCO_GL", "") or "unset"


def load_mujoco_for_rendering() -> None:
    """Import MuJoCo with an OpenGL platform: EGL unless the user set ``MUJOCO_GL`` (EGL renders
    headless, on a server or in a container, as well as on a desktop)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import mujoco  # noqa: F401 - the import is the check
    except Exception as exc:  # an invalid MUJOCO_GL, a platform library that fails to load, ...
        raise UnilabError(
            f"MuJoCo cannot load its OpenGL platform (MUJOCO_GL={gl_setting()}): {type(exc).__name__}: {exc}",
            detail="--video renders the episodes offscreen with OpenGL; nothing was played or written",
            fix=GL_FIX,
        ) from exc
