"""Unitree G1 (29 DoF, rev 1.0) constants: joint order, standing pose, PD gains, limits, body names.

Planner-safe: standard library only (no numpy, torch, warp or mujoco).

Sources (values copied, not tuned here):
- Kinematics, masses, joint ranges, armature: MuJoCo Menagerie ``unitree_g1/g1_mjx.xml``
  (model "g1_29dof_rev_1_0", google-deepmind/mujoco_menagerie).
- Motor rotor inertias, gear ratios, effort limits, the 10 Hz / damping-ratio-2 PD rule and the
  standing keyframe: mjlab ``src/mjlab/asset_zoo/robots/unitree_g1/g1_constants.py`` (mujocolab/mjlab),
  which takes the motor figures from Unitree. The standing pose equals Menagerie's ``home`` keyframe
  (``scene_mjx.xml``) and unitree_rl_gym's G1 default joint angles (hip -0.1, knee 0.3, ankle -0.2).
"""

from __future__ import annotations

import math
from typing import Final

# Unitree's joint order (the order of the G1's motor indices and of Menagerie's actuators).
JOINT_NAMES: Final[tuple[str, ...]] = (
    "left_hip_pitch_joint",
    "left_hip_roll_joint",
    "left_hip_yaw_joint",
    "left_knee_joint",
    "left_ankle_pitch_joint",
    "left_ankle_roll_joint",
    "right_hip_pitch_joint",
    "right_hip_roll_joint",
    "right_hip_yaw_joint",
    "right_knee_joint",
    "right_ankle_pitch_joint",
    "right_ankle_roll_joint",
    "waist_yaw_joint",
    "waist_roll_joint",
    "waist_pitch_joint",
    "left_shoulder_pitch_joint",
    "left_shoulder_roll_joint",
    "left_shoulder_yaw_joint",
    "left_elbow_joint",
    "left_wrist_roll_joint",
    "left_wrist_pitch_joint",
    "left_wrist_yaw_joint",
    "right_shoulder_pitch_joint",
    "right_shoulder_roll_joint",
    "right_shoulder_yaw_joint",
    "right_elbow_joint",
    "right_wrist_roll_joint",
    "right_wrist_pitch_joint",
    "right_wrist_yaw_joint",
)
NUM_JOINTS: Final[int] = 29
# The 12 leg joints (hip pitch, roll, yaw, knee, ankle pitch, roll of each leg), in JOINT_NAMES order.
LEG_JOINTS: Final[tuple[str, ...]] = tuple(
    n for n in JOINT_NAMES if n.split("_", 1)[1].startswith(("hip_", "knee_", "ankle_"))
)
# The legs and the waist's yaw, in JOINT_NAMES order: the joints of the 23-DoF G1 below the arms.
LEG_AND_WAIST_YAW_JOINTS: Final[tuple[str, ...]] = (*LEG_JOINTS, "waist_yaw_joint")

# ---------------------------------------------------------------------------------------------
# Bodies and sites.
BASE_BODY: Final[str] = "pelvis"
FREE_JOINT: Final[str] = "floating_base_joint"
ANCHOR_BODY: Final[str] = "torso_link"  # motion-tracking anchor (as in mjlab's G1 tracking task)
FEET_BODIES: Final[tuple[str, str]] = ("left_ankle_roll_link", "right_ankle_roll_link")
FEET_SITES: Final[tuple[str, str]] = ("left_foot", "right_foot")
# The box under each foot: the builtin model's only geoms meant to touch the floor when standing.
FEET_GEOMS: Final[tuple[str, str]] = ("left_foot_collision", "right_foot_collision")
# Bodies a motion-tracking task compares with the reference (mjlab's G1 tracking body set).
KEY_BODIES: Final[tuple[str, ...]] = (
    "pelvis",
    "left_hip_roll_link",
    "left_knee_link",
    "left_ankle_roll_link",
    "right_hip_roll_link",
    "right_knee_link",
    "right_ankle_roll_link",
    "torso_link",
    "left_shoulder_roll_link",
    "left_elbow_link",
    "left_wrist_yaw_link",
    "right_shoulder_roll_link",
    "right_elbow_link",
    "right_wrist_yaw_link",
)
IMU_SITE: Final[str] = "imu_in_pelvis"
TORSO_IMU_SITE: Final[str] = "imu_in_torso"
# Menagerie's IMU site positions in their bodies (used when a user file lacks the sites).
IMU_SITE_POS: Final[tuple[float, float, float]] = (0.04525, 0.0, -0.08339)
TORSO_IMU_SITE_POS: Final[tuple[float, float, float]] = (-0.03959, -0.00224, 0.14792)

# Sensors unilab guarantees in every composed model: name -> (MJCF sensor type, site).
SENSORS: Final[dict[str, tuple[str, str]]] = {
    "gyro_pelvis": ("gyro", IMU_SITE),
    "accelerometer_pelvis": ("accelerometer", IMU_SITE),
    "local_linvel_pelvis": ("velocimeter", IMU_SITE),
    "gyro_torso": ("gyro", TORSO_IMU_SITE),
}

# ---------------------------------------------------------------------------------------------
# Standing pose (slightly bent knees) and where the pelvis sits in it.
DEFAULT_POSE: Final[dict[str, float]] = {
    **{name: 0.0 for name in JOINT_NAMES},
    "left_hip_pitch_joint": -0.1,
    "right_hip_pitch_joint": -0.1,
    "left_knee_joint": 0.3,
    "right_knee_joint": 0.3,
    "left_ankle_pitch_joint": -0.2,
    "right_ankle_pitch_joint": -0.2,
    "left_shoulder_pitch_joint": 0.2,
    "right_shoulder_pitch_joint": 0.2,
    "left_shoulder_roll_joint": 0.2,
    "right_shoulder_roll_joint": -0.2,
    "left_elbow_joint": 1.28,
    "right_elbow_joint": 1.28,
}
# mjlab's G1 `KNEES_BENT_KEYFRAME` (mjlab, MuJoCo Playground and holosoma train their velocity
# tasks from it): the knees already bent, a foot lifts by flexing them further, where from HOME's
# nearly straight knees the first steps need the whole action window.
KNEES_BENT_POSE: Final[dict[str, float]] = {
    **{name: 0.0 for name in JOINT_NAMES},
    "left_hip_pitch_joint": -0.312,
    "right_hip_pitch_joint": -0.312,
    "left_knee_joint": 0.669,
    "right_knee_joint": 0.669,
    "left_ankle_pitch_joint": -0.363,
    "right_ankle_pitch_joint": -0.363,
    "left_shoulder_pitch_joint": 0.2,
    "right_shoulder_pitch_joint": 0.2,
    "left_shoulder_roll_joint": 0.2,
    "right_shoulder_roll_joint": -0.2,
    "left_elbow_joint": 0.6,
    "right_elbow_joint": 0.6,
}
# The default poses a G1 task may stand in (`task.default_pose`).
POSES: Final[dict[str, dict[str, float]]] = {"home": DEFAULT_POSE, "knees_bent": KNEES_BENT_POSE}
# Pelvis height standing in DEFAULT_POSE (Menagerie's ``home`` keyframe). For a loaded model use
# ``RobotLayout.default_qpos``: the builtin's feet touch the floor at 0.786 m and settle to about 0.781 m.
DEFAULT_BASE_HEIGHT: Final[float] = 0.783675
# Settled pelvis height of each pose (the `base_height` reward's target): HOME's keyframe value, and
# for KNEES_BENT the built-in model's feet-on-the-floor height (0.7590) less the 2.5 mm the contacts
# give under the robot's weight (HOME: 0.7862 on the floor, 0.7837 settled).
POSE_BASE_HEIGHT: Final[dict[str, float]] = {"home": DEFAULT_BASE_HEIGHT, "knees_bent": 0.7565}


# ---------------------------------------------------------------------------------------------
# Motors. Armature is the rotor inertia reflected through a two-stage planetary gearbox.
def _reflected_inertia(rotor: tuple[float, float, float], gears: tuple[float, float, float]) -> float:
    return rotor[0] * (gears[1] * gears[2]) ** 2 + rotor[1] * gears[2] ** 2 + rotor[2]


_ARMATURE_5020 = _reflected_inertia((0.139e-4, 0.017e-4, 0.169e-4), (1, 1 + 46 / 18, 1 + 56 / 16))
_ARMATURE_7520_14 = _reflected_inertia((0.489e-4, 0.098e-4, 0.533e-4), (1, 4.5, 1 + 48 / 22))
_ARMATURE_7520_22 = _reflected_inertia((0.489e-4, 0.109e-4, 0.738e-4), (1, 4.5, 5))
_ARMATURE_4010 = _reflected_inertia((0.068e-4, 0.0, 0.0), (1, 5, 5))

# (armature kg m^2, effort limit N m) per motor kind. Ankles and waist roll/pitch are driven by two
# 5020 motors through a linkage, hence the factor 2.
_MOTORS: Final[dict[str, tuple[float, float]]] = {
    "5020": (_ARMATURE_5020, 25.0),
    "7520_14": (_ARMATURE_7520_14, 88.0),
    "7520_22": (_ARMATURE_7520_22, 139.0),
    "4010": (_ARMATURE_4010, 5.0),
    "2x5020": (2 * _ARMATURE_5020, 50.0),
}


def _motor_of(joint: str) -> str:
    if joint.endswith(("hip_pitch_joint", "hip_yaw_joint")) or joint == "waist_yaw_joint":
        return "7520_14"
    if joint.endswith(("hip_roll_joint", "knee_joint")):
        return "7520_22"
    if joint.endswith(("ankle_pitch_joint", "ankle_roll_joint")) or joint in ("waist_roll_joint", "waist_pitch_joint"):
        return "2x5020"
    if joint.endswith(("wrist_pitch_joint", "wrist_yaw_joint")):
        return "4010"
    return "5020"  # shoulders, elbows, wrist roll


MOTOR: Final[dict[str, str]] = {name: _motor_of(name) for name in JOINT_NAMES}
ARMATURE: Final[dict[str, float]] = {name: _MOTORS[MOTOR[name]][0] for name in JOINT_NAMES}
EFFORT_LIMIT: Final[dict[str, float]] = {name: _MOTORS[MOTOR[name]][1] for name in JOINT_NAMES}

# PD gains: 10 Hz natural frequency and damping ratio 2 on the reflected inertia (mjlab's rule),
# kp = I * w^2, kd = 2 * zeta * I * w.
_NATURAL_FREQ = 10.0 * 2.0 * math.pi
_DAMPING_RATIO = 2.0
KP: Final[dict[str, float]] = {name: ARMATURE[name] * _NATURAL_FREQ**2 for name in JOINT_NAMES}
KD: Final[dict[str, float]] = {name: 2.0 * _DAMPING_RATIO * ARMATURE[name] * _NATURAL_FREQ for name in JOINT_NAMES}

# Joint friction loss, N m (Menagerie g1_mjx.xml default).
FRICTION_LOSS: Final[float] = 0.1

# Joint position limits, radians (lower, upper).
JOINT_RANGE: Final[dict[str, tuple[float, float]]] = {
    "left_hip_pitch_joint": (-2.5307, 2.8798),
    "left_hip_roll_joint": (-0.5236, 2.9671),
    "left_hip_yaw_joint": (-2.7576, 2.7576),
    "left_knee_joint": (-0.087267, 2.8798),
    "left_ankle_pitch_joint": (-0.87267, 0.5236),
    "left_ankle_roll_joint": (-0.2618, 0.2618),
    "right_hip_pitch_joint": (-2.5307, 2.8798),
    "right_hip_roll_joint": (-2.9671, 0.5236),
    "right_hip_yaw_joint": (-2.7576, 2.7576),
    "right_knee_joint": (-0.087267, 2.8798),
    "right_ankle_pitch_joint": (-0.87267, 0.5236),
    "right_ankle_roll_joint": (-0.2618, 0.2618),
    "waist_yaw_joint": (-2.618, 2.618),
    "waist_roll_joint": (-0.52, 0.52),
    "waist_pitch_joint": (-0.52, 0.52),
    "left_shoulder_pitch_joint": (-3.0892, 2.6704),
    "left_shoulder_roll_joint": (-1.5882, 2.2515),
    "left_shoulder_yaw_joint": (-2.618, 2.618),
    "left_elbow_joint": (-1.0472, 2.0944),
    "left_wrist_roll_joint": (-1.97222, 1.97222),
    "left_wrist_pitch_joint": (-1.61443, 1.61443),
    "left_wrist_yaw_joint": (-1.61443, 1.61443),
    "right_shoulder_pitch_joint": (-3.0892, 2.6704),
    "right_shoulder_roll_joint": (-2.2515, 1.5882),
    "right_shoulder_yaw_joint": (-2.618, 2.618),
    "right_elbow_joint": (-1.0472, 2.0944),
    "right_wrist_roll_joint": (-1.97222, 1.97222),
    "right_wrist_pitch_joint": (-1.61443, 1.61443),
    "right_wrist_yaw_joint": (-1.61443, 1.61443),
}


def default_pose_vector(pose: str = "home") -> tuple[float, ...]:
    """The named pose of POSES (DEFAULT_POSE for "home") in JOINT_NAMES order."""
    return tuple(POSES[pose][name] for name in JOINT_NAMES)


def mirror_joint(name: str) -> tuple[str, float]:
    """The joint's left-right mirror image: its partner on the other side (the waist's joints are
    their own) and the sign its angle takes there. Reflected through the robot's sagittal plane, a
    roll or yaw angle changes sign and a pitch angle does not (the G1's left and right joints share
    their axes' directions)."""
    if name not in JOINT_NAMES:
        raise ValueError(f"{name!r} is not a G1 joint")
    if name.startswith("left_"):
        partner = "right_" + name[len("left_") :]
    elif name.startswith("right_"):
        partner = "left_" + name[len("right_") :]
    else:
        partner = name
    return partner, (-1.0 if ("_roll_" in name or "_yaw_" in name) else 1.0)
