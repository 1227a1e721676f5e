"""The checkpoint state a run started with `run.init_from` loads: read, checked against the
collector before the run is recorded, and loaded with errors that name `run.init_from`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from unilab.errors import UnilabError
from unilab.plan.inputs import check_init_from, resolve_input_path
from unilab.plan.models import Plan

_FIX = "start from a checkpoint of a run with this task and network keys (and this unilab), or without run.init_from"


def read_init_state(plan: Plan) -> dict[str, Any]:
    """The learner state of the plan's run.init_from checkpoint, checked again against its sha256
    just before it is read."""
    from unilab.records.checkpoint import check_finite_weights, load_checkpoint

    init = plan.run.init_from
    if init is None:
        raise UnilabError("internal: the plan has no run.init_from")
    check_init_from(plan.run, Path.cwd())
    try:
        state = load_checkpoint(resolve_input_path(init.checkpoint, Path.cwd()), plan_id=init.plan_id)["state"]
    except UnilabError as exc:  # its fixes speak of resuming; this is another run's checkpoint
        raise UnilabError(f"run.init_from: {exc.summary}", detail=exc.detail, fix=_FIX) from None
    check_finite_weights(state, what=f"run.init_from: {init.checkpoint}", fix=_FIX)
    return state


def check_init_fits(init_state: dict[str, Any] | None, hello: Any) -> None:
    """Before the run is recorded: the checkpoint's policy takes this collector's observations
    (sizes and layout) and gives its actions."""
    from unilab.records.checkpoint import check_policy_fits

    if init_state is not None:
        check_policy_fits(init_state, hello.obs_dim, hello.act_dim, hello.obs_terms, what="run.init_from", fix=_FIX)


@contextmanager
def loading_init(plan: Plan) -> Iterator[None]:
    """Name run.init_from when its state does not load into this run's learner (state keys or
    shapes of another unilab or rsl-rl version)."""
    try:
        yield
    except (RuntimeError, KeyError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        checkpoint = plan.run.init_from.checkpoint if plan.run.init_from else "?"
        raise UnilabError(
            f"run.init_from: {checkpoint} does not load into this run's learner: {first}", fix=_FIX
        ) from None
