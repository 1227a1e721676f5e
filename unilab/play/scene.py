"""The robot model's geometry as meshes for the browser viewer: one mesh per body (its visible
geoms merged, in the body's frame), so a step moves a body with one pose update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mujoco
import numpy as np

if TYPE_CHECKING:
    import trimesh

VISIBLE_GROUPS = 3  # MuJoCo shows geom groups 0-2 by default; 3 and above hold collision shapes
_G = mujoco.mjtGeom


@dataclass(frozen=True)
class BodyMesh:
    body: int  # MuJoCo body id
    name: str
    mesh: trimesh.Trimesh  # in the body's frame, vertex colours from the geoms' rgba


def _primitive(model: mujoco.MjModel, g: int) -> trimesh.Trimesh | None:
    """Geom ``g`` in its own frame; None for a kind not drawn (planes: the viewer draws a floor)."""
    import trimesh  # the play extra's (viser's own mesh library)

    kind, size = int(model.geom_type[g]), model.geom_size[g]
    if kind == _G.mjGEOM_SPHERE:
        return trimesh.creation.icosphere(subdivisions=2, radius=float(size[0]))
    if kind == _G.mjGEOM_CAPSULE:  # along z, half length size[1]: trimesh's height is centre to centre
        return trimesh.creation.capsule(height=2.0 * float(size[1]), radius=float(size[0]), count=[12, 12])
    if kind == _G.mjGEOM_CYLINDER:
        return trimesh.creation.cylinder(radius=float(size[0]), height=2.0 * float(size[1]), sections=16)
    if kind == _G.mjGEOM_BOX:
        return trimesh.creation.box(extents=2.0 * np.asarray(size, dtype=float))
    if kind == _G.mjGEOM_ELLIPSOID:
        sphere = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
        sphere.apply_scale(np.asarray(size, dtype=float))
        return sphere
    if kind == _G.mjGEOM_MESH:
        m = int(model.geom_dataid[g])
        v0, nv = int(model.mesh_vertadr[m]), int(model.mesh_vertnum[m])
        f0, nf = int(model.mesh_faceadr[m]), int(model.mesh_facenum[m])
        return trimesh.Trimesh(
            model.mesh_vert[v0 : v0 + nv].copy(), model.mesh_face[f0 : f0 + nf].copy(), process=False
        )
    return None


def _placed(mesh: trimesh.Trimesh, pos: np.ndarray, quat: np.ndarray, rgba: np.ndarray) -> trimesh.Trimesh:
    transform = np.eye(4)
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(quat, dtype=float))
    transform[:3, :3] = rot.reshape(3, 3)
    transform[:3, 3] = pos
    mesh.apply_transform(transform)
    return tinted(mesh, np.clip(np.asarray(rgba) * 255.0, 0, 255).astype(np.uint8))


def tinted(mesh: trimesh.Trimesh, rgba: np.ndarray | tuple[int, int, int, int]) -> trimesh.Trimesh:
    """``mesh`` with every vertex coloured ``rgba`` (0-255)."""
    import trimesh

    colours = np.tile(np.asarray(rgba, dtype=np.uint8), (len(mesh.vertices), 1))
    mesh.visual = trimesh.visual.ColorVisuals(mesh=mesh, vertex_colors=colours)
    return mesh


def body_meshes(model: mujoco.MjModel) -> list[BodyMesh]:
    """Every body below the world with a visible geom, its geoms merged in its frame."""
    import trimesh

    parts: dict[int, list[trimesh.Trimesh]] = {}
    for g in range(model.ngeom):
        body = int(model.geom_bodyid[g])
        if body == 0 or int(model.geom_group[g]) >= VISIBLE_GROUPS or float(model.geom_rgba[g][3]) == 0.0:
            continue
        mesh = _primitive(model, g)
        if mesh is None:
            continue
        parts.setdefault(body, []).append(_placed(mesh, model.geom_pos[g], model.geom_quat[g], model.geom_rgba[g]))
    out = []
    for body, meshes in sorted(parts.items()):
        merged = trimesh.util.concatenate(meshes)
        if not isinstance(merged, trimesh.Trimesh):  # meshes concatenate to a mesh
            raise TypeError(f"merging body {body}'s geoms gave a {type(merged).__name__}")
        out.append(BodyMesh(body, mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body) or f"body{body}", merged))
    return out


class Kinematics:
    """Body poses of a given ``qpos`` (a tracking task's reference pose, drawn as a ghost)."""

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model = model
        self.data = mujoco.MjData(model)

    def poses(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[nbody, 3] positions and [nbody, 4] orientations (w, x, y, z) at ``qpos`` [nq]."""
        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.xpos.copy(), self.data.xquat.copy()
