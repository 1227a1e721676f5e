"""The package declares what it imports, and the default install stays the lean CPU runtime:
every third-party import in unilab/ is a declared dependency, and a module imported at load time
imports only core dependencies (an extra's package is imported inside the function that needs it,
through unilab.extras, so its absence is refused by name)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "unilab"


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return core, extras


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, imported at load time) for every import in the file; imports under
    `if TYPE_CHECKING:` do not run."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, at_load: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], at_load) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module.split(".")[0], at_load))
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, at_load and not nested)

    visit(tree, True)
    return found


def _third_party() -> list[tuple[Path, str, frozenset[str], bool]]:
    """(file, module, the distributions that provide it, at load time) for every import of an
    installed distribution (a module may ship in several: mujoco in mujoco and mujoco-core)."""
    dists = md.packages_distributions()
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, at_load in _imports(path):
            if module in sys.stdlib_module_names or module in ("unilab", "__future__"):
                continue
            names = dists.get(module)
            if not names:
                pytest.fail(f"{path.relative_to(ROOT)} imports {module}, which no installed distribution provides")
            out.append((path, module, frozenset(n.lower().replace("_", "-") for n in names), at_load))
    return out


def test_every_third_party_import_is_declared() -> None:
    core, extras = _declared()
    declared = core.union(*extras.values())
    missing = sorted(
        {f"{p.relative_to(ROOT)}: {m} ({', '.join(d)})" for p, m, d, _ in _third_party() if not d & declared}
    )
    assert not missing, "imported but not declared in pyproject.toml:\n" + "\n".join(missing)


def test_load_time_imports_are_core_dependencies() -> None:
    core, _ = _declared()
    lazy = sorted(
        {
            f"{p.relative_to(ROOT)}: {m} ({', '.join(d)})"
            for p, m, d, at_load in _third_party()
            if at_load and not d & core
        }
    )
    assert not lazy, (
        "an extra's package imported when the module loads (import it inside the function that needs it, "
        "through unilab.extras.require):\n" + "\n".join(lazy)
    )


def test_every_extra_is_described_and_installs_what_unilab_names() -> None:
    from unilab.extras import EXTRAS

    _, extras = _declared()
    for extra, (_, dists) in EXTRAS.items():
        assert extra in extras, f"unilab.extras names the extra {extra!r}, which pyproject.toml lacks"
        assert set(dists) <= extras[extra], f"the {extra} extra does not install {dists}"
    assert {"all", "test"} <= set(extras)
    assert set(EXTRAS) | {"all", "test"} == set(extras), "an extra unilab.extras does not describe"


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).is_file():
        pytest.fail("uv is not installed; the test extra installs it (bash tools/setup.sh test)")
    return found


def test_the_lock_and_its_export_match_pyproject(tmp_path: Path) -> None:
    """uv.lock resolves pyproject.toml as it is now, and tools/constraints.txt (what setup.sh and CI
    install) is its export: after a dependency change, `bash tools/lock.sh` rewrites both. Checked
    offline, from an empty cache: a current lock needs no index to be proven current."""
    r = subprocess.run(
        [_uv(), "export", "--locked", "--offline", "--no-hashes", "--no-emit-project", "--all-extras",
         "--format", "requirements-txt", "--no-python-downloads", "--python", sys.executable, "--project", str(ROOT)],
        capture_output=True, text=True, env={**os.environ, "UV_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert r.returncode == 0, f"uv.lock is out of date with pyproject.toml; run bash tools/lock.sh\n{r.stderr}"
    want = r.stdout
    have = (ROOT / "tools" / "constraints.txt").read_text()
    assert have.split("\n", 2)[2] == want.split("\n", 2)[2], "tools/constraints.txt differs from uv.lock's export"


def test_setup_installs_the_locked_versions() -> None:
    """setup.sh takes torch's version from uv.lock and installs everything under tools/constraints.txt."""
    setup = (ROOT / "tools" / "setup.sh").read_text()
    assert not re.search(r"torch==\d", setup), "setup.sh must read torch's version from uv.lock"
    assert setup.count('--constraint "$lock"') == 2, "torch's CUDA build and unilab install under the lock"
    constraints = (ROOT / "tools" / "constraints.txt").read_text()
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    torch = [p["version"] for p in lock["package"] if p["name"] == "torch"]
    assert len(torch) == 1 and f"\ntorch=={torch[0]}\n" in constraints


def test_physics_engines_are_bounded_to_the_tested_releases() -> None:
    """pyproject.toml's bounds on MuJoCo and MuJoCo Warp are the releases rule sim.tested-versions
    accepts, and the locked versions are among them."""
    from unilab.host.tested import is_tested, tested_range

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *project["optional-dependencies"]["gpu"]]
    lock = {p["name"]: p["version"] for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]}
    for dist in ("mujoco", "mujoco-warp"):
        (req,) = [r.replace(" ", "") for r in reqs if _name(r) == dist]
        assert req == tested_range(dist), f"pyproject.toml has {req}, unilab.host.tested {tested_range(dist)}"
        assert is_tested(dist, lock[dist]), f"uv.lock has {dist} {lock[dist]}, outside the tested releases"
