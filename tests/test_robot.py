"""The G1 model: builtin MJCF, composition with unilab's scene, user MJCFs, plan-time inspection."""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import pytest

from unilab.errors import RobotModelError
from unilab.robot import g1
from unilab.robot.inspect import inspect_mjcf
from unilab.robot.model import BUILTIN_MJCF, RobotLayout, build_model_xml, load_model, model_from_xml

TIMESTEP = 0.005


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return load_model(None, TIMESTEP)


@pytest.fixture(scope="module")
def layout(model: mujoco.MjModel) -> RobotLayout:
    return RobotLayout.from_model(model)


def _reset(model: mujoco.MjModel, data: mujoco.MjData, layout: RobotLayout) -> None:
    mujoco.mj_resetData(model, data)
    data.qpos[:] = layout.default_qpos
    data.ctrl[layout.actuator_ids] = layout.default_joint_pos
    mujoco.mj_forward(model, data)


# ---------------------------------------------------------------------------------------------
# Constants and the builtin model.
def test_planner_modules_import_without_numpy_torch_or_mujoco() -> None:
    code = (
        "import sys; import unilab.robot, unilab.robot.g1, unilab.robot.inspect; "
        "bad = [m for m in ('numpy', 'torch', 'warp', 'mujoco') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_constants_cover_the_29_joints() -> None:
    assert len(g1.JOINT_NAMES) == g1.NUM_JOINTS == 29
    assert len(set(g1.JOINT_NAMES)) == 29
    for table in (g1.DEFAULT_POSE, g1.KP, g1.KD, g1.EFFORT_LIMIT, g1.ARMATURE, g1.JOINT_RANGE):
        assert set(table) == set(g1.JOINT_NAMES)
    for name in g1.JOINT_NAMES:
        lo, hi = g1.JOINT_RANGE[name]
        assert lo <= g1.DEFAULT_POSE[name] <= hi, name
        assert g1.KP[name] > 0 and g1.KD[name] > 0 and g1.EFFORT_LIMIT[name] > 0 and g1.ARMATURE[name] > 0


def test_builtin_model_has_29_actuated_hinges_in_unitree_order(model: mujoco.MjModel) -> None:
    hinges = [model.joint(j).name for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    free = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    assert tuple(hinges) == g1.JOINT_NAMES
    assert len(free) == 1 and model.body(model.jnt_bodyid[free[0]]).name == g1.BASE_BODY
    assert model.nu == 29
    driven = [model.joint(model.actuator_trnid[a, 0]).name for a in range(model.nu)]
    assert tuple(driven) == g1.JOINT_NAMES
    assert model.nq == 7 + 29 and model.nv == 6 + 29


def test_builtin_model_mass_geoms_and_options(model: mujoco.MjModel, layout: RobotLayout) -> None:
    total = float(model.body_subtreemass[layout.base_body_id])
    assert 32.0 < total < 37.0  # Menagerie's g1_29dof_rev_1_0 without hands: 33.3 kg
    robot_geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0]
    primitives = {
        int(t) for t in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_SPHERE, mujoco.mjtGeom.mjGEOM_BOX)
    }
    assert {int(model.geom_type[g]) for g in robot_geoms} <= primitives
    assert model.nmesh == 0
    assert model.opt.timestep == TIMESTEP
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert [model.geom(g).name for g in range(model.ngeom) if model.geom_bodyid[g] == 0] == ["floor"]


def test_builtin_model_matches_published_constants(model: mujoco.MjModel, layout: RobotLayout) -> None:
    names = g1.JOINT_NAMES
    np.testing.assert_allclose(model.dof_armature[layout.qvel_adr], [g1.ARMATURE[n] for n in names], rtol=1e-5)
    np.testing.assert_allclose(layout.joint_range, [g1.JOINT_RANGE[n] for n in names], rtol=1e-6)
    np.testing.assert_allclose(layout.ctrl_range, [g1.JOINT_RANGE[n] for n in names], rtol=1e-6)
    np.testing.assert_allclose(layout.kp, [g1.KP[n] for n in names], rtol=1e-5)
    np.testing.assert_allclose(layout.kd, [g1.KD[n] for n in names], rtol=1e-5)
    np.testing.assert_allclose(layout.effort_limit, [g1.EFFORT_LIMIT[n] for n in names])
    # Published figures (mjlab/Unitree): knee 7520-22 motor, wrist pitch 4010 motor.
    assert g1.EFFORT_LIMIT["left_knee_joint"] == 139.0 and g1.EFFORT_LIMIT["right_wrist_pitch_joint"] == 5.0
    assert math.isclose(g1.ARMATURE["left_knee_joint"], 0.025101925, rel_tol=1e-9)


def test_timestep_is_applied_and_validated() -> None:
    assert load_model(None, 0.002).opt.timestep == 0.002
    with pytest.raises(ValueError):
        build_model_xml(None, 0.0)


def test_layout_indexes_the_named_elements(model: mujoco.MjModel, layout: RobotLayout) -> None:
    for i, name in enumerate(g1.JOINT_NAMES):
        joint = model.joint(name)
        assert layout.qpos_adr[i] == joint.qposadr[0] and layout.qvel_adr[i] == joint.dofadr[0]
        assert model.actuator(int(layout.actuator_ids[i])).trnid[0] == joint.id
    assert model.body(layout.base_body_id).name == "pelvis"
    assert [model.body(b).name for b in layout.feet_body_ids] == list(g1.FEET_BODIES)
    assert [model.geom(g).name for g in layout.feet_geom_ids[0]] == ["left_foot_collision"]
    assert [model.body(b).name for b in layout.key_body_ids] == list(g1.KEY_BODIES)
    assert model.geom(layout.floor_geom_id).name == "floor"
    assert set(layout.sensor_adr) == set(g1.SENSORS)
    assert layout.default_qpos.shape == (model.nq,)
    np.testing.assert_allclose(layout.default_qpos[layout.qpos_adr], g1.default_pose_vector())
    assert 0.76 < layout.default_qpos[2] < 0.82  # feet flat on the floor
    assert not layout.default_qpos.flags.writeable


def test_composed_xml_rebuilds_the_same_model(model: mujoco.MjModel) -> None:
    rebuilt = model_from_xml(build_model_xml(None, TIMESTEP))
    for field in ("nq", "nv", "nu", "nbody", "ngeom", "nsensordata"):
        assert getattr(rebuilt, field) == getattr(model, field)
    np.testing.assert_array_equal(rebuilt.body_mass, model.body_mass)


# ---------------------------------------------------------------------------------------------
# Physics.
def test_default_pose_settles_on_the_feet(model: mujoco.MjModel, layout: RobotLayout) -> None:
    data = mujoco.MjData(model)
    _reset(model, data, layout)
    assert data.ncon == 0 or min(data.contact.dist[: data.ncon]) > -1e-3  # starts touching, not buried
    feet = set(layout.feet_geom_ids[0] + layout.feet_geom_ids[1])
    for _ in range(int(0.3 / TIMESTEP)):
        mujoco.mj_step(model, data)
        assert abs(data.qpos[2] - layout.default_qpos[2]) < 0.015
    # Only the feet touch the floor (the hands may come to rest against the hips: self contacts are allowed).
    on_floor = [
        int(c.geom1 + c.geom2 - layout.floor_geom_id)
        for c in data.contact[: data.ncon]
        if layout.floor_geom_id in (c.geom1, c.geom2)
    ]
    touching = set(on_floor)
    assert touching <= feet
    assert set(layout.feet_geom_ids[0]) & touching and set(layout.feet_geom_ids[1]) & touching


def test_stands_for_2s_with_default_targets_and_an_ankle_balance_loop(
    model: mujoco.MjModel, layout: RobotLayout
) -> None:
    """PD alone cannot hold the G1 up: the published ankle stiffness (2 x 28.5 N m/rad) is far below the
    m g h of about 225 N m/rad an inverted pendulum needs, so it tips over in about 1 s. With the default
    pose targets plus a small ankle-strategy loop on the centre of mass, the model (feet, contacts,
    effort limits) must carry the robot standing for 2 s."""
    data = mujoco.MjData(model)
    _reset(model, data, layout)
    names = list(g1.JOINT_NAMES)
    ankles = [names.index("left_ankle_pitch_joint"), names.index("right_ankle_pitch_joint")]
    foot_sites = [model.site(s).id for s in g1.FEET_SITES]
    targets = layout.default_joint_pos.copy()
    for _ in range(int(2.0 / TIMESTEP)):
        mujoco.mj_subtreeVel(model, data)
        offset = data.subtree_com[layout.base_body_id, 0] - data.site_xpos[foot_sites, 0].mean()
        velocity = data.subtree_linvel[layout.base_body_id, 0]
        targets[ankles] = layout.default_joint_pos[ankles] + 15.0 * offset + 2.0 * velocity
        data.ctrl[layout.actuator_ids] = targets
        mujoco.mj_step(model, data)
        assert data.qpos[2] > 0.76
        up = data.xmat[layout.base_body_id].reshape(3, 3)[2, 2]  # cosine of the pelvis tilt
        assert up > math.cos(0.1)
    assert np.linalg.norm(data.qpos[:2]) < 0.1


def test_stable_under_random_actions(model: mujoco.MjModel, layout: RobotLayout) -> None:
    """16 episodes of 2 s, new uniform random targets over the joint ranges every 4 steps, reset on a fall."""
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    low, high = layout.ctrl_range[:, 0], layout.ctrl_range[:, 1]
    bad_qacc = int(mujoco.mjtWarning.mjWARN_BADQACC)
    falls = 0
    for _episode in range(16):
        _reset(model, data, layout)
        for step in range(int(2.0 / TIMESTEP)):
            if step % 4 == 0:
                data.ctrl[layout.actuator_ids] = rng.uniform(low, high)
            mujoco.mj_step(model, data)
            assert np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()
            assert np.abs(data.qvel).max() < 1e3
            assert all(data.warning[w].number == 0 for w in range(len(data.warning))), data.warning[bad_qacc]
            if data.qpos[2] < 0.3:
                falls += 1
                _reset(model, data, layout)
    assert falls > 0  # the targets are violent enough to knock the robot over


# ---------------------------------------------------------------------------------------------
# User MJCFs.
def _builtin_tree() -> ET.ElementTree:
    return ET.parse(BUILTIN_MJCF)


def _write(tree: ET.ElementTree | ET.Element, path: Path) -> Path:
    root = tree.getroot() if isinstance(tree, ET.ElementTree) else tree
    ET.ElementTree(root).write(path)
    return path


def _without(tree: ET.ElementTree, tag: str) -> ET.ElementTree:
    root = tree.getroot()
    for elem in root.findall(tag):
        root.remove(elem)
    return tree


def _cube_obj(path: Path) -> None:
    verts = [(x, y, z) for x in (0, 1) for y in (0, 1) for z in (0, 1)]
    faces = ["1 2 4", "1 4 3", "5 7 8", "5 8 6", "1 5 6", "1 6 2", "3 4 8", "3 8 7", "1 3 7", "1 7 5", "2 6 8", "2 8 4"]
    lines = [f"v {0.05 * x} {0.05 * y} {0.05 * z}" for x, y, z in verts] + [f"f {f}" for f in faces]
    path.write_text("\n".join(lines) + "\n")


def _with_mesh(tree: ET.ElementTree, meshdir: str, mesh_file: str) -> ET.ElementTree:
    root = tree.getroot()
    compiler = root.find("compiler")
    assert compiler is not None
    compiler.set("meshdir", meshdir)
    asset = ET.SubElement(root, "asset")
    ET.SubElement(asset, "mesh", name="pelvis_visual", file=mesh_file)
    pelvis = root.find("./worldbody/body[@name='pelvis']")
    assert pelvis is not None
    ET.SubElement(pelvis, "geom", type="mesh", mesh="pelvis_visual", contype="0", conaffinity="0", density="0")
    return tree


def test_inspect_accepts_the_builtin_file() -> None:
    info = inspect_mjcf(BUILTIN_MJCF)
    assert info.joint_names == g1.JOINT_NAMES
    assert info.actuators == "file"
    assert info.mesh_files == ()
    assert len(info.sha256) == 64 and info.path == BUILTIN_MJCF


def test_user_file_without_actuators_gets_unilab_pd(tmp_path: Path) -> None:
    path = _write(_without(_without(_builtin_tree(), "actuator"), "sensor"), tmp_path / "g1_bare.xml")
    assert inspect_mjcf(path).actuators == "unilab_pd"
    model = load_model(path, TIMESTEP)
    layout = RobotLayout.from_model(model)
    assert model.nu == 29
    np.testing.assert_allclose(layout.kp, [g1.KP[n] for n in g1.JOINT_NAMES], rtol=1e-5)
    np.testing.assert_allclose(layout.effort_limit, [g1.EFFORT_LIMIT[n] for n in g1.JOINT_NAMES])
    assert set(layout.sensor_adr) == set(g1.SENSORS)  # sensors added for the file that had none


def test_user_file_with_its_own_actuators_keeps_them(tmp_path: Path) -> None:
    tree = _builtin_tree()
    for act in tree.getroot().iter("position"):
        if act.get("joint"):
            act.set("kp", "55")
            act.set("kv", "3")
    path = _write(tree, tmp_path / "g1_own_pd.xml")
    assert inspect_mjcf(path).actuators == "file"
    layout = RobotLayout.from_model(load_model(path, TIMESTEP))
    np.testing.assert_allclose(layout.kp, 55.0)
    np.testing.assert_allclose(layout.kd, 3.0)


def test_user_scene_parts_are_replaced_by_unilab_scene(tmp_path: Path) -> None:
    tree = _builtin_tree()
    root = tree.getroot()
    ET.SubElement(root, "option", timestep="0.001", integrator="RK4")
    worldbody = root.find("worldbody")
    assert worldbody is not None
    ET.SubElement(worldbody, "geom", name="floor", type="plane", size="5 5 0.1")
    ET.SubElement(worldbody, "light", pos="0 0 4")
    keyframe = ET.SubElement(root, "keyframe")
    ET.SubElement(keyframe, "key", name="home", qpos=" ".join(["0"] * 36))
    model = load_model(_write(tree, tmp_path / "g1_scene.xml"), TIMESTEP)
    assert model.opt.timestep == TIMESTEP and model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    assert [model.geom(g).name for g in range(model.ngeom) if model.geom_bodyid[g] == 0] == ["floor"]
    assert model.geom("floor").priority[0] == 1
    assert model.nkey == 0


def test_user_file_with_meshes_composes_into_a_self_contained_string(tmp_path: Path) -> None:
    (tmp_path / "meshes").mkdir()
    _cube_obj(tmp_path / "meshes" / "pelvis.obj")
    path = _write(_with_mesh(_builtin_tree(), "meshes", "pelvis.obj"), tmp_path / "g1_mesh.xml")
    info = inspect_mjcf(path)
    assert info.mesh_files == (str((tmp_path / "meshes" / "pelvis.obj").resolve()),)
    xml = build_model_xml(path, TIMESTEP)
    # Workers compile the string without knowing where the file was.
    assert model_from_xml(xml).nmesh == 1


def test_user_file_with_a_missing_mesh_is_refused(tmp_path: Path) -> None:
    path = _write(_with_mesh(_builtin_tree(), "meshes", "pelvis.STL"), tmp_path / "g1_nomesh.xml")
    with pytest.raises(RobotModelError) as err:
        inspect_mjcf(path)
    assert "pelvis.STL" in err.value.summary and err.value.fix
    assert str(tmp_path / "meshes" / "pelvis.STL") in err.value.detail
    with pytest.raises(RobotModelError):
        build_model_xml(path, TIMESTEP)


def test_include_is_followed(tmp_path: Path) -> None:
    tree = _builtin_tree()
    root = tree.getroot()
    actuator = root.find("actuator")
    assert actuator is not None
    root.remove(actuator)
    (tmp_path / "parts").mkdir()
    wrapper = ET.Element("mujoco")
    wrapper.append(actuator)
    _write(wrapper, tmp_path / "parts" / "actuators.xml")
    ET.SubElement(root, "include", file="parts/actuators.xml")
    path = _write(tree, tmp_path / "g1_main.xml")
    assert inspect_mjcf(path).actuators == "file"
    assert load_model(path, TIMESTEP).nu == 29

    broken = _builtin_tree()
    ET.SubElement(broken.getroot(), "include", file="parts/missing.xml")
    with pytest.raises(RobotModelError, match=r"missing\.xml"):
        inspect_mjcf(_write(broken, tmp_path / "g1_broken_include.xml"))


def test_inspect_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RobotModelError, match="not found") as err:
        inspect_mjcf(tmp_path / "nope.xml")
    assert err.value.fix


def test_inspect_refuses_non_xml_and_non_mjcf(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.xml"
    garbage.write_text("<mujoco><worldbody></mujoco>")
    with pytest.raises(RobotModelError, match="not valid XML"):
        inspect_mjcf(garbage)
    urdf = tmp_path / "g1.urdf"
    urdf.write_text('<robot name="g1"><link name="pelvis"/></robot>')
    with pytest.raises(RobotModelError, match="<robot>"):
        inspect_mjcf(urdf)


def test_inspect_names_missing_and_unexpected_joints(tmp_path: Path) -> None:
    tree = _builtin_tree()
    joint = tree.getroot().find(".//joint[@name='left_knee_joint']")
    assert joint is not None
    joint.set("name", "left_knee")
    with pytest.raises(RobotModelError) as err:
        inspect_mjcf(_write(_without(tree, "actuator"), tmp_path / "g1_renamed.xml"))
    assert "missing: left_knee_joint" in err.value.summary
    assert "unexpected: left_knee" in err.value.summary


def test_inspect_refuses_partial_actuators(tmp_path: Path) -> None:
    tree = _builtin_tree()
    actuator = tree.getroot().find("actuator")
    assert actuator is not None
    for act in list(actuator)[15:]:  # keep legs and waist only
        actuator.remove(act)
    with pytest.raises(RobotModelError, match="actuators cover only part") as err:
        inspect_mjcf(_write(tree, tmp_path / "g1_partial.xml"))
    assert "left_shoulder_pitch_joint" in err.value.detail


def test_inspect_refuses_torque_motors(tmp_path: Path) -> None:
    tree = _builtin_tree()
    actuator = tree.getroot().find("actuator")
    assert actuator is not None
    for act in actuator:
        act.tag = "motor"
        for attr in ("kp", "kv", "class", "ctrlrange"):
            act.attrib.pop(attr, None)
    with pytest.raises(RobotModelError, match="none of its 29 actuators is a joint position actuator") as err:
        inspect_mjcf(_write(tree, tmp_path / "g1_motors.xml"))
    assert "not joint position actuators" in err.value.detail


def test_inspect_requires_a_free_joint_on_the_pelvis(tmp_path: Path) -> None:
    tree = _builtin_tree()
    pelvis = tree.getroot().find("./worldbody/body[@name='pelvis']")
    assert pelvis is not None
    free = pelvis.find("freejoint")
    assert free is not None
    pelvis.remove(free)
    with pytest.raises(RobotModelError, match="free joint"):
        inspect_mjcf(_write(tree, tmp_path / "g1_fixed.xml"))
