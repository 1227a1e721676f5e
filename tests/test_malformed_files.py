"""Every command that reads a file the user names, against a corpus of malformed files: one
clear paragraph and a non-zero exit, never a traceback or an "internal error", never a read of
more than the file's stated limit (docs/running.md, "Limits on the files you name").

The corpus is generated here, per kind of file: empty, random bytes, not UTF-8, a NUL byte,
truncated, runaway nesting, the wrong kind of file, a directory, a device, and past the size
limit; and for motion clips and robot files the ways their own formats go wrong."""

from __future__ import annotations

import io
import json
import random
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import FIXTURES, SPECS
from unilab.cli.main import main

HOST = str(FIXTURES / "hosts" / "cpu_laptop.json")
Maker = Callable[[Path], Path]


def _bytes(data: bytes, name: str) -> Maker:
    def make(d: Path) -> Path:
        p = d / name
        p.write_bytes(data)
        return p

    return make


def _sparse(size: int, name: str) -> Maker:
    def make(d: Path) -> Path:
        p = d / name
        with open(p, "wb") as f:
            f.truncate(size)  # past the limit without writing it: the limit must refuse it unread
        return p

    return make


def _directory(name: str) -> Maker:
    def make(d: Path) -> Path:
        (d / name).mkdir()
        return d / name

    return make


def _device(name: str) -> Maker:
    def make(d: Path) -> Path:
        (d / name).symlink_to("/dev/zero")
        return d / name

    return make


RANDOM = random.Random(7).randbytes(4096)


def _common(suffix: str, valid: bytes, nested: bytes) -> dict[str, Maker]:
    return {
        "empty": _bytes(b"", f"empty{suffix}"),
        "random": _bytes(RANDOM, f"random{suffix}"),
        "not-utf8": _bytes(b"\xff\xfe" + valid[:200], f"latin{suffix}"),
        "nul": _bytes(valid[:100] + b"\0" + valid[100:], f"nul{suffix}"),
        "truncated": _bytes(valid[: len(valid) // 2], f"half{suffix}"),
        "nested": _bytes(nested, f"deep{suffix}"),
        "directory": _directory(f"dir{suffix}"),
        "device": _device(f"zero{suffix}"),
        "huge": _sparse(65 * 2**20, f"huge{suffix}"),
    }


SPEC_TEXT = (SPECS / "g1.toml").read_bytes()
DEEP_TOML = b"schema_version = 1\nx = " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
DEEP_JSON = b"[" * 50_000 + b"]" * 50_000
HOST_TEXT = Path(HOST).read_bytes()


def _many_gpus(d: Path) -> Path:
    facts = json.loads(HOST_TEXT)
    facts["nvidia"]["driver_present"] = True
    gpu = {"index": 0, "uuid": "GPU-0", "name": "x", "memory_total_mib": 1}
    facts["nvidia"]["gpus"] = [dict(gpu, index=i, uuid=f"GPU-{i}") for i in range(100_000)]
    p = d / "gpus.json"
    p.write_text(json.dumps(facts))
    return p


def _npz(arrays: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in arrays.items():
            z.writestr(f"{name}.npy", data)
    return buf.getvalue()


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()  # the magic string, the version and the header


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


MOTION = {
    "not-zip": _bytes(RANDOM, "m.npz"),
    "npy-not-npz": _bytes(_npy(np.zeros(3)), "m.npz"),
    "empty-zip": _bytes(_npz({}), "m.npz"),
    "claims-2^40-elements": _bytes(_npz({"fps": _npy(np.array(50.0)), "joint_pos": _npy_header((2**40, 29))}), "m.npz"),
    "object-array": _bytes(_npz({"fps": _npy(np.array(50.0)), "joint_pos": _npy_header((2, 29), "|O")}), "m.npz"),
    "truncated-member": _bytes(
        _npz({"fps": _npy(np.array(50.0)), "joint_pos": _npy(np.zeros((10, 29)))[:90]}), "m.npz"
    ),
    "missing-keys": _bytes(_npz({"fps": _npy(np.array(50.0))}), "m.npz"),
    "directory": _directory("m.npz"),
}

MJCF = {
    "not-xml": _bytes(RANDOM, "r.xml"),
    "empty": _bytes(b"", "r.xml"),
    "urdf": _bytes(b"<robot name='g1'/>", "r.xml"),
    "nested": _bytes(b"<mujoco><worldbody>" + b"<body>" * 5000 + b"</body>" * 5000 + b"</worldbody></mujoco>", "r.xml"),
    "no-joints": _bytes(b"<mujoco><worldbody><body name='pelvis'/></worldbody></mujoco>", "r.xml"),
    "include-loop": _bytes(b"<mujoco><include file='r.xml'/></mujoco>", "r.xml"),
    "huge": _sparse(17 * 2**20, "r.xml"),
    "device": _device("r.xml"),
}

CASES: list[tuple[str, str, Maker]] = [
    *((f"spec-{k}", "spec", m) for k, m in _common(".toml", SPEC_TEXT, DEEP_TOML).items()),
    *((f"plan-{k}", "plan", m) for k, m in _common(".toml", SPEC_TEXT, DEEP_TOML).items()),
    *((f"facts-{k}", "facts", m) for k, m in _common(".json", HOST_TEXT, DEEP_JSON).items()),
    ("facts-100k-gpus", "facts", _many_gpus),
    ("facts-spec-instead", "facts", _bytes(SPEC_TEXT, "facts.json")),
    *((f"manifest-{k}", "manifest", m) for k, m in _common(".json", HOST_TEXT, DEEP_JSON).items()),
    ("manifest-facts-instead", "manifest", _bytes(HOST_TEXT, "manifest.json")),
    *((f"motion-{k}", "motion", m) for k, m in MOTION.items()),
    *((f"mjcf-{k}", "mjcf", m) for k, m in MJCF.items()),
]


def _argv(kind: str, path: Path) -> list[list[str]]:
    """The commands that read a file of this kind."""
    if kind == "spec":
        return [["plan", str(path), "--host-facts", HOST], ["apply", str(path)]]
    if kind == "plan":  # a saved plan: diff and apply read it as one
        return [["diff", str(path), str(path)], ["apply", str(path)]]
    if kind == "facts":
        return [["plan", str(SPECS / "g1.toml"), "--host-facts", str(path)]]
    if kind == "manifest":
        return [["manifest", "validate", str(path)]]
    if kind == "motion":
        spec = str(SPECS / "g1_motion_tracking.toml")
        return [["plan", spec, "--host-facts", HOST, "--set", f'task.motion="{path}"']]
    return [["plan", str(SPECS / "g1.toml"), "--host-facts", HOST, "--set", f'task.robot_mjcf="{path}"']]


@pytest.mark.parametrize(("kind", "make"), [(k, m) for _, k, m in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_file_gets_one_clear_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str, make: Maker
) -> None:
    monkeypatch.chdir(tmp_path)  # an apply that got through would write its run here, not in the tree
    path = make(tmp_path)
    for argv in _argv(kind, path):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc != 0, (argv, err)
        assert err.startswith("error:") and "Traceback" not in err and "internal error" not in err, (argv, err)
        assert str(path.name) in err or (kind in ("facts",) and "host facts" in err), (argv, err)
    assert not (tmp_path / "runs").exists()
