"""Plan-time check of a user's G1 MJCF: standard library only (the planner imports this).

Reads the file as XML (no MuJoCo), follows ``<include>`` files, and refuses, with a
``RobotModelError`` naming the first problem, a file that unilab could not run: missing, not
MJCF, asset files missing, joints that are not the G1's 29, missing bodies the tasks use, no
free joint on the pelvis, or actuators that cover only some joints.
"""

from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from unilab.digests import file_sha256
from unilab.errors import RobotModelError
from unilab.inputfile import read_input
from unilab.robot.g1 import ANCHOR_BODY, BASE_BODY, FEET_BODIES, JOINT_NAMES, KEY_BODIES

_MAX_INCLUDE_DEPTH = 8
# Asset elements whose ``file`` resolves against meshdir; textures resolve against texturedir.
_MESHDIR_ASSETS = ("mesh", "skin", "hfield")
_TEXTURE_FILE_ATTRS = ("file", "fileright", "fileleft", "fileup", "filedown", "filefront", "fileback")
_ACTUATOR_TAGS = (
    "general", "motor", "position", "velocity", "intvelocity", "damper", "cylinder", "muscle", "adhesion",
    "dcmotor", "plugin",
)  # fmt: skip
_FIX_BUILTIN = "or remove task.robot_mjcf to use unilab's builtin G1"


@dataclass(frozen=True)
class MjcfInfo:
    """What the planner needs to know about a user's robot file."""

    path: Path  # resolved absolute path
    # Of the model as MuJoCo would compile it: the main file, the files it includes and the asset
    # files they reference (``mjcf_digest``).
    sha256: str
    joint_names: tuple[str, ...]  # hinge and slide joints, in document order
    # "file": the file's position actuators drive all 29 joints; "unilab_pd": no actuators, unilab adds its PD.
    actuators: Literal["unilab_pd", "file"]
    mesh_files: tuple[str, ...]  # resolved absolute paths of the mesh files the model references
    # Bodies in document order, which is MuJoCo's body order (world excluded): the body axis of a
    # reference motion must match it.
    body_names: tuple[str, ...] = ()


def builtin_mjcf_path() -> Path:
    """unilab's own G1 MJCF, shipped in the package."""
    return Path(__file__).resolve().parent / "assets" / "g1.xml"


def inspect_mjcf(path: Path) -> MjcfInfo:
    """Check a user's G1 MJCF without MuJoCo; raise ``RobotModelError`` on the first problem."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise RobotModelError(
            f"robot MJCF is a directory, not a file: {path}" if path.is_dir() else f"robot MJCF not found: {path}",
            detail="task.robot_mjcf must name an existing MJCF file; a relative path, in the spec or in --set, "
            "resolves against the spec file's directory.",
            fix=f"correct the path in task.robot_mjcf, {_FIX_BUILTIN}",
        )
    path = path.resolve()
    root, files = _read_model(path)
    defaults = _DefaultTable(root)
    mesh_files, asset_files = _check_assets(root, path)
    worldbody_joints = _collect_joints(root, defaults)
    joint_names = _check_joints(path, worldbody_joints)
    _check_bodies(path, root)
    actuators = _check_actuators(path, root, defaults)
    return MjcfInfo(
        path=path,
        sha256=_digest(path, [*files, *asset_files]),
        joint_names=joint_names,
        actuators=actuators,
        mesh_files=mesh_files,
        body_names=tuple(b.get("name") or "" for wb in root.findall("worldbody") for b in wb.iter("body")),
    )


# ---------------------------------------------------------------------------------------------
# Parsing and includes.
MAX_MJCF_BYTES = 16 * 2**20  # Menagerie's G1 XML is about 30 kB; meshes are separate files
MAX_MJCF_DEPTH = 256  # element nesting; Menagerie's G1 nests its bodies about 15 deep


def _depth(root: ET.Element) -> int:
    """The element nesting depth, without recursion (a recursive walk is what a deep file breaks)."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        elem, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_MJCF_DEPTH:
            break
        stack.extend((child, d + 1) for child in elem)
    return deepest


def _parse(path: Path, data: bytes) -> ET.Element:
    if len(data) > MAX_MJCF_BYTES:
        raise RobotModelError(
            f"robot MJCF {path} is larger than {MAX_MJCF_BYTES // 2**20} MiB: not a robot model",
            fix=f"pass the robot's MJCF file (meshes stay in their own files), {_FIX_BUILTIN}",
        )
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise RobotModelError(
            f"robot MJCF is not valid XML: {path}",
            detail=f"XML parser: {exc}",
            fix=f"fix the XML syntax of {path.name}, {_FIX_BUILTIN}",
        ) from exc
    if root.tag != "mujoco":
        raise RobotModelError(
            f"robot MJCF has root element <{root.tag}>, not <mujoco>: {path}",
            detail="task.robot_mjcf must be a MuJoCo MJCF file (URDF is not accepted).",
            fix=f"convert the model to MJCF (e.g. load the URDF in MuJoCo and save it as XML), {_FIX_BUILTIN}",
        )
    if _depth(root) > MAX_MJCF_DEPTH:
        raise RobotModelError(
            f"robot MJCF {path} nests its elements more than {MAX_MJCF_DEPTH} deep: not a robot model",
            fix=f"check {path.name} for runaway nesting, {_FIX_BUILTIN}",
        )
    return root


def mjcf_digest(path: Path) -> str:
    """The digest a plan records for a user's MJCF: of the main file alone when it includes and
    references no other file, else of every file of the model (the main file, its includes and
    their asset files, each with its path relative to the main file), so an edited include or mesh
    changes it too. Raises ``RobotModelError`` when a file of the model is missing."""
    path = Path(path).expanduser().resolve()
    root, files = _read_model(path)
    return _digest(path, [*files, *_check_assets(root, path)[1]])


def mjcf_matches(path: Path, digest: str) -> bool:
    """Whether a user's MJCF still is the model a plan recorded: ``mjcf_digest``, or for a plan made
    before includes and assets were digested, the main file's own sha256 (what such a plan
    promised). Raises like ``mjcf_digest``."""

    return mjcf_digest(path) == digest or file_sha256(Path(path).expanduser().resolve()) == digest


def _read_model(path: Path) -> tuple[ET.Element, list[Path]]:
    """The main file's XML with every include expanded, and the included files (resolved)."""
    root = _parse(path, read_input(path, "robot MJCF", MAX_MJCF_BYTES + 1))
    included: list[Path] = []
    _expand_includes(root, path.parent, path.parent, depth=0, stack=(path,), included=included)
    return root, included


def _digest(main: Path, others: list[Path]) -> str:
    rest = sorted({p for p in others if p != main}, key=str)
    if not rest:  # a one-file model: the file's own digest, as plans have always recorded it
        return file_sha256(main)
    h = hashlib.sha256()
    for p in (main, *rest):
        h.update(f"{os.path.relpath(p, main.parent)}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def _expand_includes(
    elem: ET.Element, includer_dir: Path, main_dir: Path, depth: int, stack: tuple[Path, ...], included: list[Path]
) -> None:
    """Replace every ``<include file=...>`` below ``elem`` by the children of the included root."""
    idx = 0
    while idx < len(elem):
        child = elem[idx]
        if child.tag != "include":
            _expand_includes(child, includer_dir, main_dir, depth, stack, included)
            idx += 1
            continue
        sub = _load_include(child.get("file"), includer_dir, main_dir, depth, stack, included)
        elem.remove(child)
        for offset, grandchild in enumerate(list(sub)):
            elem.insert(idx + offset, grandchild)
        idx += len(sub)


def _load_include(
    name: str | None, includer_dir: Path, main_dir: Path, depth: int, stack: tuple[Path, ...], included: list[Path]
) -> ET.Element:
    if not name:
        raise RobotModelError(
            f"robot MJCF {stack[0].name}: <include> without a file attribute",
            fix="give every <include> a file attribute",
        )
    # MuJoCo looks next to the including file, then next to the main file.
    candidates = [Path(name)] if Path(name).is_absolute() else [includer_dir / name, main_dir / name]
    candidates = list(dict.fromkeys(candidates))  # the includer is often the main file: one place, named once
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise RobotModelError(
            f"robot MJCF {stack[0].name}: included file not found: {name}",
            detail=f"looked for {', '.join(str(c) for c in candidates)}",
            fix=f"put {name} next to {stack[-1].name} or correct the <include file=...> path",
        )
    found = found.resolve()
    if found in stack or depth >= _MAX_INCLUDE_DEPTH:
        raise RobotModelError(
            f"robot MJCF {stack[0].name}: include cycle or includes nested deeper than {_MAX_INCLUDE_DEPTH}",
            detail=" -> ".join(p.name for p in (*stack, found)),
            fix="remove the circular <include>",
        )
    included.append(found)
    sub = _parse(found, read_input(found, "robot MJCF include", MAX_MJCF_BYTES + 1))
    _expand_includes(sub, found.parent, main_dir, depth + 1, (*stack, found), included)
    return sub


# ---------------------------------------------------------------------------------------------
# Default classes (only what the checks need: joint type, general actuator bias type).
class _DefaultTable:
    def __init__(self, root: ET.Element) -> None:
        self.attrs: dict[str, dict[str, dict[str, str]]] = {}
        for top in root.findall("default"):
            self._walk(top, parent={})

    def _walk(self, node: ET.Element, parent: dict[str, dict[str, str]]) -> None:
        name = node.get("class", "main")
        own = {tag: dict(d) for tag, d in parent.items()}
        for child in node:
            if child.tag != "default":
                own.setdefault(child.tag, {}).update(child.attrib)
        self.attrs[name] = own
        for child in node:
            if child.tag == "default":
                self._walk(child, own)

    def get(self, cls: str, tag: str, attr: str, fallback: str) -> str:
        return self.attrs.get(cls, self.attrs.get("main", {})).get(tag, {}).get(attr, fallback)


# ---------------------------------------------------------------------------------------------
# Assets.
def _check_assets(root: ET.Element, path: Path) -> tuple[tuple[str, ...], list[Path]]:
    """(the mesh files, every asset file) the model references, resolved; refuses a missing one."""
    meshdir = texturedir = ""
    strip = False
    for compiler in root.iter("compiler"):
        assetdir = compiler.get("assetdir")
        if assetdir is not None:
            meshdir = texturedir = assetdir
        meshdir = compiler.get("meshdir", meshdir)
        texturedir = compiler.get("texturedir", texturedir)
        strip = compiler.get("strippath", "true" if strip else "false") == "true"

    def resolve(name: str, directory: str) -> Path:
        if strip:
            name = Path(name).name
        if Path(name).is_absolute():
            return Path(name)
        return (path.parent / directory / name).resolve()

    referenced: list[tuple[str, Path]] = []
    meshes: list[str] = []
    for asset in root.iter("asset"):
        for elem in asset:
            if elem.tag in _MESHDIR_ASSETS and elem.get("file"):
                resolved = resolve(elem.get("file", ""), meshdir)
                referenced.append((elem.get("file", ""), resolved))
                if elem.tag == "mesh" and str(resolved) not in meshes:
                    meshes.append(str(resolved))
            elif elem.tag == "texture":
                for attr in _TEXTURE_FILE_ATTRS:
                    if elem.get(attr):
                        referenced.append((elem.get(attr, ""), resolve(elem.get(attr, ""), texturedir)))
    missing = [(name, resolved) for name, resolved in referenced if not resolved.is_file()]
    if missing:
        name, resolved = missing[0]
        more = f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""
        raise RobotModelError(
            f"robot MJCF {path.name}: asset file not found: {name}{more}",
            detail=f"resolved to {resolved} (compiler meshdir={meshdir!r}, texturedir={texturedir!r}, "
            f"relative to {path.parent})",
            fix="copy the mesh/texture files next to the model as its <compiler meshdir=...> says, "
            f"or correct the paths, {_FIX_BUILTIN}",
        )
    return tuple(meshes), [resolved for _, resolved in referenced]


# ---------------------------------------------------------------------------------------------
# Joints and bodies.
@dataclass(frozen=True)
class _Joint:
    name: str | None
    type: str
    body: str | None


def _collect_joints(root: ET.Element, defaults: _DefaultTable) -> list[_Joint]:
    joints: list[_Joint] = []

    def walk(node: ET.Element, childclass: str, body: str | None) -> None:
        for child in node:
            if child.tag in ("body", "frame"):
                walk(child, child.get("childclass", childclass), child.get("name") if child.tag == "body" else body)
            elif child.tag == "freejoint":
                joints.append(_Joint(child.get("name"), "free", body))
            elif child.tag == "joint":
                cls = child.get("class", childclass)
                jtype = child.get("type") or defaults.get(cls, "joint", "type", "hinge")
                joints.append(_Joint(child.get("name"), jtype, body))

    for worldbody in root.findall("worldbody"):
        walk(worldbody, "main", None)
    return joints


def _check_joints(path: Path, joints: list[_Joint]) -> tuple[str, ...]:
    expected = set(JOINT_NAMES)
    actuated = [j for j in joints if j.type in ("hinge", "slide")]
    names = tuple(j.name or "<unnamed>" for j in actuated)
    missing = [n for n in JOINT_NAMES if n not in names]
    unexpected = [n for n in names if n not in expected]
    unexpected += [f"{j.name or '<unnamed>'} ({j.type})" for j in joints if j.type not in ("hinge", "slide", "free")]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if missing or unexpected or duplicated:
        parts = []
        if missing:
            parts.append(f"missing: {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected: {', '.join(unexpected)}")
        if duplicated:
            parts.append(f"repeated: {', '.join(duplicated)}")
        raise RobotModelError(
            f"robot MJCF {path.name}: joints do not match the G1's 29 joints ({'; '.join(parts)})",
            detail=f"found {len(names)} hinge/slide joints; unilab expects exactly: {', '.join(JOINT_NAMES)}",
            fix="rename the joints to Unitree's g1_29dof names (as in MuJoCo Menagerie's unitree_g1), "
            f"remove extra joints (e.g. hand joints), {_FIX_BUILTIN}",
        )
    free = [j for j in joints if j.type == "free"]
    if len(free) != 1 or free[0].body != BASE_BODY:
        where = ", ".join(f"on {j.body!r}" for j in free) or "none"
        raise RobotModelError(
            f"robot MJCF {path.name}: needs exactly one free joint, on body {BASE_BODY!r} (found: {where})",
            fix=f'add <freejoint/> as the first child of <body name="{BASE_BODY}">',
        )
    return names


def _check_bodies(path: Path, root: ET.Element) -> None:
    bodies = {b.get("name") for wb in root.findall("worldbody") for b in wb.iter("body")}
    required = (BASE_BODY, ANCHOR_BODY, *FEET_BODIES, *KEY_BODIES)
    missing = [name for name in dict.fromkeys(required) if name not in bodies]
    if missing:
        raise RobotModelError(
            f"robot MJCF {path.name}: bodies the tasks use are missing: {', '.join(missing)}",
            detail="unilab's tasks read the pelvis, the feet and the motion-tracking key bodies by name.",
            fix=f"name the bodies as in Unitree's g1_29dof model, {_FIX_BUILTIN}",
        )


# ---------------------------------------------------------------------------------------------
# Actuators.
def _check_actuators(path: Path, root: ET.Element, defaults: _DefaultTable) -> Literal["unilab_pd", "file"]:
    elems = [e for section in root.findall("actuator") for e in section if e.tag in _ACTUATOR_TAGS]
    if not elems:
        return "unilab_pd"
    per_joint: dict[str, list[str]] = {}
    not_position: list[str] = []
    for e in elems:
        label = e.get("name") or f"<{e.tag} joint={e.get('joint')!r}>"
        cls = e.get("class", "main")
        is_position = e.tag == "position" or (
            e.tag == "general" and (e.get("biastype") or defaults.get(cls, "general", "biastype", "none")) == "affine"
        )
        joint = e.get("joint")
        if not is_position or joint is None:
            not_position.append(label)
            continue
        per_joint.setdefault(joint, []).append(label)
    uncovered = [n for n in JOINT_NAMES if n not in per_joint]
    repeated = [n for n, acts in per_joint.items() if len(acts) > 1]
    if not_position or uncovered or repeated:
        parts = []
        if uncovered:
            parts.append(f"joints without a position actuator: {', '.join(uncovered)}")
        if not_position:
            parts.append(f"actuators that are not joint position actuators: {', '.join(not_position)}")
        if repeated:
            parts.append(f"joints with more than one actuator: {', '.join(repeated)}")
        summary = (  # e.g. 29 <motor>s: they cover every joint, but not as position actuators
            f"robot MJCF {path.name}: none of its {len(elems)} actuators is a joint position actuator"
            if not per_joint
            else f"robot MJCF {path.name}: actuators cover only part of the G1 ({len(elems)} actuators)"
        )
        raise RobotModelError(
            summary,
            detail="; ".join(parts) + ". A file either has one position actuator per joint for all 29 joints "
            "(unilab keeps them) or none (unilab adds its PD position actuators).",
            fix="remove the whole <actuator> section to use unilab's PD gains, or give each of the 29 joints "
            "exactly one <position> actuator",
        )
    return "file"
