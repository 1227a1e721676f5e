"""What users of other tools type: overrides in Hydra's or tyro's form, machine-readable output,
tab completion, a smoke run with one flag. Each gets what it meant, or the command that does."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, run_unilab

HOST = str(FIXTURES / "hosts" / "cpu_laptop.json")


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (["task.num_envs=128"], ["--set", "task.num_envs=128"]),  # Hydra
        (["+algo.gamma=0.97"], ["--set", "algo.gamma=0.97"]),  # Hydra's "add a key"
        (["--task.num_envs", "128"], ["--set", "task.num_envs=128"]),  # tyro
        (["--task.num_envs=128"], ["--set", "task.num_envs=128"]),
        (["--set", "task.num_envs", "128"], ["--set", "task.num_envs=128"]),  # the `=` forgotten
    ],
)
def test_an_override_in_another_tools_form_gets_the_set_it_meant(typed: list[str], meant: list[str]) -> None:
    r = run_unilab("plan", "specs/g1.toml", "--host-facts", HOST, *typed, cwd=ROOT)
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr and "usage:" not in r.stderr
    assert "unilab takes spec overrides as --set KEY=VALUE" in r.stderr
    fix = r.stderr.splitlines()[-1]
    assert fix == "fix: " + shlex.join(["unilab", "plan", "specs/g1.toml", "--host-facts", HOST, *meant])
    # The fix is a command that works.
    ok = run_unilab(*shlex.split(fix.removeprefix("fix: unilab ")), cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert meant[1].split("=")[1] in ok.stdout


def test_every_habit_in_one_command_is_fixed_at_once() -> None:
    r = run_unilab("apply", "specs/g1.toml", "task.num_envs=32", "--algo.gamma", "0.97", cwd=ROOT)
    assert r.returncode == 1
    assert "`task.num_envs=32` is a Hydra-style override; `--algo.gamma 0.97` is a tyro-style option" in r.stderr
    assert r.stderr.splitlines()[-1] == ("fix: unilab apply specs/g1.toml --set task.num_envs=32 --set algo.gamma=0.97")


def test_a_file_named_like_an_override_is_still_a_file(tmp_path: Path) -> None:
    """An existing path is an argument, whatever it looks like: `a.b=c` names the spec here."""
    spec = tmp_path / "run.name=x.toml"
    shutil.copy(ROOT / "specs" / "cartpole.toml", spec)
    r = run_unilab("plan", spec.name, "--host-facts", HOST, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_fix_shared_by_many_keys_is_printed_once() -> None:
    r = run_unilab("plan", "specs/g1.toml", "--host-facts", HOST, "--set", "algo.name=ppo", cwd=ROOT)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    keys = [ln for ln in lines if ln.startswith("[algo.ppo-offpolicy-keys]")]
    fixes = [ln for ln in lines if ln.lstrip().startswith("fix")]
    assert len(keys) >= 6 and len(fixes) == 1, r.stderr
    assert fixes[0].startswith(f"    fix (the {len(keys)} above): pass --set 'algo={{name=\"ppo\"}}'")
    assert lines[-1] == fixes[0]  # below the keys it fixes


def test_diff_json_has_the_changes_and_the_same_exit_codes(tmp_path: Path) -> None:
    same = run_unilab("diff", "specs/g1.toml", "specs/g1.toml", "--host-facts", HOST, "--json", cwd=ROOT)
    assert same.returncode == 0, same.stderr
    doc = json.loads(same.stdout)
    assert doc["equal"] is True and doc["changes"] == [] and doc["a"]["plan_id"] == doc["b"]["plan_id"]
    saved = tmp_path / "b.toml"
    out = ["--host-facts", HOST, "--set", "task.num_envs=32", "--out", str(saved)]
    assert run_unilab("plan", "specs/g1.toml", *out, cwd=ROOT).returncode == 0
    differ = run_unilab("diff", "specs/g1.toml", str(saved), "--host-facts", HOST, "--json", cwd=ROOT)
    assert differ.returncode == 2, differ.stderr
    doc = json.loads(differ.stdout)
    assert doc["equal"] is False and doc["b"]["path"] == str(saved)
    assert {"kind": "changed", "key": "task.num_envs", "a": 64, "b": 32} in doc["changes"]


def test_rules_json_lists_every_rule() -> None:
    from unilab.plan.rules import RULES

    r = run_unilab("rules", "--json", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["id"] for x in doc["plan_rules"]] == [rule.id for rule in RULES]
    assert all(x["key"] and x["requires"] for x in doc["plan_rules"]) and doc["spec_checks"]
    assert run_unilab("rules", "--json", "--markdown", cwd=ROOT).returncode == 1


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`unilab apply SPEC --smoke` of the cart-pole spec, in a directory of its own."""
    cwd = tmp_path_factory.mktemp("smoke")
    shutil.copytree(ROOT / "specs", cwd / "specs")
    r = run_unilab("apply", "specs/cartpole.toml", "--smoke", cwd=cwd)
    assert r.returncode == 0, r.stderr[-2000:]
    (run_dir,) = (cwd / "runs").iterdir()
    return run_dir


def test_smoke_is_the_spec_with_a_budget_of_a_few_updates(smoke_run: Path) -> None:
    assert smoke_run.name.startswith("cartpole-smoke-")
    m = json.loads((smoke_run / "manifest.json").read_text())
    assert m["status"] == "succeeded"
    assert 0 < m["counters"]["env_steps"] <= 5_000 and m["counters"]["updates"] > 0
    assert m["checkpoints"]
    # Only the budget changed: the plan's algo is the spec's but for the warm-up.
    plan = run_unilab("plan", "specs/cartpole.toml", "--smoke", "--format", "json", cwd=ROOT)
    full = run_unilab("plan", "specs/cartpole.toml", "--format", "json", cwd=ROOT)
    smoke_algo, algo = json.loads(plan.stdout)["algo"], json.loads(full.stdout)["algo"]
    assert smoke_algo.pop("warmup_env_steps") == 0
    algo.pop("warmup_env_steps")
    assert smoke_algo == algo


def test_smoke_of_an_on_policy_spec_is_two_rollouts() -> None:
    r = run_unilab("plan", "specs/cartpole.toml", "--smoke", "--set", 'algo={name="ppo"}', "--format", "json", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["run"]["total_env_steps"] == 2 * plan["task"]["num_envs"] * plan["algo"]["num_steps_per_env"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["specs/cartpole.toml", "--smoke", "--set", "run.total_env_steps=9000"], "a smoke run sets"),
        (["--smoke", "--resume", "runs/x"], "--resume continues a run"),
    ],
)
def test_smoke_refuses_what_it_would_override(args: list[str], said: str) -> None:
    r = run_unilab("apply", *args, cwd=ROOT)
    assert r.returncode == 1 and r.stderr.startswith("error: ") and said in r.stderr, r.stderr
    assert "fix: " in r.stderr


def test_manifest_validate_json_says_valid_or_why_not(smoke_run: Path, tmp_path: Path) -> None:
    r = run_unilab("manifest", "validate", str(smoke_run), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["valid"] is True and doc["status"] == "succeeded" and doc["run_dir_checked"] is True
    assert doc["checkpoints"] == doc["checkpoints_verified"] >= 1
    broken = tmp_path / "run"
    shutil.copytree(smoke_run, broken)
    ckpt = next((broken / "checkpoints").glob("*.pt"))
    ckpt.write_bytes(ckpt.read_bytes()[:-10])
    bad = run_unilab("manifest", "validate", str(broken), "--json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["valid"] is False and doc["error"].startswith("error: ")
    assert bad.stderr.startswith("error: ")  # the paragraph, as without --json


def _complete(line: str, cwd: Path, tmp_path: Path) -> list[str]:
    """What tab after ``line`` offers, asked as the shell code of `unilab completion bash` asks."""
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": "bash",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "_ARGCOMPLETE_IFS": "\n",
    }
    subprocess.run([sys.executable, "-m", "unilab"], cwd=cwd, env=env, capture_output=True, timeout=60)
    return [c.strip() for c in out.read_text().split("\n")] if out.exists() else []


def test_tab_completes_commands_spec_keys_and_run_directories(smoke_run: Path, tmp_path: Path) -> None:
    code = run_unilab("completion", "bash")
    assert code.returncode == 0 and "unilab" in code.stdout and "complete" in code.stdout
    assert "plan" in _complete("unilab pl", ROOT, tmp_path)
    assert "task.num_envs=" in _complete("unilab plan specs/g1.toml --set task.num", ROOT, tmp_path)
    assert "specs/g1.toml" in _complete("unilab apply specs/g1", ROOT, tmp_path)
    runs = smoke_run.parent
    assert str(smoke_run) in _complete(f"unilab eval {runs}/", ROOT, tmp_path)
    assert str(smoke_run) in _complete(f"unilab apply --resume {runs}/", ROOT, tmp_path)


def test_an_options_value_that_looks_like_an_override_is_left_alone(tmp_path: Path) -> None:
    """`--out run.name=x.toml` names the file to write, whatever it looks like."""
    out = tmp_path / "run.name=x.toml"
    r = run_unilab("plan", "specs/cartpole.toml", "--host-facts", HOST, "--out", str(out), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert out.is_file()
