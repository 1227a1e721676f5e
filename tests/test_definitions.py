"""Records, not names: the planner and the runtime ask a task's `TaskDef` and a physics backend's
`BackendDef` what it can do; no code outside `unilab/tasks/` compares a task's name or tests a task
spec class, none outside `unilab/sim/` compares `sim.backend` to a backend's name (a new task is
then one package, a new backend one record and one factory branch, docs/extending.md)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from unilab.errors import UnilabError
from unilab.sim.backends import BACKENDS, CPU_BACKEND, CUDA_BACKEND, backend_def
from unilab.tasks.registry import TASKS, task_def


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _nodes(root: Path, outside: str | tuple[str, ...]) -> Iterator[tuple[str, ast.AST]]:
    """(`file`, node) of every AST node of the modules under ``root``/unilab outside ``outside``
    (path prefixes relative to ``root``), each file parsed once per test session."""
    for path in sorted((root / "unilab").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(outside):
            for node in ast.walk(_parsed(path)):
                yield rel, node


def _name_comparisons(names: set[str], outside: str, root: Path = ROOT, about: str = "backend|physics") -> list[str]:
    """`file:line` of each comparison (==, !=, in, not in) with one of ``names`` as a string
    constant and an operand whose source mentions one of ``about`` (`root.tag != "mujoco"` is the
    MJCF's root element, not a backend), in the modules under ``root``/unilab outside the package
    directory ``outside``."""
    found = []
    for rel, node in _nodes(root, outside):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        consts = [
            c.value
            for o in operands
            for c in ([o] if not isinstance(o, ast.Tuple | ast.List | ast.Set) else o.elts)
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        ]
        if set(consts) & names and any(w in ast.unparse(o) for o in operands for w in about.split("|")):
            found.append(f"{rel}:{node.lineno}")
    return found


def _isinstance_checks(classes: set[str], outside: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """`file:line` of each isinstance/issubclass call naming one of ``classes``, outside ``outside``."""
    return [
        f"{rel}:{node.lineno}"
        for rel, node in _nodes(root, outside)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) in ("isinstance", "issubclass")
        and {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & classes
    ]


def _mentions(names: set[str], outside: tuple[str, ...], root: Path = ROOT) -> list[str]:
    """`file:line` of each use of one of ``names`` (a name, an attribute, an import) outside ``outside``."""
    found = []
    for rel, node in _nodes(root, outside):
        used = (
            getattr(node, "id", None) if isinstance(node, ast.Name) else
            node.attr if isinstance(node, ast.Attribute) else
            node.name if isinstance(node, ast.alias) else None
        )  # fmt: skip
        if used in names:
            found.append(f"{rel}:{getattr(node, 'lineno', 0)}")
    return found


def test_no_task_name_or_task_spec_class_is_used_outside_the_tasks_package() -> None:
    assert _name_comparisons(set(TASKS), "unilab/tasks/", about="task|name") == []
    # Each task's `[task]` model lives in its package; the spec and the plan take them from the registry.
    assert all(d.spec.__module__ == f"unilab.tasks.{name}.spec" for name, d in TASKS.items())
    own = {d.spec.__name__ for d in TASKS.values()} | {"CommandRanges", "TrackingStd"}
    plans = {f"{d.spec.__name__.removesuffix('Spec')}Plan" for d in TASKS.values()}
    assert {"G1WalkSpec", "CartpoleSpec", "CartpolePlan"} <= own | plans
    assert _mentions(own | plans, ("unilab/tasks/",)) == []
    assert _isinstance_checks({"G1TaskSpec"}, ("unilab/tasks/",)) == []


def test_no_algorithm_name_or_spec_class_is_used_outside_the_algorithm_packages() -> None:
    """Families (`ReplayAlgoSpec`: the replay learners' keys) may be tested; one algorithm may not."""
    from unilab.algos.registry import ALGOS

    assert _name_comparisons(set(ALGOS), "unilab/algos/", about="algo|name") == []
    assert all(d.spec.__module__ == f"unilab.algos.{name}.spec" for name, d in ALGOS.items())
    own = {d.spec.__name__ for d in ALGOS.values()}
    assert own == {"SacSpec", "FlashSacSpec", "Td3Spec", "PpoSpec"}
    assert _mentions(own, ("unilab/algos/",)) == []


def test_the_use_finder_finds_one(tmp_path: Path) -> None:
    """The check above can fail: a module outside the package that imports a task's model is reported."""
    (tmp_path / "unilab" / "tasks").mkdir(parents=True)
    (tmp_path / "unilab" / "probe.py").write_text("from unilab.tasks.g1_walk.spec import G1WalkSpec\n")
    (tmp_path / "unilab" / "tasks" / "ok.py").write_text("from unilab.tasks.g1_walk.spec import G1WalkSpec\n")
    assert _mentions({"G1WalkSpec"}, ("unilab/tasks/",), tmp_path) == ["unilab/probe.py:1"]


def test_each_task_is_a_package_behind_its_record() -> None:
    for name, d in TASKS.items():
        assert d.name == name and d.spec.model_fields["name"].annotation.__args__ == (name,)
        assert task_def(name) is d and task_def(d.spec.model_construct(name=name)) is d
        assert callable(d.builder())
    with pytest.raises(UnilabError, match="unknown task 'humanoid_run'") as e:
        task_def("humanoid_run")
    assert e.value.fix == "set task.name to one of cartpole, g1_motion_tracking, g1_walk"


def test_no_backend_name_is_compared_outside_the_sim_package() -> None:
    assert _name_comparisons(set(BACKENDS), "unilab/sim/") == []


def test_the_records_say_what_each_backend_can_do() -> None:
    cpu, cuda = BACKENDS["mujoco"], BACKENDS["mjwarp"]
    assert (cpu.cpu_workers, cpu.cuda, cpu.fixed_buffers, cpu.extra) == (True, False, False, None)
    assert (cuda.cpu_workers, cuda.cuda, cuda.fixed_buffers, cuda.extra) == (False, True, True, "gpu")
    assert (CPU_BACKEND, CUDA_BACKEND) == (cpu, cuda)
    # The packages a record names are the host facts' fields, as the sim.packages rule reads them.
    from unilab.host.facts import PackageFacts

    for d in BACKENDS.values():
        assert {p.replace("-", "_") for p in d.packages} <= set(PackageFacts.model_fields), d.name
        assert set(d.tested) <= set(d.packages)


def test_an_unknown_backend_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnilabError, match="unknown physics backend 'bullet'") as e:
        backend_def("bullet")
    assert e.value.fix == "set sim.backend to one of mjwarp, mujoco"


def test_the_comparison_finder_finds_one(tmp_path: Path) -> None:
    """The check above can fail: a module that compares a backend's name is reported."""
    (tmp_path / "unilab" / "sim").mkdir(parents=True)
    (tmp_path / "unilab" / "probe.py").write_text('def f(sim):\n    return sim.backend in ("mjwarp",)\n')
    (tmp_path / "unilab" / "sim" / "ok.py").write_text('def f(sim):\n    return sim.backend == "mjwarp"\n')
    assert _name_comparisons(set(BACKENDS), "unilab/sim/", tmp_path) == ["unilab/probe.py:2"]


def test_the_run_directory_layout_is_named_in_one_module() -> None:
    """`plan.toml`, `manifest.json` and `events.jsonl` of a run directory are `RunLayout`'s to name."""
    from unilab import run_layout

    files = {run_layout.PLAN, run_layout.MANIFEST, run_layout.EVENTS}
    found = [
        f"{rel}:{node.lineno}"
        for rel, node in _nodes(ROOT, "unilab/run_layout.py")
        if isinstance(node, ast.Constant) and node.value in files
    ]
    assert found == []
    layout = run_layout.RunLayout(Path("runs/x"))
    assert (layout.plan, layout.manifest, layout.checkpoints) == (
        Path("runs/x/plan.toml"),
        Path("runs/x/manifest.json"),
        Path("runs/x/checkpoints"),
    )
