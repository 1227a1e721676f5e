"""The algorithms a spec can name: one line each (torch-free; unilab.algos.algodef)."""

from __future__ import annotations

from unilab.algos.algodef import AlgoDef
from unilab.algos.flashsac import FLASHSAC
from unilab.algos.ppo import PPO
from unilab.algos.sac import SAC
from unilab.algos.td3 import TD3
from unilab.errors import UnilabError

ALGOS: dict[str, AlgoDef] = {d.name: d for d in (SAC, FLASHSAC, TD3, PPO)}


def algo_def(algo: object) -> AlgoDef:
    """The definition of an `[algo]` section (a spec model) or of an algorithm's name."""
    name = algo if isinstance(algo, str) else getattr(algo, "name", None)
    d = ALGOS.get(name)  # type: ignore[arg-type]
    if d is None:
        raise UnilabError(f"unknown algorithm {name!r}", fix=f"set algo.name to one of {', '.join(sorted(ALGOS))}")
    return d


def names(loop: str | None = None) -> tuple[str, ...]:
    """The algorithms' names, in registry order (those of one loop kind where given)."""
    return tuple(n for n, d in ALGOS.items() if loop is None or d.loop == loop)
