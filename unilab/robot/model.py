"""Compose unilab's scene with the G1 (builtin or a user's MJCF) into one MuJoCo model.

``build_model_xml`` returns a self-contained MJCF string (asset paths made absolute) that CPU
MuJoCo and MuJoCo Warp both compile, and that worker processes can rebuild the model from.
``load_model`` compiles that same string, so every process simulates the identical model.

The robot file is the root of the composed model; unilab then owns the scene around it:
- physics options are reset to MuJoCo's defaults, then unilab's are set (timestep, implicitfast,
  pyramidal cones, solver iterations), whatever ``<option>`` the file had;
- the file's world-level geoms and lights (a floor of its own, say) and its keyframes are removed,
  and unilab's floor and light are added;
- a file without actuators gets unilab's PD position actuators (``g1.KP``/``g1.KD``, force limit
  ``g1.EFFORT_LIMIT``, control range = joint range); a file with position actuators keeps them;
- the IMU sites and sensors in ``g1.SENSORS`` are added when the file lacks them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from unilab.errors import RobotModelError
from unilab.robot import g1
from unilab.robot.inspect import inspect_mjcf

BUILTIN_MJCF: Path = Path(__file__).resolve().parent / "assets" / "g1.xml"
DEFAULT_TIMESTEP: float = 0.005
FLOOR_GEOM: str = "floor"

# Physics options unilab sets on every model (the rest are MuJoCo's defaults). Few solver iterations
# keep MuJoCo Warp's fixed-iteration solver cheap; Newton converges in a handful on CPU.
_INTEGRATOR = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
_CONE = mujoco.mjtCone.mjCONE_PYRAMIDAL
_ITERATIONS = 10
_LS_ITERATIONS = 20
# The floor decides the friction of every contact with it (priority 1), so randomising the floor's
# friction is enough to randomise foot friction.
_FLOOR_FRICTION = (1.0, 0.005, 0.0001)

_SENSOR_TYPES = {
    "gyro": mujoco.mjtSensor.mjSENS_GYRO,
    "accelerometer": mujoco.mjtSensor.mjSENS_ACCELEROMETER,
    "velocimeter": mujoco.mjtSensor.mjSENS_VELOCIMETER,
}
_SITE_PLACEMENT = {
    g1.IMU_SITE: (g1.BASE_BODY, g1.IMU_SITE_POS),
    g1.TORSO_IMU_SITE: (g1.ANCHOR_BODY, g1.TORSO_IMU_SITE_POS),
}


def build_model_xml(robot_mjcf: Path | None = None, timestep: float = DEFAULT_TIMESTEP) -> str:
    """A complete MJCF string: unilab's scene with the builtin G1 (``robot_mjcf=None``) or a user's file."""
    spec = _compose_spec(robot_mjcf, timestep)
    try:
        spec.compile()
    except ValueError as exc:
        raise _compile_error(robot_mjcf, exc) from exc
    return spec.to_xml()


def load_model(robot_mjcf: Path | None = None, timestep: float = DEFAULT_TIMESTEP) -> mujoco.MjModel:
    """Compile ``build_model_xml(robot_mjcf, timestep)``."""
    return model_from_xml(build_model_xml(robot_mjcf, timestep), robot_mjcf)


def model_from_xml(xml: str, robot_mjcf: Path | None = None) -> mujoco.MjModel:
    """Compile a string from ``build_model_xml`` (what worker processes do)."""
    try:
        return mujoco.MjModel.from_xml_string(xml)
    except ValueError as exc:
        raise _compile_error(robot_mjcf, exc) from exc


# ---------------------------------------------------------------------------------------------
# Composition.
def _compose_spec(robot_mjcf: Path | None, timestep: float) -> mujoco.MjSpec:
    if not (math.isfinite(timestep) and timestep > 0):
        raise ValueError(f"timestep must be a positive number of seconds, got {timestep}")
    if robot_mjcf is None:
        path, actuators = BUILTIN_MJCF, "file"
    else:
        info = inspect_mjcf(Path(robot_mjcf))
        path, actuators = info.path, info.actuators
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except ValueError as exc:
        raise _compile_error(robot_mjcf, exc) from exc

    # Asset directories are relative to the file; the composed string has no directory of its own.
    spec.meshdir = str((path.parent / spec.meshdir).resolve()) if spec.meshdir else str(path.parent)
    spec.texturedir = str((path.parent / spec.texturedir).resolve()) if spec.texturedir else str(path.parent)

    _reset_options(spec, timestep)
    for geom in list(spec.worldbody.geoms):
        spec.delete(geom)
    for light in list(spec.worldbody.lights):
        spec.delete(light)
    for key in list(spec.keys):
        spec.delete(key)
    _add_scene(spec)
    if actuators == "unilab_pd":
        _add_pd_actuators(spec)
    _add_sensors(spec, robot_mjcf)
    return spec


def _reset_options(spec: mujoco.MjSpec, timestep: float) -> None:
    defaults = mujoco.MjSpec().option
    for field in dir(defaults):
        if field.startswith("_"):
            continue
        value = getattr(defaults, field)
        if callable(value):
            continue
        try:
            setattr(spec.option, field, value)
        except (AttributeError, TypeError):  # a read-only field in some MuJoCo version: nothing to reset
            continue
    spec.option.timestep = timestep
    spec.option.integrator = _INTEGRATOR
    spec.option.cone = _CONE
    spec.option.iterations = _ITERATIONS
    spec.option.ls_iterations = _LS_ITERATIONS


def _add_scene(spec: mujoco.MjSpec) -> None:
    texture = spec.add_texture(
        name="unilab_floor_checker",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        mark=mujoco.mjtMark.mjMARK_EDGE,
        rgb1=[0.2, 0.3, 0.4],
        rgb2=[0.1, 0.2, 0.3],
        markrgb=[0.8, 0.8, 0.8],
        width=300,
        height=300,
    )
    material = spec.add_material(name="unilab_floor", texrepeat=[5, 5], texuniform=True, reflectance=0.2)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = texture.name
    floor = spec.worldbody.add_geom()
    floor.name = FLOOR_GEOM
    floor.type = mujoco.mjtGeom.mjGEOM_PLANE
    floor.size = [0.0, 0.0, 0.05]
    floor.pos = [0.0, 0.0, 0.0]
    floor.quat = [1.0, 0.0, 0.0, 0.0]
    floor.contype = 1
    floor.conaffinity = 1
    floor.condim = 3
    floor.priority = 1
    floor.friction = list(_FLOOR_FRICTION)
    floor.group = 0
    floor.material = material.name
    light = spec.worldbody.add_light()
    light.name = "unilab_sun"
    light.pos = [0.0, 0.0, 3.0]
    light.dir = [0.0, 0.0, -1.0]
    light.type = mujoco.mjtLightType.mjLIGHT_DIRECTIONAL


def _add_pd_actuators(spec: mujoco.MjSpec) -> None:
    for name in g1.JOINT_NAMES:
        act = spec.add_actuator()
        act.name = name
        act.target = name
        act.trntype = mujoco.mjtTrn.mjTRN_JOINT
        act.set_to_position(kp=g1.KP[name], kv=g1.KD[name])
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = [-g1.EFFORT_LIMIT[name], g1.EFFORT_LIMIT[name]]
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = list(g1.JOINT_RANGE[name])


def _add_sensors(spec: mujoco.MjSpec, robot_mjcf: Path | None) -> None:
    existing = {s.name: s for s in spec.sensors}
    sites = {s.name for s in spec.sites}
    for name, (kind, site) in g1.SENSORS.items():
        if name in existing:
            if existing[name].type != _SENSOR_TYPES[kind]:
                raise RobotModelError(
                    f"robot MJCF {robot_mjcf}: sensor {name!r} is not a {kind}",
                    detail=f"unilab reserves the sensor names {', '.join(g1.SENSORS)} for its IMU readings.",
                    fix=f"rename the file's sensor {name!r}",
                )
            continue
        if site not in sites:
            body_name, pos = _SITE_PLACEMENT[site]
            body = spec.body(body_name)
            body.add_site(name=site, pos=list(pos), size=[0.01, 0.01, 0.01], group=5)
            sites.add(site)
        spec.add_sensor(name=name, type=_SENSOR_TYPES[kind], objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site)


def _compile_error(robot_mjcf: Path | None, exc: Exception) -> RobotModelError:
    which = "unilab's builtin G1 model" if robot_mjcf is None else f"robot MJCF {robot_mjcf}"
    return RobotModelError(
        f"MuJoCo cannot compile {which}",
        detail=f"MuJoCo: {exc}",
        fix=(
            "correct the file (MuJoCo's message above names the element), check it with: python -c "
            f"\"import mujoco; mujoco.MjModel.from_xml_path('{robot_mjcf}')\", "
            if robot_mjcf is not None
            else ""
        )
        + "or remove task.robot_mjcf to use the builtin G1",
    )


# ---------------------------------------------------------------------------------------------
# Index arrays for the tasks.
@dataclass(frozen=True, eq=False)  # holds arrays: identity equality and hash
class RobotLayout:
    """Where the G1's pieces live in a compiled model; every per-joint array is in ``g1.JOINT_NAMES`` order."""

    joint_names: tuple[str, ...]
    joint_ids: np.ndarray  # [29] int
    qpos_adr: np.ndarray  # [29] int, index into qpos
    qvel_adr: np.ndarray  # [29] int, index into qvel
    actuator_ids: np.ndarray  # [29] int, index into ctrl / actuator_force
    base_body_id: int  # pelvis
    base_qpos_adr: int  # free joint: position at [adr, adr+3), quaternion (w, x, y, z) at [adr+3, adr+7)
    base_qvel_adr: int  # free joint: linear velocity (world) at [adr, adr+3), angular (local) at [adr+3, adr+6)
    anchor_body_id: int  # torso_link
    feet_body_ids: np.ndarray  # [2] int (left, right)
    feet_geom_ids: tuple[tuple[int, ...], tuple[int, ...]]  # floor-colliding geoms of each foot body
    key_body_names: tuple[str, ...]
    key_body_ids: np.ndarray  # [len(key_body_names)] int
    floor_geom_id: int
    imu_site_id: int
    sensor_adr: dict[str, tuple[int, int]]  # sensor name -> (index into sensordata, dimension)
    pose: str  # the name in g1.POSES of the standing pose below
    default_qpos: np.ndarray  # [nq] standing pose, feet on the floor
    default_joint_pos: np.ndarray  # [29]
    joint_range: np.ndarray  # [29, 2]
    ctrl_range: np.ndarray  # [29, 2]
    kp: np.ndarray  # [29] position gain of each joint's actuator
    kd: np.ndarray  # [29] velocity gain
    effort_limit: np.ndarray  # [29] actuator force limit (inf where unlimited)

    @classmethod
    def from_model(cls, model: mujoco.MjModel, pose: str = "home") -> RobotLayout:
        """The model's G1 layout, standing in `pose` (a name of ``g1.POSES``) with its feet on the floor."""

        def ids(objtype: mujoco.mjtObj, names: tuple[str, ...], what: str) -> np.ndarray:
            out = np.array([mujoco.mj_name2id(model, objtype, n) for n in names], dtype=np.int64)
            if (out < 0).any():
                missing = [n for n, i in zip(names, out, strict=True) if i < 0]
                raise RobotModelError(
                    f"the composed model lacks {what}: {', '.join(missing)}",
                    fix="name the robot's elements as in Unitree's g1_29dof model",
                )
            return out

        joint_ids = ids(mujoco.mjtObj.mjOBJ_JOINT, g1.JOINT_NAMES, "joints")
        base = int(ids(mujoco.mjtObj.mjOBJ_BODY, (g1.BASE_BODY,), "the base body")[0])
        free = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if len(free) != 1 or model.jnt_bodyid[free[0]] != base:
            raise RobotModelError(f"the composed model needs one free joint, on {g1.BASE_BODY!r}")
        actuator_ids = np.full(len(joint_ids), -1, dtype=np.int64)
        for a in range(model.nu):
            if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT:
                hit = np.nonzero(joint_ids == model.actuator_trnid[a, 0])[0]
                if hit.size:
                    actuator_ids[hit[0]] = a
        if (actuator_ids < 0).any():
            missing = [n for n, a in zip(g1.JOINT_NAMES, actuator_ids, strict=True) if a < 0]
            raise RobotModelError(f"the composed model has no actuator for: {', '.join(missing)}")

        feet = ids(mujoco.mjtObj.mjOBJ_BODY, g1.FEET_BODIES, "feet bodies")
        floor = int(ids(mujoco.mjtObj.mjOBJ_GEOM, (FLOOR_GEOM,), "the floor")[0])
        colliding = _floor_colliding_geoms(model, floor)
        feet_geoms = tuple(tuple(int(g) for g in colliding if model.geom_bodyid[g] == b) for b in feet)
        sensor_adr = {}
        for name in g1.SENSORS:
            sid = int(ids(mujoco.mjtObj.mjOBJ_SENSOR, (name,), "sensors")[0])
            sensor_adr[name] = (int(model.sensor_adr[sid]), int(model.sensor_dim[sid]))

        joint_range = model.jnt_range[joint_ids].copy()
        default_joint = np.array(g1.default_pose_vector(pose))
        limited = model.jnt_limited[joint_ids].astype(bool)
        default_joint[limited] = np.clip(default_joint[limited], joint_range[limited, 0], joint_range[limited, 1])
        qpos_adr = model.jnt_qposadr[joint_ids].astype(np.int64)
        base_qpos = int(model.jnt_qposadr[free[0]])
        default_qpos = model.qpos0.copy()
        default_qpos[qpos_adr] = default_joint
        default_qpos[base_qpos : base_qpos + 7] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
        default_qpos[base_qpos + 2] = _standing_height(model, default_qpos, colliding)

        gain = model.actuator_gainprm[actuator_ids, 0].copy()
        kd = -model.actuator_biasprm[actuator_ids, 2].copy()
        force_limited = model.actuator_forcelimited[actuator_ids].astype(bool)
        effort = np.where(force_limited, model.actuator_forcerange[actuator_ids, 1], np.inf)
        ctrl_limited = model.actuator_ctrllimited[actuator_ids].astype(bool)
        ctrl_range = np.where(ctrl_limited[:, None], model.actuator_ctrlrange[actuator_ids], [-np.inf, np.inf])
        layout = cls(
            joint_names=g1.JOINT_NAMES,
            joint_ids=joint_ids,
            qpos_adr=qpos_adr,
            qvel_adr=model.jnt_dofadr[joint_ids].astype(np.int64),
            actuator_ids=actuator_ids,
            base_body_id=base,
            base_qpos_adr=base_qpos,
            base_qvel_adr=int(model.jnt_dofadr[free[0]]),
            anchor_body_id=int(ids(mujoco.mjtObj.mjOBJ_BODY, (g1.ANCHOR_BODY,), "the anchor body")[0]),
            feet_body_ids=feet,
            feet_geom_ids=(feet_geoms[0], feet_geoms[1]),
            key_body_names=g1.KEY_BODIES,
            key_body_ids=ids(mujoco.mjtObj.mjOBJ_BODY, g1.KEY_BODIES, "key bodies"),
            floor_geom_id=floor,
            imu_site_id=int(ids(mujoco.mjtObj.mjOBJ_SITE, (g1.IMU_SITE,), "the IMU site")[0]),
            sensor_adr=sensor_adr,
            pose=pose,
            default_qpos=default_qpos,
            default_joint_pos=default_joint,
            joint_range=joint_range,
            ctrl_range=ctrl_range,
            kp=gain,
            kd=kd,
            effort_limit=effort,
        )
        for value in vars(layout).values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        return layout


def _floor_colliding_geoms(model: mujoco.MjModel, floor: int) -> list[int]:
    """Robot geoms that can touch the floor (contype/conaffinity filter)."""
    ft, fa = int(model.geom_contype[floor]), int(model.geom_conaffinity[floor])
    return [
        g
        for g in range(model.ngeom)
        if model.geom_bodyid[g] != 0 and ((int(model.geom_contype[g]) & fa) or (int(model.geom_conaffinity[g]) & ft))
    ]


def _standing_height(model: mujoco.MjModel, qpos: np.ndarray, geoms: list[int]) -> float:
    """Base height at which the lowest floor-colliding point of the robot touches z = 0."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    lowest = np.inf
    for g in geoms:
        lowest = min(lowest, _geom_bottom(model, data, g))
    if not np.isfinite(lowest):
        raise RobotModelError("the robot has no geom that can touch the floor (check contype/conaffinity)")
    return float(qpos[2] - lowest)


def _geom_bottom(model: mujoco.MjModel, data: mujoco.MjData, g: int) -> float:
    pos, rot, size = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3), model.geom_size[g]
    kind = model.geom_type[g]
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return float(pos[2] - size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return float(pos[2] - abs(rot[2, 2]) * size[1] - size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        return float(pos[2] - abs(rot[2, 2]) * size[1] - size[0] * math.sqrt(max(0.0, 1.0 - rot[2, 2] ** 2)))
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return float(pos[2] - np.abs(rot[2, :]) @ size)
    if kind == mujoco.mjtGeom.mjGEOM_ELLIPSOID:
        return float(pos[2] - np.linalg.norm(rot[2, :] * size))
    if kind == mujoco.mjtGeom.mjGEOM_MESH:
        mesh = model.geom_dataid[g]
        start, count = model.mesh_vertadr[mesh], model.mesh_vertnum[mesh]
        verts = model.mesh_vert[start : start + count]
        return float(pos[2] + (verts @ rot[2, :]).min())
    return float(pos[2] - model.geom_rbound[g])
