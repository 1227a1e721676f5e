"""Hostile input to `unilab plan`: every case is a one-paragraph error and exit 1, never a
traceback, and names the key path (spec errors) or the rule id (plan refusals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, SPECS, spec_data
from unilab.errors import SpecError
from unilab.spec.load import load_spec, validate_spec_data

HOST = str(FIXTURES / "hosts" / "cpu_laptop.json")
CARTPOLE = "specs/cartpole.toml"


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "UNILAB_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "unilab", "plan", *args, "--host-facts", HOST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def plan_cartpole(*overrides: str) -> subprocess.CompletedProcess[str]:
    return plan(CARTPOLE, *[a for o in overrides for a in ("--set", o)])


def refused(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert r.stderr.startswith("error:"), r.stderr
    return r.stderr


# (overrides, the line the error must contain)
SPEC_ERRORS = [
    # a. an empty device list used to divide by zero while splitting CPU blocks
    (["training.devices=[]"], "training.devices: List should have at least 1 item, not 0 (got [])"),
    # d. non-finite floats
    (
        ["task.name=g1_walk", "task.commands.lin_vel_x=[nan,1.0]"],
        "task.commands.lin_vel_x[0]: must be a finite number (got nan)",
    ),
    (["run.log_every_seconds=inf"], "run.log_every_seconds: must be a finite number (got inf)"),
    (["algo.v_max=-inf"], "algo.v_max: must be a finite number (got -inf)"),
    # e. no coercion between bools, numbers and strings
    (["task.num_envs=true"], "task.num_envs: must be a valid integer (got True)"),
    (['task.num_envs="16"'], "task.num_envs: must be a valid integer (got '16')"),
    (["task.num_envs=16.0"], "task.num_envs: must be a valid integer (got 16.0)"),
    (["task.episode_length_s=true"], "task.episode_length_s: must be a valid number (got True)"),
    (["algo.normalize_observations=1"], "algo.normalize_observations: must be a valid boolean (got 1)"),
    (["algo.hidden_dims=[64,true]"], "algo.hidden_dims[1]: must be a valid integer (got True)"),
    (["schema_version=true"], "schema_version must be 1 (got True)"),
    # g. one line per key, no pydantic union-member names
    (["algo.hidden_dims=[0]"], "algo.hidden_dims[0]: must be greater than or equal to 1 (got 0)"),
    (["sim.workers=0"], "sim.workers: must be greater than or equal to 1 (got 0)"),
    (["training.devices=-1"], "training.devices: must be greater than or equal to 0 (got -1)"),
    (["training.devices=[-1]"], "training.devices[0]: must be greater than or equal to 0 (got -1)"),
    (["training.devices=true"], "training.devices: must be 'cpu', a valid integer, a valid string or a valid"),
    (["algo.target_entropy=true"], "algo.target_entropy: must be a valid number or 'auto' (got True)"),
]


@pytest.mark.parametrize(("overrides", "says"), SPEC_ERRORS, ids=lambda v: v if isinstance(v, str) else None)
def test_spec_error_names_the_key(overrides: list[str], says: str) -> None:
    text = refused(plan_cartpole(*overrides))
    assert says in text
    details = [ln for ln in text.splitlines() if ln.startswith("  ")]
    assert len(details) <= 1, text  # one line per key: no second, false line and no union members
    for leak in ("constrained-", "literal[", "list[", "after validation", ".float:", ".int:"):
        assert leak not in text


# (overrides, rule id, key path, condition, fix) of plan-time refusals of what apply would refuse later
RULE_REFUSALS = [
    (
        ["algo.buffer_size=10"],
        "algo.buffer-size",
        "algo.buffer_size",
        "replay capacity 10 is smaller than one env step of 16 envs",
        "--set algo.buffer_size=256",
    ),
    (
        ['algo.critic="c51"', "algo.v_min=20"],
        "algo.critic-support",
        "algo.v_min",
        "C51 critic support is empty: v_min 20.0 >= v_max 20.0",
        "set algo.v_min below algo.v_max",
    ),
    (
        ['algo.name="flashsac"', "algo.hidden_dims=[64]", "algo.v_max=-1.0"],
        "algo.critic-support",
        "algo.v_max",
        "must contain 0",
        "--set algo.v_min=-5.0 --set algo.v_max=5.0",
    ),
    (
        ["training.collector_cpu_ids=[[0,0]]"],
        "devices.cpu-blocks",
        "training.collector_cpu_ids[0]",
        "CPUs [0] appear more than once in the block of rank 0",
        "list each CPU once",
    ),
]


@pytest.mark.parametrize(("overrides", "rule", "key", "condition", "fix"), RULE_REFUSALS, ids=lambda v: str(v)[:40])
def test_plan_refuses_with_rule_key_condition_and_fix(
    overrides: list[str], rule: str, key: str, condition: str, fix: str
) -> None:
    text = refused(plan_cartpole(*overrides))
    assert "the plan is refused for the host facts in " in text and ": 1 rule not met" in text
    assert f"[{rule}] {key}: " in text and condition in text
    fix_line = next(ln for ln in text.splitlines() if ln.strip().startswith("fix:"))
    assert fix in fix_line


def test_toml_inf_and_nan_in_the_file_are_refused(tmp_path: Path) -> None:
    text = (SPECS / "cartpole.toml").read_text()
    p = tmp_path / "s.toml"
    p.write_text(text.replace("episode_length_s = 10.0", "episode_length_s = inf"))
    assert "task.episode_length_s: must be a finite number (got inf)" in refused(plan(str(p)))
    p.write_text(text.replace("[algo]\n", "[algo]\ngamma = nan\n"))
    assert "algo.gamma: must be a finite number (got nan)" in refused(plan(str(p)))


@pytest.mark.parametrize(
    "overrides",
    [
        ["task.episode_length_s=20"],  # a TOML integer fills a float key
        ["sim.timestep=0", "sim.timestep=0.005"],  # the last --set wins
        ["algo.target_entropy=-2"],
        ["algo.v_min=-10", "algo.v_max=10", 'algo.critic="c51"'],
        ["algo.buffer_size=256"],
        ["training.collector_cpu_ids=[[0,1]]"],
    ],
    ids=str,
)
def test_well_typed_overrides_still_plan(overrides: list[str]) -> None:
    r = plan_cartpole(*overrides)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_specs_pass_strict_validation(path: Path) -> None:
    assert load_spec(path).spec.schema_version == 1


def test_integer_for_float_is_kept_as_float() -> None:
    spec = validate_spec_data(spec_data(task__episode_length_s=20, algo={"name": "sac", "gamma": 1}), "s")
    assert spec.task.episode_length_s == 20.0 and isinstance(spec.task.episode_length_s, float)
    assert isinstance(spec.algo.gamma, float)


def test_every_error_of_several_keys_is_listed_once() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(
            spec_data(task__num_envs=True, sim__workers=True, algo={"name": "sac", "hidden_dims": [0, 0]}), "s.toml"
        )
    text = e.value.render()
    assert "s.toml: 4 invalid values" in text
    assert [d.key_path for d in e.value.diagnostics] == [
        "task.num_envs",
        "sim.workers",
        "algo.hidden_dims[0]",
        "algo.hidden_dims[1]",
    ]


@pytest.mark.parametrize(
    ("affinity", "says"),
    [([-1, 5000], "cpu.affinity.0: Input should be greater than or equal to 0"), ([0, 0], "CPU ids repeat: [0]")],
)
def test_host_facts_with_bad_cpu_ids_are_refused(tmp_path: Path, affinity: list[int], says: str) -> None:
    data = json.loads(Path(HOST).read_text())
    data["cpu"]["affinity"] = affinity
    p = tmp_path / "facts.json"
    p.write_text(json.dumps(data))
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "plan", CARTPOLE, "--host-facts", str(p)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert says in refused(r)
