"""The command line as a user meets it: real processes, exit codes, one-paragraph errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import FIXTURES, ROOT

HOST = str(FIXTURES / "hosts" / "cpu_laptop.json")
NODE = str(FIXTURES / "hosts" / "node_8gpu_mps.json")


def unilab(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, **(env or {})}
    e.pop("UNILAB_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "unilab", *args], cwd=cwd, capture_output=True, text=True, env=e, timeout=120
    )


def assert_clean_error(r: subprocess.CompletedProcess[str], code: int = 1) -> None:
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.startswith("error:")


def test_plan_g1_on_this_host() -> None:
    r = unilab("plan", "specs/g1.toml")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith('plan_id = "sha256:')


def test_plan_does_not_import_torch_warp_or_mujoco() -> None:
    code = (
        f"import sys, runpy; sys.argv=['unilab','plan','specs/g1.toml','--host-facts',{HOST!r}];"
        "from unilab.cli.main import main; rc=main();"
        "bad=[m for m in ('torch','warp','mujoco','mujoco_warp','numpy') if m in sys.modules];"
        "print('HEAVY', bad); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("HEAVY []")


def test_mps_on_this_machine_names_rule_condition_and_fix() -> None:
    r = unilab("plan", "specs/g1.toml", "--host-facts", HOST, "--set", "training.cuda_process_sharing=mps")
    assert_clean_error(r)
    assert "[mps.host] training.cuda_process_sharing: no NVIDIA driver" in r.stderr
    assert "fix:" in r.stderr
    # Facts read from a file are not this machine's: the refusal says whose they are.
    assert r.stderr.startswith(f"error: the plan is refused for the host facts in {HOST}: 2 rules not met")


def test_mps_without_service_names_the_start_command() -> None:
    r = unilab(
        "plan",
        "specs/g1_dp2_cuda_mps.toml",
        "--host-facts",
        str(FIXTURES / "hosts" / "one_h200.json"),
        "--set",
        "training.devices=[0]",
        "--set",
        'training.dp_gradient_wire_dtype="float32"',
    )
    assert_clean_error(r)
    assert "unilab mps start --gpus 0 --name train-gpu0 --daemon" in r.stderr


def test_plan_out_json_validates_against_committed_schema(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    r = unilab("plan", "specs/g1_dp2_cuda_mps.toml", "--host-facts", NODE, "--format", "json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    schema = json.loads((ROOT / "schemas" / "plan.v1.json").read_text())
    jsonschema.validate(json.loads(out.read_text()), schema)


def test_diff_exit_codes(tmp_path: Path) -> None:
    saved = tmp_path / "g1.plan.toml"
    assert unilab("plan", "specs/g1.toml", "--host-facts", HOST, "--out", str(saved)).returncode == 0
    same = unilab("diff", "specs/g1.toml", str(saved), "--host-facts", HOST)
    assert same.returncode == 0, same.stderr
    other = unilab("diff", "specs/g1.toml", "specs/g1_dp2_cpu.toml", "--host-facts", HOST)
    assert other.returncode == 2
    assert "~ topology.world_size: 1 -> 2" in other.stdout
    assert "+ ranks[1].rank: 1" in other.stdout
    bad = unilab("diff", "specs/g1.toml", "nope.toml", "--host-facts", HOST)
    assert_clean_error(bad)


def test_host_json_is_schema_valid_and_replannable(tmp_path: Path) -> None:
    r = unilab("host", "--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    jsonschema.validate(facts, json.loads((ROOT / "schemas" / "host_facts.v1.json").read_text()))
    p = tmp_path / "me.json"
    p.write_text(r.stdout)
    assert unilab("plan", "specs/g1.toml", "--host-facts", str(p)).returncode == 0


def test_host_human_readable_says_no_driver() -> None:
    nvidia = json.loads(unilab("host", "--json").stdout)["nvidia"]
    if nvidia["driver_present"]:
        pytest.skip("this host has an NVIDIA driver")
    r = unilab("host")
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("nvidia")]
    assert line.split(maxsplit=1)[1].startswith("no driver ("), line  # the reason NVML gave follows


def test_schema_check_passes_and_detects_drift(tmp_path: Path) -> None:
    assert unilab("schema", "--check").returncode == 0
    assert unilab("schema", "--out", str(tmp_path)).returncode == 0
    (tmp_path / "plan.v1.json").write_text("{}")
    r = unilab("schema", "--check", "--out", str(tmp_path))
    assert_clean_error(r)
    assert "plan.v1.json" in r.stderr


def test_schemas_have_draft_id_and_version() -> None:
    for p in (ROOT / "schemas").glob("*.json"):
        s = json.loads(p.read_text())
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert s["$id"].startswith("urn:unilab:schema:") and s["version"] == 1
        jsonschema.Draft202012Validator.check_schema(s)


@pytest.mark.parametrize("name", ["spec", "plan", "manifest"])
def test_every_field_a_user_writes_or_reads_is_described(name: str) -> None:
    """The spec a user writes, the plan a reviewer reads and the manifest that proves a run: each
    field of their exported schemas says what it means."""
    s = json.loads((ROOT / "schemas" / f"{name}.v1.json").read_text())
    bare = [
        f"{owner}.{field}"
        for owner, obj in [(name, s), *s.get("$defs", {}).items()]
        for field, prop in obj.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert bare == []


def test_rules_listing_and_generated_docs_match_code() -> None:
    r = unilab("rules", "--markdown")
    assert r.returncode == 0
    assert (ROOT / "docs" / "rules.md").read_text() == r.stdout
    g = subprocess.run([sys.executable, "tools/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert g.returncode == 0, g.stdout + g.stderr


@pytest.mark.parametrize("sub", ["plan", "diff", "host", "schema", "rules", "eval"])
def test_subcommand_help(sub: str) -> None:
    r = unilab(sub, "--help")
    assert r.returncode == 0 and "usage: unilab" in r.stdout


def test_missing_spec_is_one_paragraph() -> None:
    r = unilab("plan", "does/not/exist.toml")
    assert_clean_error(r)
    assert len(r.stderr.strip().splitlines()) <= 3


def test_unwritable_out_dir_is_a_clear_error(tmp_path: Path) -> None:
    r = unilab("plan", "specs/g1.toml", "--host-facts", HOST, "--out", str(tmp_path / "no" / "dir" / "p.toml"))
    assert_clean_error(r)
    assert not (tmp_path / "no").exists()


def test_bad_host_facts_file(tmp_path: Path) -> None:
    p = tmp_path / "facts.json"
    p.write_text('{"schema_version": 1}')
    assert_clean_error(unilab("plan", "specs/g1.toml", "--host-facts", str(p)))


def test_host_facts_with_a_saved_plan_is_refused_not_ignored(tmp_path: Path) -> None:
    plan = tmp_path / "p.toml"
    assert unilab("plan", "specs/g1.toml", "--out", str(plan)).returncode == 0
    facts = "tests/fixtures/hosts/one_h200.json"
    r = unilab("plan", str(plan), "--host-facts", facts)
    assert_clean_error(r)
    assert "--host-facts applies to specs only" in r.stderr and "unilab plan SPEC --host-facts" in r.stderr
    r = unilab("diff", str(plan), str(plan), "--host-facts", facts)
    assert_clean_error(r)
    assert "both sides are saved plans" in r.stderr
    # A spec against recorded facts, diffed with a saved plan: the facts are the spec's.
    r = unilab("diff", "specs/g1.toml", str(plan), "--host-facts", facts)
    assert r.returncode == 2 and "~ topology.process_group_backend" not in r.stdout, r.stderr
