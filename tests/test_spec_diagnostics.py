"""Spec errors are diagnostics: a stable rule id, the key as written, what it must be, and a fix
that works (the default, the nearest valid key, a --set for a --set)."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from unilab.errors import Diagnostic, SpecError
from unilab.spec.diagnose import SPEC_RULES
from unilab.spec.load import load_spec, validate_spec_data

ROOT = Path(__file__).resolve().parent.parent
G1 = ROOT / "specs" / "g1.toml"
MOTION = ROOT / "specs" / "g1_motion_tracking.toml"


def diags(path: Path, *sets: str) -> dict[str, Diagnostic]:
    with pytest.raises(SpecError) as e:
        load_spec(path, list(sets))
    out = {d.key_path: d for d in e.value.diagnostics}
    assert len(out) == len(e.value.diagnostics)
    text = e.value.render()
    for d in e.value.diagnostics:  # every diagnostic is rendered with its id
        assert f"[{d.rule_id}] {d.key_path}: " in text
    return out


def test_every_rule_id_used_is_documented(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'schema_version = 1\n[run]\nname = "x"\ntotal_env_steps = 0\nseeds = 1\n'
        '[task]\nname = "g1_walk"\nnum_envs = 0\n[sim]\ndecimation = 4.0\n[trainig]\n'
    )
    d = diags(bad)
    assert {k: v.rule_id for k, v in d.items()} == {
        "run.total_env_steps": "spec.value",
        "run.seeds": "spec.unknown-key",
        "task.num_envs": "spec.value",
        "sim.decimation": "spec.type",
        "algo": "spec.missing-key",
        "trainig": "spec.unknown-key",
    }
    assert {v.rule_id for v in d.values()} <= {r.id for r in SPEC_RULES}
    assert "did you mean `run.seed`" in d["run.seeds"].fix
    assert "did you mean `training`" in d["trainig"].fix
    assert d["sim.decimation"].fix == f"set `sim.decimation = 4` (the default) in {bad}, or remove the key"
    assert "greater than 0" in d["run.total_env_steps"].fix
    assert "[algo]" in d["algo"].fix


def test_unknown_key_without_a_near_match_lists_the_section() -> None:
    d = diags(G1, "sim.zzz=1")
    assert "[sim] takes: backend, timestep, decimation" in d["sim.zzz"].fix


def test_default_fix_from_the_right_algo_variant() -> None:
    d = diags(G1, 'algo.name="flashsac"', "algo.batch_size=0")
    from unilab.algos.flashsac.spec import FlashSacSpec

    assert f"algo.batch_size={FlashSacSpec.model_fields['batch_size'].default}" in d["algo.batch_size"].fix


@pytest.mark.parametrize(
    "bad",
    [
        "task.commands.lin_vel_x=[1,0]",
        "algo.actor_hidden_dims=[0]",
        "sim.workers=true",
        "sim.backend=gpu",
        "sim.timestep=-1",
    ],
)
def test_a_set_fix_is_a_working_set(bad: str) -> None:
    """The `--set` a fix proposes (the key's default) is one shell word and makes the spec valid."""
    (d,) = diags(G1, bad).values()
    assert d.fix.startswith("pass --set ") and "(the default)" in d.fix, d.fix
    suggestion = d.fix.removeprefix("pass --set ").split(" ", 1)[0]
    assert len(shlex.split(f"--set {suggestion}")) == 2
    assert load_spec(G1, [bad, suggestion]).spec is not None  # the later --set wins


def test_a_misspelt_name_gets_the_name_it_meant(tmp_path: Path) -> None:
    (d,) = diags(G1, "sim.backend=warp").values()
    assert d.fix == 'did you mean "mjwarp"? pass --set sim.backend="mjwarp", or drop that --set'
    assert load_spec(G1, ["sim.backend=warp", 'sim.backend="mjwarp"']).spec.sim.backend == "mjwarp"
    bad = tmp_path / "bad.toml"
    bad.write_text(G1.read_text().replace("[training]", '[training]\ncuda_process_sharing = "MPS"', 1))
    assert diags(bad)["training.cuda_process_sharing"].fix == (
        f'did you mean "mps"? set `training.cuda_process_sharing = "mps"` in {bad}'
    )


def test_another_algo_by_name_keeps_the_files_keys_so_the_fix_replaces_the_table() -> None:
    """`--set algo.name=flashsac` on the SAC spec: SAC's widths do not fit FlashSAC, and the
    fix is the table --set that gives FlashSAC's own defaults (as for PPO)."""
    d = diags(G1, "algo.name=flashsac")["algo.actor_hidden_dims"]
    assert d.fix.startswith("""pass --set 'algo={name="flashsac"}' instead of --set algo.name=...""")
    table_set = shlex.split(d.fix.removeprefix("pass --set ").split(" instead", 1)[0])[0]
    assert load_spec(G1, [table_set]).spec.algo.name == "flashsac"


def test_a_set_run_or_task_name_leaves_the_file_keys_fixes_alone(tmp_path: Path) -> None:
    """run.name names a run, not a section's model; a task.name that names the file's own task changes none."""
    bad = tmp_path / "bad.toml"
    bad.write_text(G1.read_text().replace("num_envs = 64", "num_envs = 0").replace("seed = 0", "sede = 0"))
    d = diags(bad, "run.name=mine", "task.name=g1_walk")
    assert "did you mean `run.seed`" in d["run.sede"].fix
    assert d["task.num_envs"].fix == f"set `task.num_envs` in {bad} to a value that is greater than or equal to 1"


def test_a_key_without_default_gets_its_condition() -> None:
    d = diags(G1, "task.num_envs=0")["task.num_envs"]
    assert d.fix == "pass --set task.num_envs=<a value that is greater than or equal to 1>, or drop that --set"


def test_devices_spelled_like_torch_get_a_unilab_fix() -> None:
    d = diags(G1, 'training.devices="cuda:0"')["training.devices"]
    assert d.rule_id == "spec.value" and "GPU index" in d.condition
    assert "training.devices = [0]" in d.fix and "unilab host" in d.fix


def test_schema_version_is_a_diagnostic() -> None:
    with pytest.raises(SpecError) as e:
        validate_spec_data({"schema_version": 2}, "s.toml")
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("spec.schema-version", "schema_version")


def test_wrong_algo_name_via_set_names_the_key_and_the_working_set() -> None:
    """`--set algo.name=SAC`: the key is `algo.name` (not `algo`), the condition lists the names
    in words, and the fix is the nearest name as a --set that makes the spec valid."""
    d = diags(G1, "algo.name=SAC")["algo.name"]
    assert d.rule_id == "spec.value"
    assert d.condition == """must be one of "sac", "flashsac", "td3", "ppo" (got 'SAC')"""
    assert d.fix == 'did you mean "sac"? pass --set algo.name="sac", or drop that --set'
    suggestion = d.fix.split("pass --set ", 1)[1].split(",", 1)[0]
    assert len(shlex.split(f"--set {suggestion}")) == 2
    assert load_spec(G1, ["algo.name=SAC", *shlex.split(suggestion)]).spec.algo.name == "sac"


def test_algo_name_without_a_near_match_lists_the_names() -> None:
    d = diags(G1, "algo.name=ddpg")["algo.name"]
    assert d.rule_id == "spec.value" and "Input tag" not in d.condition + d.fix
    assert d.fix == 'pass --set algo.name=<one of "sac", "flashsac", "td3", "ppo">, or drop that --set'


def test_wrong_algo_name_in_the_file_gets_the_edit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(G1.read_text().replace('name = "sac"', 'name = "flashsacc"', 1))
    d = diags(bad)["algo.name"]
    assert d.condition == """must be one of "sac", "flashsac", "td3", "ppo" (got 'flashsacc')"""
    assert d.fix == f'did you mean "flashsac"? set `algo.name = "flashsac"` in {bad}'


def test_missing_algo_name_is_a_missing_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    text = G1.read_text()
    assert '[algo]\nname = "sac"\n' in text
    bad.write_text(text.replace('[algo]\nname = "sac"\n', "[algo]\n"))
    (d,) = diags(bad).values()
    assert (d.rule_id, d.key_path, d.condition) == ("spec.missing-key", "algo.name", "required key is missing")
    assert d.fix == f'add `name = ...` under [algo] in {bad} (one of "sac", "flashsac", "td3", "ppo")'


def test_missing_algo_name_in_a_table_set_names_it_in_that_set() -> None:
    """`--set 'algo={}'` replaced the file's [algo]: the fix is a --set that names one, and it works."""
    (d,) = diags(G1, "algo={}").values()
    assert (d.rule_id, d.key_path) == ("spec.missing-key", "algo.name")
    assert d.fix == """name it in that --set: --set 'algo={name="sac"}' (one of "sac", "flashsac", "td3", "ppo")"""
    assert load_spec(G1, [shlex.split(d.fix.split("--set ", 1)[1].split(" (")[0])[0]]).spec.algo.name == "sac"


# (overrides, key path, rule id, condition): a spec has lists, never pydantic's tuples.
LIST_ERRORS = [
    (["algo.hidden_dims=256"], "algo.hidden_dims", "spec.type", "must be a list of integers (got 256)"),
    (["algo.hidden_dims={a=1}"], "algo.hidden_dims", "spec.type", "must be a list of integers"),
    (['algo.name="flashsac"', "algo.hidden_dims=7"], "algo.hidden_dims", "spec.type", "must be a list of integers"),
    (["algo.hidden_dims=[]"], "algo.hidden_dims", "spec.value", "List should have at least 1 item, not 0 (got [])"),
    (["task.commands.lin_vel_x=5"], "task.commands.lin_vel_x", "spec.type", "must be a list of 2 numbers (got 5)"),
    (["task.commands.lin_vel_x=[1.0]"], "task.commands.lin_vel_x", "spec.value", "must be a list of 2 numbers"),
    (["task.commands.lin_vel_x=[1,2,3]"], "task.commands.lin_vel_x", "spec.value", "List should have at most 2"),
    (["training.collector_cpu_ids=5"], "training.collector_cpu_ids", "spec.type", "must be a list of lists of integ"),
    (["training.collector_cpu_ids=[5]"], "training.collector_cpu_ids[0]", "spec.type", "must be a list of integers"),
    (["run=5"], "run", "spec.type", "must be a table"),
]


@pytest.mark.parametrize(("sets", "key", "rule", "says"), LIST_ERRORS, ids=[" ".join(c[0]) for c in LIST_ERRORS])
def test_type_errors_use_toml_words(sets: list[str], key: str, rule: str, says: str) -> None:
    with pytest.raises(SpecError) as e:
        load_spec(G1, sets)
    text = e.value.render()
    (d,) = e.value.diagnostics
    assert (d.key_path, d.rule_id) == (key, rule) and d.condition.startswith(says), text
    for leak in ("tuple", "frozenset", "dict", "model", "Input ", "required key"):
        assert leak not in text.lower().replace("--set", ""), text


def test_a_set_never_takes_effect_silently_in_part() -> None:
    """A line break smuggling a second key in one --set, and a table --set that would drop an
    earlier --set inside it, are refused; the same keys in a working order are accepted."""
    from unilab.spec.load import apply_overrides

    with pytest.raises(SpecError, match="holds more than one TOML value"):
        apply_overrides({}, ["run.seed=7\ntask.num_envs=3"])
    with pytest.raises(SpecError, match=r"dropping the earlier --set algo\.batch_size") as info:
        apply_overrides({"algo": {"name": "sac"}}, ["algo.batch_size=5", 'algo={name="sac"}'])
    assert "give --set algo.batch_size after it" in info.value.fix
    out = apply_overrides({"algo": {"name": "sac"}}, ['algo={name="sac"}', "algo.batch_size=5"])
    assert out["algo"] == {"name": "sac", "batch_size": 5}


def test_wording_of_fixes_follows_where_the_value_came_from(tmp_path: Path) -> None:
    from unilab.spec.load import apply_overrides

    base = tomllib.loads((ROOT / "specs" / "cartpole.toml").read_text())
    with pytest.raises(SpecError) as e:  # an unknown table made by --set: the --set is what to drop
        validate_spec_data(apply_overrides(base, ["zz.yy=1"]), "spec.toml", {"zz.yy"})
    assert "drop `--set zz.yy=...`" in e.value.diagnostics[0].fix
    with pytest.raises(SpecError) as e:
        validate_spec_data(apply_overrides(base, ['run.name=""']), "spec.toml", {"run.name"})
    assert "<a value that has at least 1 character>" in e.value.diagnostics[0].fix
    with pytest.raises(SpecError) as e:
        validate_spec_data({**base, "schema_version": 2}, "spec.toml")
    assert e.value.diagnostics[0].fix.startswith("set `schema_version = 1` in spec.toml")
    bom = tmp_path / "bom.toml"  # saved by an editor that writes a byte order mark
    bom.write_bytes(b"\xef\xbb\xbf" + (ROOT / "specs" / "cartpole.toml").read_bytes())
    assert load_spec(bom).spec.task.name == "cartpole"


def test_a_key_inside_a_table_set_is_fixed_in_that_set_not_in_the_file() -> None:
    """`--set 'algo={...}'` replaces the file's [algo]: fixing the file would not help."""
    d = diags(G1, 'algo={name="flashsac", critic_hidden_dims=[256,256]}')["algo.critic_hidden_dims"]
    assert d.fix == "in your --set 'algo={...}', set critic_hidden_dims = [256] (the default) or leave it out"
    d = diags(G1, 'run={name="x"}')["run.total_env_steps"]
    assert d.fix.startswith("add total_env_steps = ... in your --set 'run={...}' (it replaces the whole [run] table)")
    assert str(G1) not in d.fix
    d = diags(G1, 'algo={name="sac", lrr=1}')["algo.lrr"]
    assert d.fix.startswith("drop lrr from your --set 'algo={...}'") and str(G1) not in d.fix, d.fix


@pytest.mark.parametrize("key", ["run.output_dir", "task.robot_mjcf", "task.motion"])
def test_a_home_directory_of_no_user_is_a_spec_error(key: str) -> None:
    """`~NAME/...` for a user this host does not have: refused with the key, not a crash later when
    the run directory is made or the file digested."""
    user = "no-such-user-unilab"
    spec = MOTION if key == "task.motion" else G1
    d = diags(spec, f'{key}="~{user}/x"')
    assert d[key].rule_id == "spec.value" and f"`~{user}` names no user here" in d[key].condition
    load_spec(spec, [f'{key}="~/x"'])  # the user's own home directory is fine


@pytest.mark.parametrize("key", ["run.output_dir", "run.init_from", "task.robot_mjcf", "task.motion"])
def test_a_nul_byte_in_a_path_is_a_spec_error(key: str) -> None:
    """A NUL byte (TOML's \\u0000) in a path is refused with the key at plan time, not an internal
    error when apply first opens the path."""
    d = diags(MOTION if key == "task.motion" else G1, f'{key}="runs\\u0000x"')
    assert d[key].rule_id == "spec.value" and "NUL byte" in d[key].condition


def test_a_reward_weight_is_named_by_the_users_own_term_name() -> None:
    """Keys of `[task.reward_weights]` are the user's: one spelled like a type (`float`) or not in
    snake_case is named as written, and each bad weight gets its own diagnostic."""
    d = diags(G1, 'task.reward_weights={float="x", Feet-air="y", alive=2e7}')
    assert set(d) == {"task.reward_weights.float", "task.reward_weights.Feet-air", "task.reward_weights.alive"}
    assert "valid number" in d["task.reward_weights.float"].condition
    assert "1000000" in d["task.reward_weights.alive"].condition
