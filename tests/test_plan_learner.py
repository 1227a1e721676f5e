"""The plan's learner decisions: precision and CPU threads, from the host facts, with their reasons."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ROOT, host, spec_data
from unilab.errors import PlanRefused
from unilab.host.facts import HostFacts
from unilab.plan.compile import compile_plan
from unilab.plan.fingerprint import compare_fingerprint
from unilab.plan.models import Plan
from unilab.spec.load import validate_spec_data

WIDE_SAC = {"name": "sac", "actor_hidden_dims": [512, 256, 128], "critic_hidden_dims": [768, 384, 192]}


def _plan(facts: str | HostFacts = "cpu_amx", **dotted: Any) -> Plan:
    f = host(facts) if isinstance(facts, str) else facts
    return compile_plan(validate_spec_data(spec_data(**dotted), "t"), f, ROOT / "specs")


def _without_features(name: str) -> HostFacts:
    data = host(name).model_dump()
    data["cpu"]["features"] = None
    return HostFacts.model_validate(data)


@pytest.mark.parametrize(
    ("facts", "algo", "effective", "says"),
    [
        ("cpu_amx", WIDE_SAC, "bfloat16", "AMX tiles"),
        ("cpu_amx", {"name": "flashsac"}, "bfloat16", "AMX tiles"),  # 256 wide, blocks of 1024
        ("cpu_amx", {"name": "sac", "hidden_dims": [64, 64]}, "float32", "widest hidden layer (64)"),
        ("cpu_amx", {"name": "ppo"}, "float32", "rsl-rl-lib"),
        ("cpu_laptop", WIDE_SAC, "float32", "no bf16 matrix units"),
        ("cpu_zen4", WIDE_SAC, "bfloat16", "avx512_bf16 (no AMX tiles), measured 1.47x"),
        ("cpu_zen4", {"name": "sac", "hidden_dims": [64, 64]}, "float32", "widest hidden layer (64)"),
        ("cpu_smt4", WIDE_SAC, "bfloat16", "AMX tiles"),
        (_without_features("cpu_amx"), WIDE_SAC, "float32", "do not record the CPU's features"),
    ],
)
def test_auto_precision_follows_the_cpu_and_the_sizes(facts: Any, algo: dict, effective: str, says: str) -> None:
    p = _plan(facts, algo=algo).learner
    assert p is not None
    assert (p.precision.requested, p.precision.effective) == ("auto", effective)
    assert says in p.precision.reason


def test_a_cpu_learner_with_avx512_bf16_but_no_amx_takes_bfloat16_on_auto_and_float32_on_request() -> None:
    auto = _plan("node_8gpu_mps", algo=WIDE_SAC).learner
    assert auto is not None and auto.precision.effective == "bfloat16" and "no AMX" in auto.precision.reason
    asked = _plan("node_8gpu_mps", algo={**WIDE_SAC, "precision": "float32"}).learner
    assert asked is not None and asked.precision.effective == "float32"


def test_explicit_bfloat16_on_an_avx2_cpu_is_refused_with_rule_key_condition_and_fix() -> None:
    with pytest.raises(PlanRefused) as e:
        _plan("cpu_laptop", algo={**WIDE_SAC, "precision": "bfloat16"})
    (d,) = e.value.diagnostics
    assert (d.rule_id, d.key_path) == ("learner.precision", "algo.precision")
    assert "neither amx_bf16 nor avx512_bf16" in d.condition and "59-124x slower" in d.condition
    assert d.fix == 'set algo.precision = "auto" (or "float32")'


def test_explicit_float32_stands_everywhere() -> None:
    p = _plan("cpu_amx", algo={**WIDE_SAC, "precision": "float32"}).learner
    assert p is not None and (p.precision.effective, p.precision.reason) == ("float32", 'algo.precision = "float32"')


def test_wide_off_policy_learner_takes_a_thread_per_physical_core_and_the_whole_block() -> None:
    plan = _plan("cpu_amx", algo=WIDE_SAC)
    r = plan.ranks[0]
    assert (r.torch_threads, r.learner_cpu_ids, r.collector_cpu_ids) == (2, [0, 1], [1])
    assert plan.learner is not None and "whole block" in plan.learner.threads_reason


RECIPE_SAC = {"name": "sac", "hidden_dims": [256, 256]}  # the walking recipe's networks


@pytest.mark.parametrize(
    ("facts", "algo", "layout", "says"),
    [
        # AMX: the whole block from 256 units.
        ("cpu_amx", WIDE_SAC, (2, [0, 1], [1]), "1.7x the env steps/s"),
        ("cpu_amx", RECIPE_SAC, (2, [0, 1], [1]), "1.7x the env steps/s"),
        # AVX512-BF16 without AMX and AVX2 only: the whole block from 512 units, a CPU apart under.
        ("cpu_zen4", WIDE_SAC, (2, [0, 1], [1]), "1.52x the env steps/s"),
        ("cpu_zen4", RECIPE_SAC, (1, [0], [1]), "1,499 against 1,363 env steps/s"),
        ("cpu_laptop", WIDE_SAC, (2, [0, 1], [1]), "1.52x the env steps/s"),
        ("cpu_laptop", RECIPE_SAC, (1, [0], [1]), "1,499 against 1,363 env steps/s"),
        # Every kind: one thread on a CPU of its own for small networks.
        ("cpu_laptop", {"name": "sac", "hidden_dims": [64, 64]}, (1, [0], [1]), "splitting each operation"),
        ("cpu_zen4", {"name": "sac", "hidden_dims": [64, 64]}, (1, [0], [1]), "splitting each operation"),
    ],
)
def test_auto_threads_follow_the_cpu_kind_and_the_sizes(facts: str, algo: dict, layout: tuple, says: str) -> None:
    plan = _plan(facts, algo=algo)
    r = plan.ranks[0]
    assert (r.torch_threads, r.learner_cpu_ids, r.collector_cpu_ids) == layout
    assert plan.learner is not None and says in plan.learner.threads_reason


def test_smt_siblings_count_once() -> None:
    r = _plan("cpu_smt4", algo=WIDE_SAC).ranks[0]
    assert r.torch_threads == 2  # 4 logical CPUs on 2 physical cores
    assert (r.learner_cpu_ids, r.collector_cpu_ids) == ([0, 1], [2, 3])


def test_small_networks_keep_one_thread_on_a_cpu_of_its_own() -> None:
    plan = _plan("cpu_amx", algo={"name": "sac", "hidden_dims": [64, 64]})
    r = plan.ranks[0]
    assert (r.torch_threads, r.learner_cpu_ids, r.collector_cpu_ids) == (1, [0], [1])
    assert plan.learner is not None and "splitting each operation" in plan.learner.threads_reason


def test_explicit_threads_stand_and_are_the_reason() -> None:
    plan = _plan("cpu_amx", algo=WIDE_SAC, training__torch_threads=1)
    assert plan.ranks[0].torch_threads == 1 and plan.ranks[0].learner_cpu_ids == [0]
    assert plan.learner is not None and plan.learner.threads_reason.startswith("training.torch_threads = 1")


def test_the_cpu_facts_the_decisions_read_are_in_the_fingerprint() -> None:
    plan = _plan("cpu_amx", algo=WIDE_SAC)
    assert plan.host_facts["cpu.features"] == host("cpu_amx").cpu.features
    assert plan.host_facts["cpu.cores"] == [[0], [1]]
    changed = compare_fingerprint(plan.host_facts, _without_features("cpu_amx"))
    assert [c.key for c in changed] == ["cpu.features"]


def test_hidden_dims_is_a_shorthand_that_gives_the_same_plan() -> None:
    short = _plan("cpu_amx", algo={"name": "sac", "hidden_dims": [512, 512]})
    both = _plan("cpu_amx", algo={"name": "sac", "actor_hidden_dims": [512, 512], "critic_hidden_dims": [512, 512]})
    assert short.plan_id == both.plan_id
    # A network's own key wins; the shorthand fills the other.
    mixed = _plan("cpu_amx", algo={"name": "sac", "hidden_dims": [64], "critic_hidden_dims": [32, 32]}).algo
    assert (mixed.actor_hidden_dims, mixed.critic_hidden_dims) == ((64,), (32, 32))  # type: ignore[union-attr]
