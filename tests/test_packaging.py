"""The package declares what it imports, and the default install stays the lean CPU runtime:
every third-party import in unilab/ is a declared dependency, and a module imported at load time
imports only core dependencies (an extra's package is imported inside the function that needs it,
through unilab.extras, so its absence is refused by name)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
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


def test_torch_has_one_pin_read_by_setup_sh() -> None:
    core_reqs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [r for r in core_reqs if _name(r) == "torch"]
    assert len(pins) == 1 and re.fullmatch(r"torch==\d+\.\d+\.\d+", pins[0].replace(" ", "")), pins
    setup = (ROOT / "tools" / "setup.sh").read_text()
    assert not re.search(r"torch==\d", setup), "setup.sh must read the torch pin from pyproject.toml"
