"""The spec language: validation, overrides, and clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.conftest import SPECS, spec_data
from unilab.errors import SpecError
from unilab.spec.load import apply_overrides, load_spec, parse_override, spec_digest, validate_spec_data


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_specs_validate(path: Path) -> None:
    loaded = load_spec(path)
    assert loaded.spec.schema_version == 1


def test_spec_is_frozen() -> None:
    spec = validate_spec_data(spec_data(), "t")
    with pytest.raises(ValidationError):  # assignment to a frozen model
        spec.run.seed = 3  # type: ignore[misc]


def test_unknown_key_is_named() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(training__cuda_sharing="mps"), "s.toml")
    assert "training.cuda_sharing: unknown key" in e.value.render()


def test_missing_schema_version() -> None:
    data = spec_data()
    del data["schema_version"]
    with pytest.raises(SpecError, match="schema_version must be 1"):
        validate_spec_data(data, "s.toml")


def test_wrong_type_names_key_and_value() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(task__num_envs="many"), "s.toml")
    text = e.value.render()
    assert "task.num_envs" in text and "'many'" in text


def test_algo_union_error_path_has_no_tag() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(algo={"name": "sac", "batch_size": 0}), "s.toml")
    assert "algo.batch_size" in e.value.render()


def test_ppo_offpolicy_keys_refused_by_rule() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(algo={"name": "ppo", "batch_size": 512, "tau": 0.01}), "s.toml")
    ids = [(d.rule_id, d.key_path) for d in e.value.diagnostics]
    assert ids == [("algo.ppo-offpolicy-keys", "algo.batch_size"), ("algo.ppo-offpolicy-keys", "algo.tau")]


def test_ppo_offpolicy_keys_are_reported_with_every_other_invalid_key() -> None:
    data = spec_data(algo={"name": "ppo", "batch_size": 512, "learning_rate": -1.0}, task__num_envs=0)
    with pytest.raises(SpecError) as e:
        validate_spec_data(data, "s.toml")
    ids = sorted((d.rule_id, d.key_path) for d in e.value.diagnostics)
    assert ids == [
        ("algo.ppo-offpolicy-keys", "algo.batch_size"),
        ("spec.value", "algo.learning_rate"),
        ("spec.value", "task.num_envs"),
    ]
    assert e.value.summary == "s.toml: 3 invalid values"


def test_switching_the_shipped_spec_to_ppo_from_the_command_line() -> None:
    """`--set algo.name=ppo` keeps g1.toml's SAC keys; the fix offers the table override, which works."""
    with pytest.raises(SpecError) as e:
        load_spec(SPECS / "g1.toml", ['algo.name="ppo"'])
    (fix,) = {d.fix for d in e.value.diagnostics}
    assert fix.startswith("""pass --set 'algo={name="ppo"}' instead"""), fix
    loaded = load_spec(SPECS / "g1.toml", [fix.split("'")[1]])
    assert loaded.spec.algo.name == "ppo" and loaded.spec.task.num_envs == 64


def test_an_offpolicy_key_set_on_a_ppo_spec_is_dropped_from_the_command_line(tmp_path: Path) -> None:
    ppo = tmp_path / "ppo.toml"
    ppo.write_text(
        'schema_version = 1\n[run]\nname = "p"\ntotal_env_steps = 1000\n[task]\nname = "cartpole"\nnum_envs = 4\n'
        '[algo]\nname = "ppo"\n'
    )
    with pytest.raises(SpecError) as e:
        load_spec(ppo, ["algo.batch_size=3"])
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.fix) == ("algo.ppo-offpolicy-keys", "drop `--set algo.batch_size=...`")


def test_ppo_without_offpolicy_keys_passes() -> None:
    spec = validate_spec_data(spec_data(algo={"name": "ppo", "num_steps_per_env": 32}), "s.toml")
    assert spec.algo.name == "ppo"


@pytest.mark.parametrize(
    ("task", "key", "owners"),
    [
        ({"name": "cartpole", "commands": {"lin_vel_x": [0.0, 0.5]}}, "commands", '"g1_walk"'),
        ({"name": "cartpole", "observation_noise": True}, "observation_noise", '"g1_walk" or "g1_motion_tracking"'),
        ({"name": "cartpole", "action_scale": 0.5}, "action_scale", '"g1_walk" or "g1_motion_tracking"'),
        ({"name": "cartpole", "robot_mjcf": "g1.xml"}, "robot_mjcf", '"g1_walk" or "g1_motion_tracking"'),
        ({"name": "g1_walk", "motion": "builtin:g1_squat"}, "motion", '"g1_motion_tracking"'),
        (
            {"name": "g1_motion_tracking", "motion": "builtin:g1_squat", "gait_period_s": 0.8},
            "gait_period_s",
            '"g1_walk"',
        ),
    ],
)
def test_another_tasks_key_is_refused_by_rule(task: dict[str, object], key: str, owners: str) -> None:
    """A key of another task is not a typo: the rule names the tasks that take it."""
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(task={"num_envs": 4, **task}), "s.toml")
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("task.options", f"task.{key}")
    assert d.condition.endswith(f"{task['name']} does not take it")
    assert d.fix == f"remove task.{key}, or set task.name = {owners}"


def test_a_misspelt_task_key_is_an_unknown_key_of_that_task() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(task={"name": "cartpole", "num_envs": 4, "episode_lenght_s": 5.0}), "s.toml")
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("spec.unknown-key", "task.episode_lenght_s")
    assert "did you mean `task.episode_length_s`?" in d.fix


def test_motion_tracking_needs_its_motion() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(task={"name": "g1_motion_tracking", "num_envs": 4}), "s.toml")
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("spec.missing-key", "task.motion")
    assert "`builtin:NAME` (e.g. `builtin:g1_squat`)" in d.fix


def test_switching_the_shipped_spec_to_another_task_from_the_command_line() -> None:
    """`--set task.name=cartpole` keeps the motion-tracking spec's `motion`; the fix is a table --set
    with the keys the task requires, which works once they are filled in."""
    with pytest.raises(SpecError) as e:
        load_spec(SPECS / "g1_motion_tracking.toml", ["task.name=cartpole"])
    fixes = {d.fix for d in e.value.diagnostics}
    assert fixes == {
        """pass --set 'task={name="cartpole", num_envs=...}' instead of --set task.name=...: a table replaces """
        "the whole [task] section (cartpole's defaults; add its keys inside the braces)"
    }, fixes
    loaded = load_spec(SPECS / "g1_motion_tracking.toml", ["task={name='cartpole', num_envs=16}"])
    assert loaded.spec.task.name == "cartpole" and loaded.spec.task.num_envs == 16


def test_command_range_must_be_ordered() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data(spec_data(task__commands={"lin_vel_x": [1.0, -1.0]}), "s.toml")
    assert "task.commands.lin_vel_x" in e.value.render() and "lower bound" in e.value.render()


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("task.num_envs=128", ["task", "num_envs"], 128),
        ('training.devices=["cpu","cpu"]', ["training", "devices"], ["cpu", "cpu"]),
        ("training.cuda_process_sharing=mps", ["training", "cuda_process_sharing"], "mps"),
        ('run.name="x y"', ["run", "name"], "x y"),
        ("algo.tau=5e-3", ["algo", "tau"], 0.005),
        ("sim.timestep = 0.002", ["sim", "timestep"], 0.002),
    ],
)
def test_parse_override(text: str, path: list[str], value: object) -> None:
    assert parse_override(text) == (path, value)


@pytest.mark.parametrize("text", ["novalue", "a..b=1", "x=[1,", "=3"])
def test_bad_override_is_a_spec_error(text: str) -> None:
    with pytest.raises(SpecError):
        parse_override(text)


def test_override_into_scalar_is_refused() -> None:
    with pytest.raises(SpecError, match="is a value, not a table"):
        apply_overrides({"run": {"name": "x"}}, ["run.name.first=1"])


def test_overrides_apply_and_change_digest() -> None:
    a = load_spec(SPECS / "g1.toml")
    b = load_spec(SPECS / "g1.toml", ["task.num_envs=32"])
    assert b.spec.task.num_envs == 32
    assert spec_digest(a.spec) != spec_digest(b.spec)
    assert spec_digest(a.spec) == spec_digest(load_spec(SPECS / "g1.toml").spec)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")


def test_invalid_toml(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("schema_version = \n")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(p)


def test_switching_to_motion_tracking_from_the_command_line_asks_for_the_motion_alone() -> None:
    """g1_dp2_cpu.toml's task keys all fit g1_motion_tracking: the fix adds the one it requires, and works."""
    with pytest.raises(SpecError) as e:
        load_spec(SPECS / "g1_dp2_cpu.toml", ["task.name=g1_motion_tracking"])
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("spec.missing-key", "task.motion")
    assert d.fix.startswith("add --set task.motion=... (g1_motion_tracking requires it): The reference motion")
    loaded = load_spec(SPECS / "g1_dp2_cpu.toml", ["task.name=g1_motion_tracking", 'task.motion="builtin:g1_squat"'])
    assert loaded.spec.task.num_envs == 32


def test_switching_g1_toml_to_motion_tracking_names_its_walk_only_keys() -> None:
    """g1.toml drives the legs alone on a gait clock: keys of g1_walk that motion tracking refuses by name."""
    with pytest.raises(SpecError) as e:
        load_spec(SPECS / "g1.toml", ["task.name=g1_motion_tracking", 'task.motion="builtin:g1_squat"'])
    keys = {d.key_path for d in e.value.diagnostics}
    assert keys == {"task.actions", "task.gait_period_s"}
    assert all(d.rule_id == "task.options" and "g1_walk" in d.condition for d in e.value.diagnostics)


def test_a_set_table_without_a_name_keeps_its_keys_in_the_fix() -> None:
    with pytest.raises(SpecError) as e:
        load_spec(SPECS / "g1.toml", ["task={num_envs=4}"])
    (d,) = e.value.diagnostics
    assert (
        d.fix == """add name=... inside your --set 'task={...}' (one of "g1_walk", "g1_motion_tracking", "cartpole")"""
    )
