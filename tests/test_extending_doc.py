"""docs/extending.md names only what exists: its paths, `unilab.x.y` objects, classes and their
members, rule ids, spec keys, commands and tests; its Python examples compile, and its example rule
registers and fires. Torch-free: modules are read with ast, only the planner's modules are imported.

Names in the doc's examples that do not exist yet (an algorithm or backend the reader is to add)
start with `my` (`myalgo`, `MyBackend`) or hold a `<placeholder>`; those are not looked up."""

from __future__ import annotations

import ast
import functools
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from tests.conftest import ROOT, host, spec_data

DOC = ROOT / "docs" / "extending.md"
TEXT = DOC.read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
BLOCKS = [(m.group(1), m.group(2)) for m in FENCE.finditer(TEXT)]
PROSE = FENCE.sub("", TEXT)
INLINE = re.findall(r"`([^`\n]+)`", PROSE)
PATH = re.compile(r"(?<![\w./-])((?:unilab|tests|tools|docs|schemas|specs)/[\w./*-]*|pyproject\.toml)")
OBJECT = re.compile(r"\bunilab(?:\.\w+)+(?::\w+(?:\.\w+)*)?")
TEST_REF = re.compile(r"(tests/\w+\.py)::(\w+)")


def hypothetical(name: str) -> bool:
    return bool(re.search(r"(?i)\bmy|<", name))


@functools.cache
def _sources() -> dict[Path, str]:
    """unilab's modules by path."""
    return {f: f.read_text() for f in sorted((ROOT / "unilab").rglob("*.py"))}


@functools.cache
def corpus() -> str:
    """unilab's source, its tests (but this one), its tools and its examples."""
    others = [*(ROOT / "tests").glob("*.py"), *(ROOT / "tools").glob("*.py"), *(ROOT / "examples").rglob("*.py")]
    here = Path(__file__).resolve()
    return "\n".join([*_sources().values(), *(p.read_text() for p in sorted(others) if p != here)])


@functools.cache
def words() -> frozenset[str]:
    return frozenset(re.findall(r"\w+", corpus()))


def in_corpus(word: str) -> bool:
    return word in words()


# --- reading modules with ast -------------------------------------------------------------------


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(_sources().get(path) or path.read_text())


def _bindings(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module (or class) body binds, looking inside top-level `if`/`try` blocks."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = node
        elif isinstance(node, ast.If | ast.Try):
            out |= _bindings(node.body + node.orelse + getattr(node, "finalbody", []))
    return out


def class_members(module: list[str], cls: ast.ClassDef) -> set[str]:
    """Members a class defines or inherits from unilab classes (fields, methods, properties)."""
    out = set(_bindings(cls.body))
    for base in cls.bases:
        if isinstance(base, ast.Name):
            found = find_class(module, base.id)
            if found is not None:
                out |= class_members(*found)
    return out


def find_class(module: list[str], name: str) -> tuple[list[str], ast.ClassDef] | None:
    f = module_file(module)
    node = _bindings(parsed(f).body).get(name) if f else None
    if isinstance(node, ast.ClassDef):
        return module, node
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("unilab"):
        return find_class(node.module.split("."), name)
    return None


def defined(module: list[str], attrs: list[str]) -> bool:
    """`module.attrs[0].attrs[1]...` is defined: a module, a top-level name, a class member."""
    if not attrs:
        return True
    f = module_file(module)
    if f is None:
        return False
    node = _bindings(parsed(f).body).get(attrs[0])
    if node is None:
        return module_file([*module, attrs[0]]) is not None and defined([*module, attrs[0]], attrs[1:])
    if isinstance(node, ast.ImportFrom):
        if node.module and node.module.startswith("unilab"):
            return defined(node.module.split("."), attrs)
        return len(attrs) == 1
    if isinstance(node, ast.ClassDef) and len(attrs) > 1:
        return attrs[1] in class_members(module, node)
    return len(attrs) == 1


def resolves(dotted: str) -> bool:
    if ":" in dotted:
        mod, _, attr = dotted.partition(":")
        return module_file(mod.split(".")) is not None and defined(mod.split("."), attr.split("."))
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        if module_file(parts[:i]) is not None:
            return defined(parts[:i], parts[i:])
    return False


@functools.cache
def _class_files() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for f, text in _sources().items():
        for name in re.findall(r"^class (\w+)", text, re.M):
            out.setdefault(name, []).append(f)
    return out


@functools.cache
def classes_named(name: str) -> list[tuple[list[str], ast.ClassDef]]:
    out = []
    for f in _class_files().get(name, []):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        module = parts[:-1] if parts[-1] == "__init__" else parts
        node = _bindings(parsed(f).body).get(name)
        if isinstance(node, ast.ClassDef):
            out.append((module, node))
    return out


def members_of(name: str) -> set[str]:
    return set().union(*(class_members(m, c) for m, c in classes_named(name)))


# --- what the planner knows ---------------------------------------------------------------------


@functools.cache
def rule_ids() -> frozenset[str]:
    from unilab.plan.rules import RULES
    from unilab.spec.diagnose import SPEC_RULES

    return frozenset(r.id for r in (*RULES, *SPEC_RULES))


def _models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def spec_key(dotted: str) -> bool:
    from unilab.spec.models import ALGO_MODELS, Spec

    models: list[type[BaseModel]] = [Spec]
    for part in dotted.split("."):
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return False
        models = list(ALGO_MODELS.values()) if part == "algo" and models == [Spec] else []
        models = models or [m for f in fields for m in _models(f.annotation)]
    return True


def spec_sections() -> set[str]:
    from unilab.spec.models import Spec

    return set(Spec.model_fields)


# --- the checks ---------------------------------------------------------------------------------


def test_every_path_exists() -> None:
    paths = {p.rstrip("./") for p in PATH.findall(TEXT) if not hypothetical(p)}
    assert len(paths) > 40
    missing = sorted(p for p in paths if not (list(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()))
    assert not missing, f"docs/extending.md names paths that do not exist: {missing}"


def test_every_named_test_exists() -> None:
    refs = TEST_REF.findall(TEXT)
    assert refs
    for path, name in refs:
        tests = {n.name for n in parsed(ROOT / path).body if isinstance(n, ast.FunctionDef)}
        assert name in tests, f"{path} has no test {name}"


def test_every_unilab_object_is_defined() -> None:
    names = {m for m in OBJECT.findall(TEXT) if not hypothetical(m)}
    assert len(names) > 15
    missing = sorted(n for n in names if not resolves(n))
    assert not missing, f"docs/extending.md names objects unilab does not define: {missing}"


def test_imports_in_examples_resolve() -> None:
    for lang, body in BLOCKS:
        if lang != "python":
            continue
        for node in ast.walk(ast.parse(body)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("unilab"):
                for a in node.names:
                    if not hypothetical(f"{node.module}.{a.name}"):
                        assert resolves(f"{node.module}:{a.name}"), f"from {node.module} import {a.name}"


def test_python_examples_compile() -> None:
    blocks = [body for lang, body in BLOCKS if lang == "python"]
    assert len(blocks) >= 3
    for body in blocks:
        try:
            compile(body, str(DOC), "exec")
        except SyntaxError as exc:  # a fragment of a function's body, as a `return` shows
            if "outside function" not in str(exc):
                raise
            compile("def fragment():\n" + "".join(f"    {line}\n" for line in body.splitlines()), str(DOC), "exec")


@functools.cache
def _defs_named(name: str) -> list[ast.FunctionDef]:
    """Every module-level function or method of that name in unilab."""
    out = []
    for f, text in _sources().items():
        if f"def {name}(" in text:
            body = parsed(f).body
            nodes = [*body, *(n for c in body if isinstance(c, ast.ClassDef) for n in c.body)]
            out += [n for n in nodes if isinstance(n, ast.FunctionDef) and n.name == name]
    return out


def _call(callee: str, args: str) -> str | None:
    """Why `callee(args)` does not fit what unilab defines: each argument written as a bare name
    or `name=` is a field of the class, or a parameter of some function of that name."""
    names = re.findall(r"(?:^|,)\s*(\w+)\s*(?==|,|$)", args)
    last = callee.split(".")[-1]
    if last[0].isupper():
        if not classes_named(last):
            return f"no class {last}"
        known = members_of(last)
    else:
        defs = _defs_named(last)
        if not defs:
            return None  # a builtin or a local name (`getattr`, `cls`)
        known = {a.arg for d in defs for a in (*d.args.posonlyargs, *d.args.args, *d.args.kwonlyargs)}
    unknown = [n for n in names if n not in known]
    return f"{callee} takes no {unknown}" if unknown else None


def _inline(token: str) -> str | None:
    """Why an inline code token names nothing in unilab (None: it does, or it is not a name)."""
    t = token.strip().strip('"').lstrip("@")
    if hypothetical(t) or t.startswith(("unilab.", "*", "python ", "unilab ", "grep ")) or "/" in t:
        return None  # placeholders; objects, commands and paths have their own tests
    call = re.fullmatch(r"([\w.]+)\((.*)\)", t)
    if call:
        if why := _call(call.group(1), call.group(2)):
            return why
        t = call.group(1)
    if not re.fullmatch(r"[A-Za-z_][\w.-]*", t):
        return None  # a value, a shape, a signature
    if re.fullmatch(r"\w+\.(py|md|toml)", t):
        found = [f for d in ("unilab", "tests", "tools", "docs") for f in (ROOT / d).rglob(t)]
        return None if found or (ROOT / t).exists() else "no such file"
    parts = t.split(".")
    areas = spec_sections() | {i.split(".")[0] for i in rule_ids()}
    if len(parts) > 1 and parts[0] in areas:
        return None if spec_key(t) or t in rule_ids() else "neither a spec key nor a rule id"
    if len(parts) > 1 and parts[0][0].isupper():
        return None if parts[1] in members_of(parts[0]) else f"{parts[0]} has no member {parts[1]}"
    if parts[0] == "ctx":
        return None if parts[1] in members_of("Context") else f"Context has no member {parts[1]}"
    if parts[0][0].isupper() and len(parts) == 1 and not t.isupper():
        return None if classes_named(t) or in_corpus(t) else "no such class"
    missing = [p for p in parts if p != "self" and not in_corpus(p)]
    return f"{missing} not in unilab's source" if missing else None


def test_every_inline_name_exists() -> None:
    bad = {tok: why for tok in INLINE if (why := _inline(tok))}
    assert not bad, f"docs/extending.md names what unilab lacks: {bad}"


def test_every_named_rule_is_registered() -> None:
    """Inline `area.name` under a rule area that is not a spec key is a rule id."""
    areas = {i.split(".")[0] for i in rule_ids()}
    cited = {
        t
        for t in INLINE
        if re.fullmatch(r"[a-z0-9]+\.[a-z0-9-]+", t)
        and t.split(".")[0] in areas
        and not spec_key(t)
        and not t.endswith((".py", ".md"))
    }
    assert {"task.reward-weights", "sim.packages", "graph.learner"} <= cited
    assert cited <= rule_ids(), f"not registered: {sorted(cited - rule_ids())}"


def test_commands_exist() -> None:
    from unilab.cli.main import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    commands = [t for t in INLINE if t.startswith(("unilab ", "python tools/"))]
    assert len(commands) >= 5
    for cmd in commands:
        words = cmd.split()
        options = [w for w in words if w.startswith("--")]
        if words[0] == "python":
            source = (ROOT / words[1]).read_text()
            assert all(o in source for o in options), cmd
        else:
            assert words[1] in subs, cmd
            known = {o for a in subs[words[1]]._actions for o in a.option_strings}
            assert set(options) <= known, cmd


def _section(number: int) -> str:
    return PROSE.split(f"## {number}. ", 1)[1].split("\n## ", 1)[0]


def _table(header: str) -> list[list[str]]:
    lines = TEXT.split(header, 1)[1].split("\n")[2:]
    rows = []
    for line in lines:
        if not line.strip().startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_the_protocols_are_listed_whole() -> None:
    """Every member of the learner protocol and of the backend contract is named in its recipe."""
    for number, module, cls in (
        (3, ["unilab", "learn", "protocol"], "OffPolicyLearner"),
        (4, ["unilab", "sim", "contract"], "PhysicsBackend"),
        (4, ["unilab", "sim", "contract"], "PhysicsState"),
    ):
        found = find_class(module, cls)
        assert found is not None, cls
        text = _section(number)
        missing = sorted(m for m in class_members(*found) if f"`{m}`" not in text and f"`{m}(" not in text)
        assert not missing, f"section {number} does not name {cls}'s {missing}"


def test_term_inventories_are_declarations() -> None:
    """Each column names what the task package's torch-free `__init__.py` binds."""
    rows = _table("| kind | g1_walk |")
    header = ["g1_walk", "g1_motion_tracking", "cartpole"]
    assert any("_WALK_REWARD_WEIGHTS" in cell for row in rows for cell in row)
    for col, task in enumerate(header, start=1):
        names = {n for row in rows for n in re.findall(r"`(\w+)`", row[col])}
        top = _bindings(parsed(ROOT / "unilab" / "tasks" / task / "__init__.py").body)
        assert names <= set(top), (task, sorted(names - set(top)))


def test_algodef_table_names_what_each_file_asks() -> None:
    from unilab.algos.algodef import AlgoDef
    from unilab.algos.registry import ALGOS

    fields = set(AlgoDef.__dataclass_fields__) | set(dir(AlgoDef))
    rows = _table("| AlgoDef | asked by |")
    assert len(rows) >= 10
    for first, second in rows:
        names = re.findall(r"`(\w+)`", first)
        assert names and set(names) <= fields, first
        for path in re.findall(r"`(unilab/[\w/]+\.py)`", second):
            source = (ROOT / path).read_text()
            assert any(n in source for n in names), f"{path} does not ask {names}"
    assert set(ALGOS) >= {"sac", "flashsac", "td3", "ppo"}
    assert ALGOS["td3"].learner == "unilab.algos.td3.learner:Td3Learner"


def test_rule_tables_cite_the_rules_module() -> None:
    rows = _table("| rule | file |")
    assert rows
    for rule, path in rows:
        source = (ROOT / path.strip("`")).read_text()
        for rid in re.findall(r"`([a-z0-9]+\.[a-z0-9-]+)`", rule):
            assert f'"{rid}"' in source, f"rule {rid} is not in {path}"


def test_the_example_rule_registers_and_fires() -> None:
    """The rule recipe's example, run: one new rule with a fresh id, silent on the base spec,
    violated by a 0.5 s control step (sim.decimation = 100 at the default 0.005 s timestep)."""
    from unilab.plan.context import build_context
    from unilab.plan.rules import RULES
    from unilab.spec.load import validate_spec_data

    (body,) = [b for lang, b in BLOCKS if lang == "python" and "@rule(" in b]
    before = list(RULES)
    try:
        exec(compile(body, str(DOC), "exec"), {})
        added = RULES[len(before) :]
        assert len(added) == 1 and added[0].id not in {r.id for r in before}
        r = added[0]

        def check(**dotted: object) -> list:
            spec = validate_spec_data(spec_data(**dotted), "doc")
            return r.check(build_context(spec, host("cpu_laptop"), ROOT / "specs"))

        assert check() == []
        (d,) = check(sim__decimation=100)
        assert (d.rule_id, d.key_path) == (r.id, r.key_path) and d.condition and d.fix
        assert "sim.decimation" in d.fix
    finally:
        RULES[:] = before


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_each_recipe_says_how_to_regenerate_and_test(number: int) -> None:
    text = _section(number)
    assert "Regenerate:" in text and "Tests:" in text
    assert re.search(r"`tests/test_\w+\.py", text)
