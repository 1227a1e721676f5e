"""The columns of a task's observation an actor reads where the task keeps privileged observations
for the critic (`task.privileged_observations`): every algorithm's learner and deployed policy
(the replay learners' `actor_cols`, PPO's "policy" observation group) takes them from here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from unilab.errors import UnilabError


def actor_columns(task: Any, obs_terms: Sequence[tuple[str, int]]) -> list[int] | None:
    """The columns of the observation (its terms' names and sizes, in order, as the collector
    reports them) the actor reads: all but `task.privileged_observations`'; None when there are none."""
    privileged = set(getattr(task, "privileged_observations", None) or ())
    if not privileged:
        return None
    cols, start = [], 0
    for name, dim in obs_terms:
        if str(name) not in privileged:
            cols.extend(range(start, start + int(dim)))
        start += int(dim)
    return cols


def policy_columns(plan: Any, state: dict[str, Any]) -> list[int] | None:
    """The columns of the task's observation a run's deployed policy takes (None: all), from the
    plan and the observation layout its checkpoint recorded."""
    if not getattr(plan.task, "privileged_observations", None):
        return None
    terms = state.get("obs_terms") or []
    if not terms:
        raise UnilabError(
            "the checkpoint does not record its observation layout, which a run with "
            "task.privileged_observations needs to find the actor's columns",
            fix="evaluate or export it with the unilab that wrote it",
        )
    return actor_columns(plan.task, [(str(n), int(d)) for n, d in terms])
