"""Play an exported unilab velocity policy in plain MuJoCo: no unilab, no torch.

    python tools/sim2sim.py POLICY.onnx [--mjcf FILE] [--perturb SEED] [--episodes N] [--seed S]
                            [--video FILE.mp4] [--json]

Needs only mujoco, numpy and onnxruntime. Everything else is read from the ONNX file's metadata
(`unilab export` writes it; docs/deploy.md names every key): the observation layout, the joints in
the policy's order with their standing pose, action scale, PD gains and limits, the control
period, how episodes start, how commands are drawn and when an episode ends. Without --mjcf the
policy plays on the model it was trained on, which the metadata carries. With --mjcf it plays on
another G1 model (MuJoCo Menagerie's, mjlab's): its joints are matched to the policy's by name,
it keeps its own actuators where they are position servos on those joints and otherwise gets the
policy's PD loop as position actuators, and it runs under the simulation options the policy was
trained with. What differs between the two models (joint order, gains, armature, damping,
friction) is printed; docs/deploy.md has the details and figures.

With --perturb SEED each episode plays on the model with its physical parameters drawn anew
around their values, as far as a real robot differs from its model (`PERTURBATION`: link masses,
the base's centre of mass, joint armature, damping and friction loss, servo gains, floor friction)
and the policy's action reaches the servos one control step late; the draws are numpy's, seeded by
SEED and the episode. --video films the first episodes from a camera that follows the robot from
its side (imageio-ffmpeg encodes; MuJoCo's offscreen renderer needs an OpenGL library, MUJOCO_GL
picks it, EGL where unset).

Per episode and in all it prints the length, how it ended (a fall or the time limit) and the
command-tracking errors beside a robot standing still under the same commands, the figures
`unilab eval` prints: per step, over the first episode of each world, the ending step left out.
Its random draws (start pose, commands) are numpy's, not unilab's, so a seed does not replay
`unilab eval`'s episodes; over enough episodes the figures agree (docs/deploy.md).

Exit status: 0 when it ran, 2 on bad input (one paragraph on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# MuJoCo picks its OpenGL platform once, when first imported: EGL (it renders headless, on a
# server as on a desktop) for --video, unless the user chose one. Without --video nothing renders
# and no platform library need load.
if "--video" in sys.argv[1:] or any(a.startswith("--video=") for a in sys.argv[1:]):
    os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco
import numpy as np

OBS_TERMS = (
    "base_lin_vel",
    "base_ang_vel",
    "projected_gravity",
    "velocity_command",
    "gait_phase",
    "joint_pos_rel",
    "joint_vel_rel",
    "last_action",
)
REQUIRED = (
    "unilab.observation_layout",
    "unilab.joint_names",
    "unilab.default_joint_pos",
    "unilab.action_scale",
    "unilab.action_joints",
    "unilab.joint_kp",
    "unilab.joint_kd",
    "unilab.effort_limit",
    "unilab.target_range",
    "unilab.physics",
    "unilab.velocity_task",
)


class DeployError(Exception):
    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.fix = fix


# ---------------------------------------------------------------------------------- the policy
class Policy:
    """The ONNX policy and its metadata: observations in, actions in [-1, 1] out."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise DeployError(f"{path} is not a file", "pass the policy.onnx that `unilab export RUN_DIR` wrote")
        try:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1  # one observation at a time: threads cost more than they save
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types for every kind of bad file
            raise DeployError(
                f"{path} is not an ONNX model onnxruntime can load ({type(e).__name__}: {str(e).splitlines()[0]})",
                "pass the policy.onnx that `unilab export RUN_DIR` wrote",
            ) from None
        meta = dict(self.session.get_modelmeta().custom_metadata_map)
        if "unilab.task" not in meta:
            raise DeployError(
                f"{path} has no unilab metadata: it was not written by `unilab export`",
                "export the run with `unilab export RUN_DIR` and pass that file",
            )
        if meta["unilab.task"] != "g1_walk":
            raise DeployError(
                f"{path} is a {meta['unilab.task']} policy; sim2sim plays velocity policies (g1_walk)",
                "export a g1_walk run",
            )
        missing = [k for k in REQUIRED if k not in meta]
        not_embedded = [k for k in REQUIRED if k in meta and meta[k].startswith(("not ", "not:"))]
        if missing or not_embedded:
            what = ", ".join(missing + not_embedded)
            raise DeployError(
                f"{path} lacks metadata sim2sim needs ({what}): it was exported by an older unilab, or its run's "
                "robot MJCF was not at hand when it was exported",
                "export the run again with this unilab (`unilab export RUN_DIR --out NEW.onnx`), from where it ran",
            )
        self.meta = meta
        self.input = self.session.get_inputs()[0].name
        layout = json.loads(meta["unilab.observation_layout"])
        self.layout = [(name, int(a), int(b)) for name, (a, b) in layout.items()]
        unknown = [n for n, _, _ in self.layout if n not in OBS_TERMS]
        if unknown:
            raise DeployError(
                f"the policy observes {', '.join(unknown)}, which sim2sim does not compute (it computes "
                f"{', '.join(OBS_TERMS)})",
                "train the policy with g1_walk's observations, or add the term to tools/sim2sim.py",
            )
        self.obs_dim = self.layout[-1][2]
        width = self.session.get_inputs()[0].shape[-1]
        if width != self.obs_dim:
            raise DeployError(
                f"{path} takes observations of {width} entries, its unilab.observation_layout lays out {self.obs_dim}",
                "export the run again with `unilab export RUN_DIR` (the file was changed after export)",
            )
        self.joint_names: list[str] = json.loads(meta["unilab.joint_names"])
        self.action_joints: list[str] = json.loads(meta["unilab.action_joints"])
        self.default_joint_pos = np.array(json.loads(meta["unilab.default_joint_pos"]))
        self.action_scale = np.array(json.loads(meta["unilab.action_scale"]))
        self.kp = _floats(meta["unilab.joint_kp"])
        self.kd = _floats(meta["unilab.joint_kd"])
        self.effort = _floats(meta["unilab.effort_limit"])
        ranges = json.loads(meta["unilab.target_range"])
        self.target_lo = np.array([-np.inf if r[0] is None else r[0] for r in ranges])
        self.target_hi = np.array([np.inf if r[1] is None else r[1] for r in ranges])
        self.physics = json.loads(meta["unilab.physics"])
        self.task = json.loads(meta["unilab.velocity_task"])
        self.passive = {
            k: _floats(meta[f"unilab.joint_{k}"])
            for k in ("armature", "damping", "frictionloss")
            if f"unilab.joint_{k}" in meta
        }
        self.control_dt = float(self.physics["timestep"]) * int(self.physics["decimation"])

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: obs.astype(np.float32)[None]})[0][0].astype(np.float64)


def _floats(text: str) -> np.ndarray:
    return np.array([np.inf if v is None else float(v) for v in json.loads(text)])


# ---------------------------------------------------------------------------------- the robot
@dataclass
class Robot:
    """A MuJoCo model with the policy's joints located in it by name."""

    model: mujoco.MjModel
    qpos_adr: np.ndarray  # per policy joint
    qvel_adr: np.ndarray
    actuators: np.ndarray  # position servos on the policy's joints, in its order
    base_qpos: int
    base_qvel: int
    default_qpos: np.ndarray
    joint_lo: np.ndarray
    joint_hi: np.ndarray
    notes: list[str] = field(default_factory=list)


PHYSICS_OPTIONS = ("timestep", "integrator", "cone", "solver", "iterations", "ls_iterations", "tolerance", "impratio")


def load_robot(policy: Policy, mjcf: Path | None) -> Robot:
    notes: list[str] = []
    try:
        trained = mujoco.MjModel.from_xml_string(policy.meta["unilab.mjcf"])
    except Exception as e:  # a user's robot whose mesh files are not where the run had them
        raise DeployError(
            f"the model in the file's metadata does not load here: {str(e).splitlines()[0]}",
            "pass the robot's MJCF with --mjcf (its mesh files beside it)",
        ) from None
    if mjcf is None:
        model = trained
        source = "the model the policy was trained on (from the file's metadata)"
    else:
        model = _load_mjcf(policy, mjcf, notes)
        source = str(mjcf)
        # The simulation settings the policy was trained under (the robot's own properties stay the model's).
        for name in PHYSICS_OPTIONS:
            here, then = getattr(model.opt, name), getattr(trained.opt, name)
            if here != then:
                was, now = _option(name, here), _option(name, then)
                notes.append(f"physics option {name}: the model's {was} replaced by the trained {now}")
                setattr(model.opt, name, then)

    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in policy.joint_names]
    missing = [n for n, j in zip(policy.joint_names, ids, strict=True) if j < 0]
    if missing:
        raise DeployError(
            f"{source} has no joint named {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''} "
            f"({len(missing)} of the policy's {len(ids)} joints are missing): the policy drives a 29-joint G1 by "
            "its joint names",
            "pass a G1 MJCF whose joints carry the names the policy lists (docs/deploy.md: unilab.joint_names)",
        )
    ids_a = np.array(ids)
    hinge = model.jnt_type[ids_a] == mujoco.mjtJoint.mjJNT_HINGE
    if not hinge.all():
        bad = [policy.joint_names[i] for i in np.flatnonzero(~hinge)]
        raise DeployError(f"joints {', '.join(bad)} of {source} are not hinge joints", "pass a G1 MJCF")
    free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
    if len(free) != 1:
        raise DeployError(f"{source} has {len(free)} free joints; a floating-base G1 has one", "pass a G1 MJCF")

    order = np.argsort(model.jnt_qposadr[ids_a])
    if not (order == np.arange(len(ids))).all():
        notes.append("joint order: the model's differs from the policy's (matched by name)")
    robot = Robot(
        model=model,
        qpos_adr=model.jnt_qposadr[ids_a].astype(int),
        qvel_adr=model.jnt_dofadr[ids_a].astype(int),
        actuators=_servos_or_refuse(model, ids_a, source),
        base_qpos=int(model.jnt_qposadr[free[0]]),
        base_qvel=int(model.jnt_dofadr[free[0]]),
        default_qpos=model.qpos0.copy(),
        joint_lo=np.where(model.jnt_limited[ids_a].astype(bool), model.jnt_range[ids_a, 0], -np.inf),
        joint_hi=np.where(model.jnt_limited[ids_a].astype(bool), model.jnt_range[ids_a, 1], np.inf),
        notes=notes,
    )
    q = robot.default_qpos
    q[robot.qpos_adr] = np.clip(policy.default_joint_pos, robot.joint_lo, robot.joint_hi)
    q[robot.base_qpos : robot.base_qpos + 7] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    q[robot.base_qpos + 2] = (
        float(policy.physics["standing_base_height"]) if mjcf is None else _standing_height(model, q, robot.base_qpos)
    )
    notes.extend(_differences(policy, robot))
    return robot


def _option(name: str, value: Any) -> str:
    enums = {"integrator": mujoco.mjtIntegrator, "cone": mujoco.mjtCone, "solver": mujoco.mjtSolver}
    return enums[name](int(value)).name if name in enums else f"{value:g}"


def use_trained_joint_dynamics(policy: Policy, robot: Robot) -> list[str]:
    """--trained-joint-dynamics: the joints' armature, damping and friction loss set to the trained
    model's, to tell that part of a sim-to-sim gap apart from the rest (masses, geometry, contacts)."""
    done = []
    for k, trained in policy.passive.items():
        getattr(robot.model, f"dof_{k}")[robot.qvel_adr] = trained
        done.append(k)
    robot.notes[:] = [n for n in robot.notes if not n.startswith(tuple(f"{k}:" for k in done))]  # no longer differ
    return [f"joint {', '.join(done)} set to the trained model's (--trained-joint-dynamics)"] if done else []


def use_motor_armature(policy: Policy, robot: Robot) -> list[str]:
    """--motor-armature: the joints' armature set to the G1 motors' reflected inertia (the trained
    model's: Unitree's rotor inertias through their gear ratios, the rule mjlab's g1_constants.py
    also applies in code to its g1.xml, which has none), the model's own damping and friction loss
    kept: another G1 model as its own simulator runs it."""
    trained = policy.passive.get("armature")
    if trained is None:
        raise DeployError(
            "--motor-armature: the policy's metadata has no unilab.joint_armature",
            "export the run again with this unilab (`unilab export RUN_DIR`)",
        )
    robot.model.dof_armature[robot.qvel_adr] = trained
    robot.notes[:] = [n for n in robot.notes if not n.startswith("armature:")]  # no longer differs
    return ["joint armature set to the motors' reflected inertia (--motor-armature)"]


def _load_mjcf(policy: Policy, path: Path, notes: list[str]) -> mujoco.MjModel:
    """The MJCF, with a floor where it has none and, where its joints lack position servos, the
    policy's PD loop added as position actuators (kp, kd, effort and target limits from the
    metadata), so that MuJoCo integrates it as it did in training."""
    if not path.is_file():
        raise DeployError(f"--mjcf {path} is not a file", "pass a G1 MJCF file (with its mesh files beside it)")
    try:
        spec = mujoco.MjSpec.from_file(str(path))
        model = spec.compile()
    except Exception as e:  # MuJoCo reports every parse and compile failure as one exception type per binding
        raise DeployError(
            f"--mjcf {path} does not load in MuJoCo {mujoco.__version__}: {str(e).splitlines()[0]}",
            "pass a G1 MJCF that `python -m mujoco.viewer --mjcf FILE` opens",
        ) from None
    changed = False
    if not any(model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE for g in range(model.ngeom)):
        spec.worldbody.add_geom(name="sim2sim_floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0.0, 0.0, 0.05])
        notes.append("the model has no floor: added a plane at z = 0")
        changed = True
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in policy.joint_names]
    if all(j >= 0 for j in ids) and _position_servos(model, np.array(ids)) is None:
        for i, name in enumerate(policy.joint_names):
            a = spec.add_actuator(name=f"sim2sim_{name}", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
            a.set_to_position(kp=float(policy.kp[i]), kv=float(policy.kd[i]))
            if np.isfinite(policy.effort[i]):
                a.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
                a.forcerange = [-float(policy.effort[i]), float(policy.effort[i])]
            if np.isfinite(policy.target_lo[i]) and np.isfinite(policy.target_hi[i]):
                a.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
                a.ctrlrange = [float(policy.target_lo[i]), float(policy.target_hi[i])]
        notes.append(
            "actuators: the model has no position servo on every policy joint; added the policy's PD loop as "
            "position actuators (kp, kd, effort and target limits from the metadata)"
        )
        changed = True
    return spec.compile() if changed else model


def _position_servos(model: mujoco.MjModel, joint_ids: np.ndarray) -> np.ndarray | None:
    """The model's position actuators (gain kp, bias -kp q - kd qdot) on the policy's joints, in
    its order, or None when any joint has none: then the runner applies the policy's PD loop."""
    found = []
    for j in joint_ids:
        acts = [
            a
            for a in range(model.nu)
            if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
            and model.actuator_trnid[a, 0] == j
            and model.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_AFFINE
            and model.actuator_gainprm[a, 0] > 0
            and math.isclose(model.actuator_biasprm[a, 1], -model.actuator_gainprm[a, 0])
        ]
        if len(acts) != 1:
            return None
        found.append(acts[0])
    return np.array(found)


def _servos_or_refuse(model: mujoco.MjModel, joint_ids: np.ndarray, source: str) -> np.ndarray:
    servos = _position_servos(model, joint_ids)
    if servos is None:  # the trained model has them, and _load_mjcf adds them to any other
        raise DeployError(f"{source} has no position servo on every policy joint", "pass a G1 MJCF")
    return servos


def _standing_height(model: mujoco.MjModel, qpos: np.ndarray, base: int) -> float:
    """Base height at which the robot's lowest colliding point touches z = 0 (its axis-aligned
    bounds, from MuJoCo's geom_aabb)."""
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    lowest = np.inf
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == 0 or not (model.geom_contype[g] or model.geom_conaffinity[g]):
            continue
        center, half = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
        rot = data.geom_xmat[g].reshape(3, 3)
        z = data.geom_xpos[g, 2] + rot[2] @ center - np.abs(rot[2]) @ half
        lowest = min(lowest, float(z))
    if not np.isfinite(lowest):
        raise DeployError(
            "the model has no body geom that collides with the floor", "pass a G1 MJCF with collision geoms"
        )
    return float(qpos[base + 2] - lowest)


def _differences(policy: Policy, robot: Robot) -> list[str]:
    """What the model does differently from what the policy was trained with, joint by joint."""
    m, out, a = robot.model, [], robot.actuators
    out += _compare("kp", m.actuator_gainprm[a, 0], policy.kp, policy.joint_names)
    out += _compare("kd", -m.actuator_biasprm[a, 2], policy.kd, policy.joint_names)
    effort = np.where(m.actuator_forcelimited[a].astype(bool), m.actuator_forcerange[a, 1], np.inf)
    out += _compare("effort limit", effort, policy.effort, policy.joint_names)
    for k, trained in policy.passive.items():
        here = getattr(m, f"dof_{k}")[robot.qvel_adr]
        out += _compare(k, here, trained, policy.joint_names)
    return out


def _compare(what: str, model: np.ndarray, trained: np.ndarray, names: list[str]) -> list[str]:
    both_inf = np.isinf(model) & np.isinf(trained)
    diff = ~both_inf & ~np.isclose(model, trained, rtol=1e-3, atol=1e-6)
    if not diff.any():
        return []
    shown = ", ".join(f"{names[i]} {model[i]:.4g} (trained {trained[i]:.4g})" for i in np.flatnonzero(diff)[:4])
    more = f", and {int(diff.sum()) - 4} more" if diff.sum() > 4 else ""
    return [f"{what}: differs on {int(diff.sum())} of {len(names)} joints: {shown}{more}"]


# ---------------------------------------------------------------------------------- perturbation
# What separates a G1 from its model, as ranges of the draws of --perturb: a factor (x) or an
# offset (+) per body, joint or servo, drawn uniformly and independently. Masses within a tenth
# (a robot's cables, battery and wear against the CAD masses), the pelvis's centre of mass within
# 3 cm, the rotor inertias within 30 %, up to 0.3 N m s / rad of gearbox damping, dry friction from
# half to one and a half of the model's, servo gains within 10 % (motor strength, temperature), a
# floor from linoleum to rubber. Each lies inside what `task.domain_randomization` trains on by
# default (docs/tasks.md), the latency included (a control step: its upper bound).
PERTURBATION: dict[str, tuple[str, float, float]] = {
    "body_mass": ("x", 0.9, 1.1),
    "base_com": ("+", -0.03, 0.03),
    "dof_armature": ("x", 0.7, 1.3),
    "dof_damping": ("+", 0.0, 0.3),
    "dof_frictionloss": ("x", 0.5, 1.5),
    "kp": ("x", 0.9, 1.1),
    "kd": ("x", 0.9, 1.1),
    "floor_friction": ("=", 0.4, 1.0),
}
LATENCY_STEPS = 1  # control steps between an observation and its action reaching the servos


class Perturbation:
    """The model's parameters drawn anew per episode around their nominal values (--perturb)."""

    def __init__(self, robot: Robot, seed: int) -> None:
        m = robot.model
        self.robot, self.seed = robot, seed
        free = int(np.flatnonzero(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE)[0])
        self.base = int(m.jnt_bodyid[free])
        self.floors = [g for g in range(m.ngeom) if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE]
        a = robot.actuators
        self.nominal = {
            "body_mass": m.body_mass.copy(),
            "body_inertia": m.body_inertia.copy(),
            "base_ipos": m.body_ipos[self.base].copy(),
            "dof_armature": m.dof_armature.copy(),
            "dof_damping": m.dof_damping.copy(),
            "dof_frictionloss": m.dof_frictionloss.copy(),
            "kp": m.actuator_gainprm[a, 0].copy(),
            "kd": -m.actuator_biasprm[a, 2].copy(),
            "floor_friction": m.geom_friction[self.floors, 0].copy(),
        }

    def apply(self, episode: int) -> dict[str, float]:
        """Draw this episode's parameters into the model; returns a few figures of the draw."""
        rng = np.random.default_rng([self.seed, episode, 1])
        m, n, a = self.robot.model, self.nominal, self.robot.actuators

        def draw(key: str, size: int) -> np.ndarray:
            return rng.uniform(PERTURBATION[key][1], PERTURBATION[key][2], size)

        mass_factor = draw("body_mass", m.nbody)
        m.body_mass[:] = n["body_mass"] * mass_factor
        m.body_inertia[:] = n["body_inertia"] * mass_factor[:, None]
        m.body_ipos[self.base] = n["base_ipos"] + draw("base_com", 3)
        m.dof_armature[:] = n["dof_armature"] * draw("dof_armature", m.nv)
        m.dof_damping[:] = n["dof_damping"] + draw("dof_damping", m.nv)
        m.dof_frictionloss[:] = n["dof_frictionloss"] * draw("dof_frictionloss", m.nv)
        kp = n["kp"] * draw("kp", len(a))
        m.actuator_gainprm[a, 0] = kp
        m.actuator_biasprm[a, 1] = -kp
        m.actuator_biasprm[a, 2] = -n["kd"] * draw("kd", len(a))
        friction = draw("floor_friction", 1)[0]
        m.geom_friction[self.floors, 0] = friction
        # The subtree masses (read by MuJoCo's centre-of-mass sensors) follow the new masses.
        mujoco.mj_setConst(m, mujoco.MjData(m))
        return {"mass_kg": float(m.body_mass.sum()), "floor_friction": float(friction)}


# ---------------------------------------------------------------------------------- episodes
@dataclass
class Episode:
    length: int
    ended: str  # "time_limit" | "fall"
    err_sums: np.ndarray  # |v_xy - cmd_xy|, |w_z - cmd_yaw|, |cmd_xy|, |cmd_yaw| summed over counted steps
    steps: int  # counted steps


class VelocityEpisodes:
    """g1_walk's episode, step by step as unilab's collector runs it: act, physics for one control
    period, terminations, commands and the gait clock, observation."""

    def __init__(self, policy: Policy, robot: Robot, latency_steps: int = 0) -> None:
        self.p, self.r = policy, robot
        self.latency_steps = latency_steps
        self.data = mujoco.MjData(robot.model)
        self.film: list[np.ndarray] | None = None  # qpos per control step, while filming
        # Actions on their way to the servos (--perturb's latency): the standing pose at first.
        self.in_flight = [np.zeros(len(policy.action_joints)) for _ in range(latency_steps)]
        t = policy.task
        self.max_steps = max(1, round(float(t["episode_length_s"]) / policy.control_dt))
        self.resample_steps = 0 if t["resample_s"] == 0 else max(1, round(float(t["resample_s"]) / policy.control_dt))
        period = t.get("gait_period_s")
        self.phase_step = 0.0 if period is None else policy.control_dt / float(period)
        self.act_idx = np.array([policy.joint_names.index(n) for n in policy.action_joints])

    def draw_command(self, rng: np.random.Generator) -> np.ndarray:
        t = self.p.task
        lo = np.array([t["lin_vel_x"][0], t["lin_vel_y"][0], t["ang_vel_z"][0]])
        hi = np.array([t["lin_vel_x"][1], t["lin_vel_y"][1], t["ang_vel_z"][1]])
        cmd = lo + rng.random(3) * (hi - lo)
        if rng.random() < float(t["standing_share"]):
            cmd[:] = 0.0
        return cmd

    def reset(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """g1_walk's reset: the standing pose turned by a random yaw, joint and base velocity noise,
        a command drawn. Returns the observation and the command."""
        p, r, d, m = self.p, self.r, self.data, self.r.model
        t = p.task
        mujoco.mj_resetData(m, d)
        d.qpos[:] = r.default_qpos
        half_yaw = rng.uniform(-0.5 * math.pi, 0.5 * math.pi)
        b = r.base_qpos
        d.qpos[b + 3 : b + 7] = [math.cos(half_yaw), 0.0, 0.0, math.sin(half_yaw)]
        noise = float(t["reset_joint_noise"])
        joints = p.default_joint_pos + rng.uniform(-noise, noise, len(p.joint_names))
        d.qpos[r.qpos_adr] = np.clip(joints, r.joint_lo, r.joint_hi)
        v = float(t["reset_base_velocity_noise"])
        d.qvel[r.base_qvel : r.base_qvel + 6] = rng.uniform(-v, v, 6)
        mujoco.mj_forward(m, d)
        cmd = self.draw_command(rng)
        self.phase, self.actions = 0.0, np.zeros(len(p.action_joints))
        self.in_flight = [np.zeros(len(p.action_joints)) for _ in range(self.latency_steps)]
        if self.film is not None:
            self.film.append(d.qpos.copy())
        return self.observe(cmd), cmd

    def step(self, obs: np.ndarray) -> None:
        """The policy's action on `obs`, then one control period of physics."""
        self.actions = np.clip(self.p(obs), -1.0, 1.0)
        self.in_flight.append(self.actions)
        self._physics(self.in_flight.pop(0))
        if self.film is not None:
            self.film.append(self.data.qpos.copy())

    def run(self, rng: np.random.Generator) -> Episode:
        p, r, d = self.p, self.r, self.data
        t = p.task
        obs, cmd = self.reset(rng)
        sums, counted = np.zeros(4), 0
        fall_height, fall_gz = float(t["fall_height"]), -math.cos(float(t["fall_tilt"]))
        for step in range(1, self.max_steps + 1):
            self.step(obs)
            rot = self.base_rotation()
            lin_b = rot.T @ d.qvel[r.base_qvel : r.base_qvel + 3]
            yaw_rate = d.qvel[r.base_qvel + 5]
            fell = d.qpos[r.base_qpos + 2] < fall_height or -rot[2, 2] > fall_gz
            timed_out = step >= self.max_steps
            if self.resample_steps and step % self.resample_steps == 0:
                cmd = self.draw_command(rng)
            self.phase = (self.phase + self.phase_step) % 1.0
            if fell or timed_out:
                return Episode(step, "fall" if fell else "time_limit", sums, counted)
            sums += [
                np.linalg.norm(cmd[:2] - lin_b[:2]),
                abs(cmd[2] - yaw_rate),
                np.linalg.norm(cmd[:2]),
                abs(cmd[2]),
            ]
            counted += 1
            obs = self.observe(cmd)
        raise AssertionError("unreachable: the last step times out")

    def base_rotation(self) -> np.ndarray:
        """The base's orientation from qpos: after mj_step, d.xmat still holds the kinematics of the
        step's start (MuJoCo computes positions before it integrates), unilab reads the new state."""
        rot = np.zeros(9)
        b = self.r.base_qpos
        mujoco.mju_quat2Mat(rot, self.data.qpos[b + 3 : b + 7])
        return rot.reshape(3, 3)

    def observe(self, cmd: np.ndarray) -> np.ndarray:
        """The policy's observation of the current state, in its layout."""
        p, r, d = self.p, self.r, self.data
        phase, actions = self.phase, self.actions
        rot = self.base_rotation()
        values = {
            "base_lin_vel": rot.T @ d.qvel[r.base_qvel : r.base_qvel + 3],
            "base_ang_vel": d.qvel[r.base_qvel + 3 : r.base_qvel + 6],
            "projected_gravity": -rot[2],  # the world's -z in the base frame: R^T (0, 0, -1)
            "velocity_command": cmd,
            "gait_phase": np.array([math.sin(2 * math.pi * phase), math.cos(2 * math.pi * phase)]),
            "joint_pos_rel": d.qpos[r.qpos_adr] - p.default_joint_pos,
            "joint_vel_rel": d.qvel[r.qvel_adr],
            "last_action": actions,
        }
        obs = np.zeros(p.obs_dim)
        for name, a, b in p.layout:
            if len(values[name]) != b - a:
                raise DeployError(
                    f"the policy's {name} has {b - a} entries, the model gives {len(values[name])}",
                    "pass a G1 MJCF with the policy's joints",
                )
            obs[a:b] = values[name]
        return obs

    def _physics(self, actions: np.ndarray) -> None:
        p, r, d, m = self.p, self.r, self.data, self.r.model
        target = p.default_joint_pos.copy()
        target[self.act_idx] += p.action_scale[self.act_idx] * actions
        target = np.clip(target, p.target_lo, p.target_hi)
        d.ctrl[r.actuators] = target
        mujoco.mj_step(m, d, nstep=int(p.physics["decimation"]))


# ---------------------------------------------------------------------------------- video
VIDEO_SIZE = (640, 480)
FILM_EPISODES = 4  # --video films the first episodes, one after the other


def write_video(model: mujoco.MjModel, clips: list[list[np.ndarray]], control_dt: float, path: Path) -> int:
    """Render each clip's qpos frames with a camera that follows the base from the robot's left
    side, at no more than 30 frames a second, into an H.264 MP4. Returns the frames written."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise DeployError("--video needs imageio-ffmpeg, which is not installed", "bash tools/setup.sh video") from None
    try:
        renderer = mujoco.Renderer(model, VIDEO_SIZE[1], VIDEO_SIZE[0])
    except Exception as e:  # no OpenGL: MuJoCo raises its own error types per backend
        raise DeployError(
            f"MuJoCo cannot render here (MUJOCO_GL={os.environ.get('MUJOCO_GL', 'unset')}): {str(e).splitlines()[0]}",
            "install an OpenGL library (Debian: apt install libegl1 or libosmesa6) and set MUJOCO_GL=egl or osmesa",
        ) from None
    stride = max(1, math.ceil(1.0 / control_dt / 30.0 - 1e-9))
    fps = 1.0 / (control_dt * stride)
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    cam.distance, cam.elevation = 2.4, -10.0
    data = mujoco.MjData(model)
    free = int(np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)[0])
    b = int(model.jnt_qposadr[free])
    tmp = path.with_name(path.stem + ".part.mp4")  # ffmpeg takes the container from the suffix
    writer = imageio_ffmpeg.write_frames(str(tmp), VIDEO_SIZE, fps=fps, macro_block_size=1, quality=7)
    writer.send(None)
    frames = 0
    try:
        for clip in clips:
            for qpos in clip[::stride]:
                data.qpos[:] = qpos
                mujoco.mj_forward(model, data)
                yaw = 2.0 * math.atan2(qpos[b + 6], qpos[b + 3])  # the base's heading
                cam.lookat[:] = [qpos[b], qpos[b + 1], 0.75]
                cam.azimuth = math.degrees(yaw) + 90.0  # look at its left side
                renderer.update_scene(data, cam)
                writer.send(renderer.render())
                frames += 1
    finally:
        writer.close()
        renderer.close()
    os.replace(tmp, path)
    return frames


# ---------------------------------------------------------------------------------- report
def summary(episodes: list[Episode]) -> dict[str, Any]:
    sums = sum((e.err_sums for e in episodes), np.zeros(4))
    steps = sum(e.steps for e in episodes)
    per = sums / max(steps, 1)
    return {
        "episodes": len(episodes),
        "to_time_limit": sum(e.ended == "time_limit" for e in episodes),
        "falls": sum(e.ended == "fall" for e in episodes),
        "mean_length_steps": float(np.mean([e.length for e in episodes])),
        "lin_vel_xy_error": float(per[0]),
        "yaw_rate_error": float(per[1]),
        "standing_lin_vel_xy_error": float(per[2]),
        "standing_yaw_rate_error": float(per[3]),
        "lin_vs_standing": float(per[0] / per[2]) if per[2] > 0 else None,
        "yaw_vs_standing": float(per[1] / per[3]) if per[3] > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policy", type=Path, help="an ONNX file from `unilab export`")
    ap.add_argument("--mjcf", type=Path, help="a G1 MJCF to play on (default: the model the policy was trained on)")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--trained-joint-dynamics",
        action="store_true",
        help="with --mjcf: give the model's joints the trained armature, damping and friction loss",
    )
    ap.add_argument(
        "--motor-armature",
        action="store_true",
        help="with --mjcf: give the model's joints the G1 motors' reflected inertia (as mjlab sets it in code for "
        "its g1.xml), keeping the model's own damping and friction loss",
    )
    ap.add_argument(
        "--perturb",
        type=int,
        metavar="SEED",
        help="draw the model's masses, centre of mass, joint dynamics, servo gains and floor friction anew each "
        "episode (seeded by SEED) and delay the actions one control step: what separates a robot from its model",
    )
    ap.add_argument("--video", type=Path, metavar="FILE.mp4", help=f"film the first {FILM_EPISODES} episodes")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the text")
    args = ap.parse_args(argv)
    try:
        if args.episodes < 1:
            raise DeployError(f"--episodes {args.episodes}: needs at least one", "pass --episodes 1 or more")
        if args.seed < 0:
            raise DeployError(f"--seed {args.seed}: seeds are whole numbers from 0", "pass --seed 0 or more")
        policy = Policy(args.policy)
        robot = load_robot(policy, args.mjcf)
        if args.trained_joint_dynamics and args.motor_armature:
            raise DeployError(
                "--trained-joint-dynamics already sets the armature; --motor-armature sets it alone",
                "pass one of the two",
            )
        if args.trained_joint_dynamics:
            robot.notes += use_trained_joint_dynamics(policy, robot)
        if args.motor_armature:
            robot.notes += use_motor_armature(policy, robot)
        if args.perturb is not None and args.perturb < 0:
            raise DeployError(f"--perturb {args.perturb}: seeds are whole numbers from 0", "pass --perturb 0 or more")
        if args.video is not None and (args.video.suffix != ".mp4" or not args.video.parent.is_dir()):
            raise DeployError(
                f"--video {args.video}: needs an .mp4 file name in an existing directory", "pass --video sim2sim.mp4"
            )
        perturbation = Perturbation(robot, args.perturb) if args.perturb is not None else None
        if perturbation is not None:
            robot.notes.append(
                f"perturbed (--perturb {args.perturb}): every episode's masses, base centre of mass, joint dynamics, "
                f"servo gains and floor friction drawn anew, actions {LATENCY_STEPS} control step late"
            )
        runner = VelocityEpisodes(policy, robot, LATENCY_STEPS if perturbation is not None else 0)
        episodes, clips = [], []
        for i in range(args.episodes):
            if perturbation is not None:
                perturbation.apply(i)
            runner.film = [] if args.video is not None and i < FILM_EPISODES else None
            episodes.append(runner.run(np.random.default_rng([args.seed, i])))
            if runner.film is not None:
                clips.append(runner.film)
            e = episodes[-1]
            if not args.json:
                line = f"episode {i:3d}: {e.length:5d} steps ({e.length * policy.control_dt:5.2f} s), {e.ended:10s}"
                if e.steps:
                    err = e.err_sums / e.steps
                    line += (
                        f"  |v_xy - cmd| {err[0]:.3f} m/s (standing {err[2]:.3f}),"
                        f" |w_z - cmd| {err[1]:.3f} rad/s (standing {err[3]:.3f})"
                    )
                print(line, flush=True)
        if args.video is not None:
            frames = write_video(robot.model, clips, policy.control_dt, args.video)
            if not args.json:
                print(f"video: {args.video} ({len(clips)} episodes, {frames} frames)", flush=True)
    except DeployError as e:
        print(f"sim2sim: error: {e}\n  fix: {e.fix}", file=sys.stderr)
        return 2
    s = summary(episodes)
    model = "the trained-on model (metadata)" if args.mjcf is None else str(args.mjcf)
    if args.json:
        print(
            json.dumps(
                {"policy": str(args.policy), "mjcf": model, "seed": args.seed, "differences": robot.notes, **s},
                indent=2,
            )
        )
        return 0
    print(f"\nmodel: {model}")
    for note in robot.notes:
        print(f"  differs: {note}")
    print(
        f"{s['episodes']} episodes (seed {args.seed}): {s['to_time_limit']} to the time limit, {s['falls']} fell; "
        f"mean length {s['mean_length_steps']:.1f} steps ({s['mean_length_steps'] * policy.control_dt:.2f} s)"
    )
    lin, yaw = s["lin_vs_standing"], s["yaw_vs_standing"]
    print(
        f"command tracking: |v_xy - cmd| {s['lin_vel_xy_error']:.3f} m/s, |w_z - cmd| {s['yaw_rate_error']:.3f} rad/s; "
        f"standing still {s['standing_lin_vel_xy_error']:.3f} m/s, {s['standing_yaw_rate_error']:.3f} rad/s"
        + (f" ({lin:.2f}x and {yaw:.2f}x standing's)" if lin is not None and yaw is not None else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
