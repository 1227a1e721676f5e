"""A saved plan is compiled again from its own sections before it runs: a plan edited by hand,
its plan_id recomputed, is refused whatever its id says; every plan `unilab plan` writes passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import HOSTS, SPECS, host
from tests.conftest import run_unilab as unilab
from unilab.errors import UnilabError
from unilab.plan.compile import compile_plan
from unilab.plan.models import Plan
from unilab.plan.recheck import recheck_saved_plan
from unilab.plan.render import compute_plan_id, render
from unilab.spec.load import load_spec


def _compiled(spec: str, host_name: str) -> Plan | None:
    loaded = load_spec(SPECS / spec, [])
    try:
        return compile_plan(loaded.spec, host(host_name), loaded.spec_dir)
    except UnilabError:
        return None  # this spec is refused on this host (the golden set records which)


@pytest.mark.parametrize("host_name", HOSTS)
@pytest.mark.parametrize("spec", sorted(p.name for p in SPECS.glob("*.toml")))
def test_every_plan_compile_writes_passes_its_recheck(spec: str, host_name: str) -> None:
    plan = _compiled(spec, host_name)
    if plan is not None:
        recheck_saved_plan(plan, host(host_name), Path("plan.toml"))


def _edited(plan: Plan, section: str, key: str, value: object) -> Plan:
    body = plan.model_dump(mode="json")
    body[section][key] = value
    body["plan_id"] = ""
    edited = Plan.model_validate(body)
    return edited.model_copy(update={"plan_id": compute_plan_id(edited)})


@pytest.mark.parametrize(
    ("section", "key", "value", "says"),
    [
        # A warm-up longer than the budget would train 0 updates and exit 0: a rule refuses it.
        ("algo", "warmup_env_steps", 10**9, "[algo.warmup]"),
        # A derived value no spec can make: compile writes the budget rounded to whole env steps.
        ("run", "effective_env_steps", 10**12, "~ run.effective_env_steps: 1000000000000 -> "),
        ("task", "max_episode_steps", 7, "~ task.max_episode_steps: 7 -> 1000"),
        ("sim", "workers_per_rank", 99, "~ sim.workers_per_rank: 99 -> "),
    ],
)
def test_an_edited_plan_with_a_recomputed_id_is_refused(section: str, key: str, value: object, says: str) -> None:
    plan = _edited(_compiled("g1.toml", "cpu_laptop"), section, key, value)  # type: ignore[arg-type]
    with pytest.raises(UnilabError) as err:
        recheck_saved_plan(plan, host("cpu_laptop"), Path("p.toml"))
    text = err.value.render()
    assert says in text and "p.toml" in text and "re-plan from the spec" in text, text


def test_apply_refuses_an_edited_saved_plan_before_any_run_directory(tmp_path: Path) -> None:
    r = unilab(
        "plan", str(SPECS / "cartpole.toml"), "--format", "json", "--set", f'run.output_dir="{tmp_path / "runs"}"'
    )
    assert r.returncode == 0, r.stderr
    plan = _edited(Plan.model_validate_json(r.stdout), "run", "effective_env_steps", 10**12)
    path = tmp_path / "plan.toml"
    path.write_text(render(plan))
    r = unilab("apply", str(path), "--quiet")
    assert r.returncode == 1 and "is not what its own spec compiles to" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()
    assert sys.executable  # the same interpreter ran it (run_unilab)
