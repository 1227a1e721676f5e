"""The Unitree G1 (29 DoF) robot model.

- ``unilab.robot.g1``: joint order, standing pose, PD gains, limits, body names (standard library only).
- ``unilab.robot.inspect``: plan-time check of a user's MJCF (standard library only).
- ``unilab.robot.model``: composes unilab's scene with the G1 into a MuJoCo model (imports mujoco;
  import it explicitly, never from here, so that the planner stays free of mujoco).
"""

from unilab.robot.g1 import JOINT_NAMES, NUM_JOINTS
from unilab.robot.inspect import MjcfInfo, inspect_mjcf

__all__ = ["JOINT_NAMES", "NUM_JOINTS", "MjcfInfo", "inspect_mjcf"]
