"""A smoke run: the spec as it is, trained just long enough to exercise every part of a run.

`unilab apply SPEC --smoke` (and `unilab.apply(spec, smoke=True)`) checks a spec end to end in
seconds to a minute: the plan, the collector's physics and task terms, a few learner updates, a
checkpoint and the manifest. Only the budget changes: a replay learner starts updating as soon as
its replay holds a batch (no random warm-up) and runs a few updates past that; an on-policy
learner runs two rollouts. The run is named `<run.name>-smoke` so its directory is not mistaken
for a real run's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from unilab.algos.registry import algo_def
from unilab.errors import UnilabError
from unilab.inputfile import reading
from unilab.plan.models import Plan
from unilab.plan.render import is_plan_file
from unilab.plan.rules.task import _first_update_syncs
from unilab.sections import ReplayAlgoSpec

# Syncs after the first update (a replay learner) or rollouts (an on-policy one): enough to see the
# learner update more than once, few enough to stay a smoke run.
SMOKE_SYNCS_AFTER_FIRST_UPDATE = 8
SMOKE_ROLLOUTS = 2
# The keys a smoke run sets itself: given explicitly beside --smoke, one of the two would be ignored.
SMOKE_KEYS = ("run.total_env_steps", "algo.warmup_env_steps", "run.name")


def smoke_overrides(plan: Plan) -> list[str]:
    """The overrides that turn ``plan``'s spec into a smoke run of it."""
    algo, n, world = plan.algo, plan.task.num_envs, plan.topology.world_size
    name = [f'run.name="{plan.run.name}-smoke"']
    if isinstance(algo, ReplayAlgoSpec):
        syncs = _first_update_syncs(algo, n, world, 0) + SMOKE_SYNCS_AFTER_FIRST_UPDATE
        return ["algo.warmup_env_steps=0", f"run.total_env_steps={world * n * syncs}", *name]
    unit = algo_def(algo).syncs_per_unit(algo)
    return [f"run.total_env_steps={world * n * unit * SMOKE_ROLLOUTS}", *name]


def refuse_saved_plan(target: Path, command: str) -> None:
    """A smoke run re-plans a spec: a saved plan (``target``) has no spec to re-plan."""

    with reading(target, "spec or plan"):
        if target.is_file() and is_plan_file(target):
            raise UnilabError(
                f"{target} is a saved plan; --smoke re-plans a spec with a short budget",
                fix=f"pass the spec the plan was made from: unilab {command} SPEC --smoke",
            )


def smoke_plan(compile_with: Callable[[list[str]], Plan], overrides: Sequence[str], flag: str = "--smoke") -> Plan:
    """The smoke run of the spec ``compile_with`` compiles (with the user's ``overrides``)."""
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in SMOKE_KEYS:
            raise UnilabError(
                f"--set {key} with {flag}: a smoke run sets {', '.join(SMOKE_KEYS)} itself",
                fix=f"drop --set {key} for a smoke run, or drop {flag} for a run with that setting",
            )
    first = compile_with(list(overrides))
    return compile_with([*overrides, *smoke_overrides(first)])
