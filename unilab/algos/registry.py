"""The algorithms a spec can name: one line each (torch-free; unilab.algos.algodef)."""

from __future__ import annotations

from typing import cast

from unilab import plugins
from unilab.algos.algodef import AlgoDef
from unilab.algos.flashsac import FLASHSAC
from unilab.algos.ppo import PPO
from unilab.algos.sac import SAC
from unilab.algos.td3 import TD3
from unilab.errors import UnilabError
from unilab.spec.models import algo_record_problem

ALGOS: dict[str, AlgoDef] = {d.name: d for d in (SAC, FLASHSAC, TD3, PPO)}


def _algo_record(name: str, record: object) -> str | None:
    if not isinstance(record, AlgoDef):
        return f"it is {type(record).__name__}, not a unilab.algos.algodef.AlgoDef"
    if record.name != name:
        return f"its AlgoDef is named {record.name!r}, its entry point {name!r}: the two must agree"
    return algo_record_problem(name, record)


def plugin_algo_def(name: str) -> AlgoDef | None:
    """The record of the installed plugin algorithm ``name`` (unilab.plugins), or None where no
    package registers one; a built-in name is never a plugin's."""
    if name in ALGOS:
        return None
    return cast("AlgoDef | None", plugins.load(plugins.ALGO_GROUP, name, _algo_record))


def algo_def(algo: object) -> AlgoDef:
    """The definition of an `[algo]` section (a spec model) or of an algorithm's name: a built-in
    algorithm's or an installed plugin's."""
    name = algo if isinstance(algo, str) else getattr(algo, "name", None)
    d = ALGOS.get(name) if isinstance(name, str) else None  # type: ignore[arg-type]
    if d is None and isinstance(name, str):
        d = plugin_algo_def(name)
    if d is None:
        known = sorted({*ALGOS, *plugins.plugin_names(plugins.ALGO_GROUP)})
        raise UnilabError(f"unknown algorithm {name!r}", fix=f"set algo.name to one of {', '.join(known)}")
    return d


def names(loop: str | None = None) -> tuple[str, ...]:
    """The algorithms' names, in registry order (those of one loop kind where given)."""
    return tuple(n for n, d in ALGOS.items() if loop is None or d.loop == loop)
