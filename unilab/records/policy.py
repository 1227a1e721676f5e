"""A run's checkpoint -> its deployable policy, shared by `unilab export` and `unilab eval`: the
policy the algorithm's loader builds (`AlgoDef.policy`) from the state of a checkpoint the run
directory verified (`RunDir.verified_checkpoint`), once that state holds what it is read from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from unilab.algos.registry import algo_def
from unilab.errors import UnilabError
from unilab.plan.models import Plan
from unilab.records.checkpoint import CheckpointState
from unilab.records.run_dir import RunDir


def load_policy(run_dir: Path, plan: Plan | None = None) -> tuple[nn.Module, int]:
    """The deployable policy of the newest checkpoint in `run_dir`, and its observation size
    (``plan``: the run's plan when the caller already read it)."""
    run = RunDir(run_dir)
    plan = plan or run.read_plan()
    blob, _ = run.verified_checkpoint(plan, run.find_checkpoint(None, "export"))
    return policy_from_state(plan, blob["state"])


MAX_POLICY_DIM = 1 << 20  # observations or actions a checkpoint may claim (the G1's are 101 and 29)
_STATE_FIX = "use another checkpoint of the run (--checkpoint NAME); only `unilab apply` writes them"


def check_policy_state(plan: Plan, state: Any) -> None:
    """A checkpoint state holds what its policy is read from, with sizes that can be true, before
    anything reads it: otherwise a file with a missing key or a wild size reaches torch and fails
    as an internal error (or allocates what the size claims)."""
    d = algo_def(plan.algo)
    # A replay learner's state records its sizes and normalizer; rsl-rl's holds its normalizer inside.
    need = [d.state_key] + (["obs_dim", "act_dim"] if d.uses_replay else [])
    if d.uses_replay and plan.algo.normalize_observations:
        need.append("normalizer")
    missing = [k for k in need if not isinstance(state, dict) or k not in state]
    if missing:
        raise UnilabError(f"the checkpoint's state lacks `{missing[0]}`", fix=_STATE_FIX)
    for key in ("obs_dim", "act_dim"):
        v = state.get(key)
        if v is None and not d.uses_replay:  # PPO checkpoints before the sizes were recorded
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_POLICY_DIM:
            raise UnilabError(
                f"the checkpoint's `{key}` is {v!r}: not a size between 1 and {MAX_POLICY_DIM:,}", fix=_STATE_FIX
            )
    inner, key = state[d.state_key], d.actor_key
    if not isinstance(inner, dict) or not isinstance(inner.get(key), dict):
        raise UnilabError(f"the checkpoint's state lacks the actor's weights (`{key}`)", fix=_STATE_FIX)


def policy_from_state(plan: Plan, state: CheckpointState) -> tuple[nn.Module, int]:
    """The deployable policy held in a checkpoint's learner state, and its observation size."""
    check_policy_state(plan, state)
    try:
        return algo_def(plan.algo).policy_loader()(plan, state)
    except (RuntimeError, KeyError, ValueError, TypeError, AttributeError) as exc:
        # Keys or shapes that disagree with the run's plan (the sizes the state records, the
        # networks the plan builds): torch names the first, in a line worth showing.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UnilabError(
            f"the checkpoint's policy does not fit the run's plan: {first}",
            detail="its weights' names or shapes differ from the networks the plan builds",
            fix=_STATE_FIX,
        ) from None
