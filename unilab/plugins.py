"""Tasks and algorithms from installed packages, found through entry points.

A package registers a task under the entry-point group ``unilab.tasks`` and an algorithm under
``unilab.algos``, the entry point's name being the `task.name` / `algo.name` a spec gives and its
value the record (``"my_pkg:TASK"``, a `TaskDef`; ``"my_pkg:ALGO"``, an `AlgoDef`) in a torch-free
declaration module. Nothing is imported until a spec, plan or run names the plugin, and then only
that entry point: the planner stays torch-free and fast, and a broken plugin breaks only the runs
that name it. A plugin that cannot be used (its module fails to import, its record is not one, two
packages claim its name, ...) is refused in one paragraph naming it, its package and the fix.
`unilab plugins` lists every entry point with what loading it gives (docs/extending.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from typing import Literal, TypeVar

from unilab.errors import UnilabError

TASK_GROUP = "unilab.tasks"
ALGO_GROUP = "unilab.algos"
Group = Literal["unilab.tasks", "unilab.algos"]
_WHAT = {TASK_GROUP: "task", ALGO_GROUP: "algorithm"}


class PluginError(UnilabError):
    """A plugin a spec, plan or run names cannot be used."""


@dataclass(frozen=True)
class Declared:
    """One entry point of a plugin group."""

    group: str
    name: str
    value: str  # "module:attribute"
    package: str  # the distribution that declares it, with its version

    def where(self) -> str:
        return f"entry point {self.name} = {self.value!r} in group {self.group} of {self.package}"


def _package(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown package"


@functools.cache
def declared(group: Group) -> dict[str, tuple[Declared, ...]]:
    """Every entry point of ``group`` by name (more than one: packages that conflict)."""
    out: dict[str, list[Declared]] = {}
    for ep in entry_points(group=group):
        d = Declared(group, ep.name, ep.value, _package(ep))
        if d not in out.setdefault(ep.name, []):  # a package found twice on the path is one
            out[ep.name].append(d)
    return {name: tuple(ds) for name, ds in sorted(out.items())}


# `check` answers what is wrong with a loaded record, or None where it is usable.
Check = Callable[[str, object], "str | None"]


@functools.cache
def _load(group: Group, name: str, check: Check) -> object:
    ds = declared(group)[name]
    what = _WHAT[group]
    if len(ds) > 1:
        raise PluginError(
            f"{len(ds)} installed packages register the {what} {name!r}: "
            + "; ".join(d.where() for d in ds)
            + ". unilab cannot tell which one the spec means",
            fix=f"uninstall all but one of {', '.join(d.package for d in ds)}",
        )
    d = ds[0]
    ep = next(ep for ep in entry_points(group=group) if ep.name == name and ep.value == d.value)
    try:
        record = ep.load()
    except Exception as exc:  # a plugin's import may raise anything; it is reported, not re-raised
        raise PluginError(
            f"the {what} {name!r} comes from a plugin that could not be loaded ({d.where()}): "
            f"{type(exc).__name__}: {exc}",
            fix=f"fix or reinstall {d.package}, or uninstall it",
        ) from None
    wrong = check(name, record)
    if wrong is not None:
        raise PluginError(
            f"the {what} {name!r} comes from a plugin that unilab cannot use ({d.where()}): {wrong}",
            fix=f"fix {d.package} (docs/extending.md, 'A task or algorithm in your own package')",
        )
    return record


def load(group: Group, name: str, check: Check) -> object | None:
    """The record the plugin named ``name`` registers in ``group``, checked by ``check``; None
    where no installed package registers that name. Raises PluginError where one does but it
    cannot be used. Loaded once per process."""
    if name not in declared(group):
        return None
    return _load(group, name, check)


def plugin_names(group: Group) -> tuple[str, ...]:
    return tuple(declared(group))


R = TypeVar("R")


def record_check(record_type: type, spec_problem: Check) -> Check:
    """The check of a plugin's record: an instance of ``record_type`` named as its entry point,
    whose spec model passes ``spec_problem``. Make it once per registry (loads are cached by it)."""

    def check(name: str, record: object) -> str | None:
        kind = record_type.__name__
        if not isinstance(record, record_type):
            return f"it is {type(record).__name__}, not a {record_type.__module__}.{kind}"
        if record.name != name:  # type: ignore[attr-defined]
            return f"its {kind} is named {record.name!r}, its entry point {name!r}: the two must agree"  # type: ignore[attr-defined]
        return spec_problem(name, record)

    return check


def plugin_record(builtin: Mapping[str, R], group: Group, name: str, check: Check) -> R | None:
    """The record of the installed plugin ``name``, or None where no package registers one; a
    built-in name is never a plugin's."""
    if name in builtin:
        return None
    return load(group, name, check)  # type: ignore[return-value]


def record_named(builtin: Mapping[str, R], group: Group, section: object, check: Check, key: str) -> R:
    """The record a `[task]`/`[algo]` section (or a name) names: a built-in one or an installed
    plugin's; an unknown name is refused with the names there are."""
    name = section if isinstance(section, str) else getattr(section, "name", None)
    record = builtin.get(name) if isinstance(name, str) else None
    if record is None and isinstance(name, str):
        record = plugin_record(builtin, group, name, check)
    if record is None:
        known = sorted({*builtin, *plugin_names(group)})
        raise UnilabError(f"unknown {_WHAT[group]} {name!r}", fix=f"set {key} to one of {', '.join(known)}")
    return record


# This project's distribution name: `unilab` on the public package index is another project
# (UniLab), which a plugin that depends on "unilab" pulls in, its files landing on this one's.
DISTRIBUTION = "unilab-runtime"


def foreign_unilab() -> str | None:
    """A warning when the public index's `unilab` distribution is installed beside this one, or None."""
    try:
        other = distribution("unilab")
    except PackageNotFoundError:
        return None
    return (
        f"warning: the distribution 'unilab' {other.version} is installed beside {DISTRIBUTION}: it is another "
        "project from the public package index (pulled in by a package that depends on 'unilab'), and its files "
        "under unilab/ may replace this one's.\n"
        f"  fix: pip uninstall unilab, then reinstall this checkout (bash tools/setup.sh); a plugin depends on "
        f"'{DISTRIBUTION}' (docs/extending.md)"
    )
