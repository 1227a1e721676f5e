"""The algorithms a spec can name: one line each (torch-free; unilab.algos.algodef)."""

from __future__ import annotations

from unilab import plugins
from unilab.algos.algodef import AlgoDef
from unilab.algos.flashsac import FLASHSAC
from unilab.algos.ppo import PPO
from unilab.algos.sac import SAC
from unilab.algos.td3 import TD3
from unilab.sections import algo_record_problem

ALGOS: dict[str, AlgoDef] = {d.name: d for d in (SAC, FLASHSAC, TD3, PPO)}


_CHECK = plugins.record_check(AlgoDef, algo_record_problem)


def plugin_algo_def(name: str) -> AlgoDef | None:
    """The record of the installed plugin algorithm ``name`` (unilab.plugins), or None."""
    return plugins.plugin_record(ALGOS, plugins.ALGO_GROUP, name, _CHECK)


def algo_def(algo: object) -> AlgoDef:
    """The definition of an `[algo]` section (a spec model) or of an algorithm's name: a built-in
    algorithm's or an installed plugin's."""
    return plugins.record_named(ALGOS, plugins.ALGO_GROUP, algo, _CHECK, "algo.name")


def names(loop: str | None = None) -> tuple[str, ...]:
    """The algorithms' names, in registry order (those of one loop kind where given)."""
    return tuple(n for n, d in ALGOS.items() if loop is None or d.loop == loop)
