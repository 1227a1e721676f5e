"""A run's checkpoint -> its deployable policy, shared by `unilab export` and `unilab eval`: the
run's plan, the checkpoint chosen by name or the newest, verified against the digest its run
recorded and the plan that wrote it, and the policy the algorithm's loader builds from its state
(`AlgoDef.policy`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from unilab.algos.registry import algo_def
from unilab.errors import UnilabError
from unilab.plan.models import Plan
from unilab.plan.render import load_plan
from unilab.records.checkpoint import (
    check_finite_weights,
    check_recorded_digest,
    list_checkpoints,
    load_checkpoint,
    run_plan_ids,
)
from unilab.run_layout import RunLayout


def _unreadable(path: Path, exc: OSError) -> UnilabError:
    return UnilabError(
        f"cannot read {exc.filename or path}: {exc.strerror or exc}",
        fix="give this user read access to the run directory and its files, then retry",
    )


def read_run_plan(run_dir: Path, command: str = "export") -> Plan:
    """The plan of a run directory, refused in one paragraph when there is none (``command``: the
    `unilab` command the fixes name)."""

    plan_path = RunLayout(run_dir).plan
    try:
        if run_dir.is_file():
            # A file of a run (manifest, checkpoint, tensorboard event file): name the run it is in.
            home = next((d for d in run_dir.parents[:2] if RunLayout(d).plan.is_file()), None)
            raise UnilabError(
                f"{run_dir} is a file; {command} takes a run directory (RUN_DIR)",
                fix=f"unilab {command} {home}"
                if home
                else "pass the directory `unilab apply` printed at the end of the run",
            )
        if not run_dir.is_dir():
            raise UnilabError(f"run directory {run_dir} does not exist", fix="pass a run directory (RUN_DIR)")
        if not plan_path.is_file():
            raise UnilabError(f"{run_dir} is not a unilab run directory (no plan.toml)", fix="pass a run directory")
        open(plan_path, "rb").close()  # a permission problem is named here, not as "not a plan"
        return load_plan(plan_path)
    except OSError as exc:
        raise _unreadable(plan_path, exc) from None
    except (UnicodeDecodeError, RecursionError):
        raise UnilabError(
            f"{plan_path} is not a unilab plan (not UTF-8 TOML)",
            fix=f"{command} a run directory written by `unilab apply`; its plan.toml must not be edited",
        ) from None


def load_policy(run_dir: Path, plan: Plan | None = None) -> tuple[nn.Module, int]:
    """The deployable policy of the newest checkpoint in `run_dir`, and its observation size
    (``plan``: the run's plan when the caller already read it)."""
    plan = plan or read_run_plan(run_dir)
    return policy_from_state(plan, newest_state(run_dir, plan))


def newest_state(run_dir: Path, plan: Plan) -> dict[str, Any]:
    """The learner state of the newest checkpoint in `run_dir`, checked against the run's plan and
    the digest the run recorded for it."""
    return verified_checkpoint(run_dir, plan, run_checkpoint(run_dir, None, "export"))[0]["state"]


def run_checkpoint(run_dir: Path, name: Path | None, command: str) -> Path:
    """The newest checkpoint of `run_dir`, or the one ``name`` gives (a file name in
    RUN_DIR/checkpoints, or a path to one); ``command``: the `unilab` command the fixes name."""

    directory = RunLayout(run_dir).checkpoints
    try:
        os.listdir(directory)  # glob() hides a permission error as "no checkpoint"
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _unreadable(directory, exc) from None
    ckpts = list_checkpoints(directory)
    if name is None:
        if not ckpts:
            from unilab.records.manifest_io import never_started

            if (unstarted := never_started(run_dir)) is not None:
                raise unstarted
            raise UnilabError(f"{directory} holds no checkpoint", fix=f"{command} a run that wrote a checkpoint")
        return ckpts[-1]
    # By file name, or a path to one of them: only a checkpoint the run wrote (not its .sha256
    # file, not a file elsewhere that shares a name).
    if name.name == str(name):
        path = next((p for p in ckpts if p.name == name.name), None)
    else:
        path = next((p for p in ckpts if p.resolve() == name.resolve()), None)
    if path is None:
        raise UnilabError(
            f"--checkpoint {name} is not a checkpoint of {run_dir}",
            detail=f"the run's checkpoints: {', '.join(p.name for p in ckpts) or 'none'}",
            fix="name one of them (or drop --checkpoint for the newest)",
        )
    return path


def verified_checkpoint(run_dir: Path, plan: Plan, path: Path) -> tuple[dict[str, Any], str]:
    """A checkpoint of the run loaded (refused when corrupt or another plan's) and its bytes checked
    against the sha256 the run recorded; returns the checkpoint and that digest."""

    blob = load_checkpoint(  # a corrupt file is named first
        path,
        plan_id=run_plan_ids(run_dir, plan.plan_id),
        corrupt_fix=f"use another of the run's checkpoints (--checkpoint NAME; they are in {run_dir / 'checkpoints'})",
    )
    digest = check_recorded_digest(run_dir, path)
    check_finite_weights(
        blob["state"], what=f"checkpoint {path}", fix="use an earlier checkpoint of the run (--checkpoint NAME)"
    )
    return blob, digest


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


def policy_from_state(plan: Plan, state: dict[str, Any]) -> tuple[nn.Module, int]:
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
