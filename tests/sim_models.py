"""A small position-controlled humanoid MJCF for backend tests and benchmarks (test code: it
lives beside the tests, and the benchmarks import it from here).

Robot-agnostic backends are tested against it where the G1 model is not needed (or not yet
available): a free-floating torso, two 6-DoF legs, two 3-DoF arms and a 2-DoF waist (20
position actuators), box feet on a plane, and one sensor of each stage (position: framequat,
velocity: gyro, acceleration: accelerometer) so that the "sensors of the current state" rule is
exercised for every stage.
"""

from __future__ import annotations

_TEMPLATE = """
<mujoco model="unilab_test_humanoid">
  <option timestep="{timestep}" integrator="implicitfast"/>
  <default>
    <joint damping="0.5" armature="0.01" limited="true"/>
    <geom type="capsule" condim="3" friction="0.8 0.02 0.01" density="800" contype="0" conaffinity="1"/>
    <position kp="60" kv="2" ctrlrange="-1.5 1.5" forcerange="-80 80"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 0.05" contype="1" conaffinity="0"/>
    <body name="torso" pos="0 0 1.08">
      <freejoint name="root"/>
      <site name="imu" pos="0 0 0"/>
      <geom name="torso" type="box" size="0.1 0.15 0.2"/>
      <body name="head" pos="0 0 0.3">
        <geom name="head" type="sphere" size="0.1"/>
      </body>
      <body name="pelvis" pos="0 0 -0.25">
        <joint name="waist_yaw" axis="0 0 1" range="-1 1"/>
        <joint name="waist_pitch" axis="0 1 0" range="-0.5 0.5"/>
        <geom name="pelvis" type="box" size="0.08 0.14 0.05"/>
        {legs}
      </body>
      {arms}
    </body>
  </worldbody>
  <actuator>
    {actuators}
  </actuator>
  <sensor>
    <framequat name="torso_quat" objtype="site" objname="imu"/>
    <gyro name="torso_gyro" site="imu"/>
    <accelerometer name="torso_acc" site="imu"/>
  </sensor>
</mujoco>
"""

_LEG = """
        <body name="{s}_thigh" pos="0 {y} -0.05">
          <joint name="{s}_hip_pitch" axis="0 1 0" range="-1.5 1.0"/>
          <joint name="{s}_hip_roll" axis="1 0 0" range="-0.5 0.5"/>
          <joint name="{s}_hip_yaw" axis="0 0 1" range="-0.6 0.6"/>
          <geom name="{s}_thigh" fromto="0 0 0 0 0 -0.35" size="0.05"/>
          <body name="{s}_shin" pos="0 0 -0.35">
            <joint name="{s}_knee" axis="0 1 0" range="0 2.2"/>
            <geom name="{s}_shin" fromto="0 0 0 0 0 -0.35" size="0.04"/>
            <body name="{s}_foot" pos="0 0 -0.37">
              <joint name="{s}_ankle_pitch" axis="0 1 0" range="-0.8 0.8"/>
              <joint name="{s}_ankle_roll" axis="1 0 0" range="-0.4 0.4"/>
              <geom name="{s}_foot" type="box" pos="0.04 0 -0.01" size="0.1 0.045 0.02" contype="1"/>
            </body>
          </body>
        </body>"""

_ARM = """
      <body name="{s}_upper_arm" pos="0 {y} 0.15">
        <joint name="{s}_shoulder_pitch" axis="0 1 0" range="-2 2"/>
        <joint name="{s}_shoulder_roll" axis="1 0 0" range="-1.5 1.5"/>
        <geom name="{s}_upper_arm" fromto="0 0 0 0 0 -0.28" size="0.035"/>
        <body name="{s}_forearm" pos="0 0 -0.28">
          <joint name="{s}_elbow" axis="0 1 0" range="-2.3 0"/>
          <geom name="{s}_forearm" fromto="0 0 0 0 0 -0.25" size="0.03"/>
        </body>
      </body>"""

_LEG_JOINTS = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
_ARM_JOINTS = ("shoulder_pitch", "shoulder_roll", "elbow")
_JOINTS = (
    ["waist_yaw", "waist_pitch"]
    + [f"{s}_{j}" for s in ("left", "right") for j in _LEG_JOINTS]
    + [f"{s}_{j}" for s in ("left", "right") for j in _ARM_JOINTS]
)


def small_humanoid_xml(timestep: float = 0.005) -> str:
    """MJCF text of the test humanoid: nq=27, nv=26, nu=20, 13 bodies with the world."""
    legs = "".join(_LEG.format(s=s, y=y) for s, y in (("left", 0.09), ("right", -0.09)))
    arms = "".join(_ARM.format(s=s, y=y) for s, y in (("left", 0.2), ("right", -0.2)))
    actuators = "\n    ".join(f'<position name="{j}" joint="{j}"/>' for j in _JOINTS)
    return _TEMPLATE.format(timestep=timestep, legs=legs, arms=arms, actuators=actuators)


def pose_state(model_xml: str, joint_pos: dict[str, float], base_height: float) -> tuple[list[float], list[float]]:
    """(qpos, ctrl) of a pose: free joint at ``base_height`` upright, hinge joints from ``joint_pos``,
    and each joint actuator's control at its joint's target (so position actuators hold the pose)."""
    import mujoco

    from unilab.sim.mjmodel import load_mj_model

    m = load_mj_model(model_xml)
    qpos = m.qpos0.copy()
    for j in range(m.njnt):
        adr = m.jnt_qposadr[j]
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            qpos[adr : adr + 7] = [0.0, 0.0, base_height, 1.0, 0.0, 0.0, 0.0]
        elif m.joint(j).name in joint_pos:
            qpos[adr] = joint_pos[m.joint(j).name]
    ctrl = [0.0] * m.nu
    for a in range(m.nu):
        if m.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT:
            ctrl[a] = float(qpos[m.jnt_qposadr[m.actuator_trnid[a, 0]]])
    return [float(x) for x in qpos], ctrl
