"""Every number a spec gives the physics, a task or a learner is bounded by what it means: an
absurd value is refused at plan time, by key, instead of training on nonsense."""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

from tests.conftest import FIXTURES, ROOT, run_unilab
from unilab.spec import models as M


def _leaves(tp: Any, meta: tuple = ()) -> list[tuple[bool, bool]]:
    """(has a lower bound, has an upper bound) for each int or float a value of type ``tp`` holds."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(tp)
        found = list(meta)
        for e in extra:
            found += [e] if isinstance(e, annotated_types.BaseMetadata) else list(getattr(e, "metadata", []) or [])
        return _leaves(base, tuple(found))
    if origin in (typing.Union, types.UnionType):
        return [leaf for a in typing.get_args(tp) for leaf in _leaves(a, meta)]
    if origin in (tuple, list, dict):
        return [leaf for a in typing.get_args(tp) if a is not Ellipsis for leaf in _leaves(a)]
    if tp in (int, float):
        lower = any(isinstance(m, annotated_types.Ge | annotated_types.Gt) for m in meta)
        upper = any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in meta)
        return [(lower, upper)]
    return []


def _numeric_keys() -> dict[str, list[tuple[bool, bool]]]:
    keys: dict[str, list[tuple[bool, bool]]] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            if leaves := _leaves(field.annotation, tuple(field.metadata)):
                keys.setdefault(prefix + name, []).extend(leaves)
            for sub in (field.annotation, *typing.get_args(field.annotation)):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    walk(sub, f"{prefix}{name}.")

    walk(M.RunSpec, "run.")
    walk(M.SimSpec, "sim.")
    walk(M.TrainingSpec, "training.")
    for model in (*M.TASK_MODELS.values(), *M.ALGO_MODELS.values()):
        walk(model, "task." if model in M.TASK_MODELS.values() else "algo.")
    return keys


def test_every_numeric_key_has_a_lower_and_an_upper_bound() -> None:
    keys = _numeric_keys()
    assert len(keys) > 50 and "task.commands.lin_vel_x" in keys and "algo.actor_lr" in keys
    unbounded = sorted(k for k, leaves in keys.items() if not all(lo and hi for lo, hi in leaves))
    assert not unbounded, f"spec keys without a lower and an upper bound: {unbounded}"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("task.commands.lin_vel_x=[-1e20,1e20]", "task.commands.lin_vel_x"),
        ("task.commands.ang_vel_z=[0.0,100.0]", "task.commands.ang_vel_z"),
        ("task.push_interval_s=1e9", "task.push_interval_s"),
        ("algo.actor_lr=5.0", "algo.actor_lr"),
        ("algo.v_max=1e300", "algo.v_max"),
        ("algo.alpha_init=1e9", "algo.alpha_init"),
    ],
)
def test_an_absurd_value_is_refused_by_key_at_plan_time(override: str, key: str) -> None:
    r = run_unilab(
        "plan",
        "specs/g1.toml",
        "--host-facts",
        str(FIXTURES / "hosts" / "cpu_laptop.json"),
        "--set",
        override,
        cwd=ROOT,
    )
    assert r.returncode == 1 and r.stderr.startswith("error: "), r.stderr
    assert key in r.stderr and "    fix" in r.stderr


@pytest.mark.parametrize("project", ["team/project", "a:b", "50%", "what?"])
def test_a_wandb_project_wandb_would_refuse_at_start_is_refused_at_plan_time(project: str) -> None:
    r = run_unilab(
        "plan", "specs/cartpole.toml", "--host-facts", str(FIXTURES / "hosts" / "cpu_laptop.json"),
        "--set", f'run.wandb={{project="{project}", mode="offline"}}', cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 1 and "run.wandb.project: must be free of / \\ # ? % :" in r.stderr, r.stderr
