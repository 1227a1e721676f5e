"""compile(): determinism, plan_id semantics, round trips, stale-plan comparison, golden plans."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import HOSTS, ROOT, host, spec_data
from unilab.errors import UnilabError
from unilab.plan.compile import compile_plan
from unilab.plan.fingerprint import compare_fingerprint
from unilab.plan.render import compute_plan_id, load_plan, render
from unilab.spec.load import validate_spec_data


def _plan(host_name: str = "cpu_laptop", **dotted):
    return compile_plan(validate_spec_data(spec_data(**dotted), "t"), host(host_name), ROOT / "specs")


def test_golden_plans_are_byte_identical_on_regeneration() -> None:
    r = subprocess.run([sys.executable, "tools/regen_golden.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_golden_set_covers_every_shipped_spec_and_host() -> None:
    golden = {p.name.split(".")[0] for p in (ROOT / "tests/golden/plans").iterdir()}
    for spec in (ROOT / "specs").glob("*.toml"):
        for h in HOSTS:
            assert f"{spec.stem}__{h}" in golden


def test_default_cpu_plan_resolves_the_execution_modes() -> None:
    plan = _plan()
    assert plan.topology.world_size == 1 and plan.topology.process_group_backend == "gloo"
    # Without AMX the off-policy learner gets a CPU of its own, apart from the collector's.
    assert (plan.ranks[0].learner_cpu_ids, plan.ranks[0].collector_cpu_ids) == ([0], [1])
    assert plan.ranks[0].torch_threads == 1
    assert plan.sim.workers_per_rank == 1
    assert plan.sync.action_dependency == "synchronous"
    assert plan.cuda_process_sharing.effective == "none"
    assert not plan.gradient_wire.active
    assert plan.graphs.learner.enabled is False and "CPU" in (plan.graphs.learner.disable_reason or "")
    assert plan.nccl_env == []


@pytest.mark.parametrize(
    ("host_name", "dotted", "learner", "collector"),
    [
        # A CPU learner: a thread per physical core (8 of 16 CPUs), on CPUs apart where they fit.
        ("one_h200", {}, list(range(8)), list(range(8, 16))),
        ("one_h200", {"training__devices": [0]}, [0, 1], list(range(2, 16))),  # a GPU learner: two
        ("cpu_laptop", {"algo": {"name": "ppo"}}, [], [0, 1]),  # PPO updates while the workers idle
        ("cpu_laptop", {"training__collector_cpu_ids": [[0, 1]]}, [], [0, 1]),  # the user's layout
        # An explicit worker count keeps its CPUs; threads that do not fit beside them share the block.
        ("cpu_laptop", {"sim__workers": 2}, [0, 1], [0, 1]),
        ("cpu_amx", {}, [0, 1], [1]),  # with AMX: a thread per core on the whole block
        ("one_h200", {"sim__workers": 12}, list(range(16)), list(range(4, 16))),
        ("cpu_laptop", {"training__torch_threads": 4}, [0, 1], [1]),  # the collector keeps one CPU
        ("cpu_laptop", {"training__torch_threads": 1}, [0], [1]),  # one thread fits apart
    ],
)
def test_learner_cpu_reservation(host_name: str, dotted: dict, learner: list[int], collector: list[int]) -> None:
    r = _plan(host_name, **dotted).ranks[0]
    assert (r.learner_cpu_ids, r.collector_cpu_ids) == (learner, collector)


def test_dp_cpu_blocks_split_the_affinity_set() -> None:
    plan = _plan(training__devices=["cpu", "cpu"])
    # One CPU per rank: each rank's learner shares its collector's CPU.
    assert [(r.learner_cpu_ids, r.collector_cpu_ids) for r in plan.ranks] == [([0], [0]), ([1], [1])]
    assert [r.seed for r in plan.ranks] == [0, 1]
    assert plan.topology.launcher == "elastic"


def test_mps_plan_records_services_by_uuid_and_nccl_env_sources() -> None:
    plan = _plan(
        "node_8gpu_mps",
        sim__backend="mjwarp",
        algo={"name": "flashsac"},
        training__devices=[0, 1],
        training__cuda_process_sharing="mps",
        training__dp_gradient_wire_dtype="bfloat16",
    )
    facts = host("node_8gpu_mps")
    assert [r.gpu_uuid for r in plan.ranks] == [facts.nvidia.gpus[0].uuid, facts.nvidia.gpus[1].uuid]
    assert [r.mps.service for r in plan.ranks if r.mps] == ["train-gpu0", "train-gpu1"]
    assert plan.topology.process_group_backend == "nccl"
    assert plan.graphs.learner.enabled and plan.graphs.physics.enabled
    env = {e.name: (e.value, e.source) for e in plan.nccl_env}
    assert env["NCCL_DEBUG"] == ("WARN", "user")
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == ("0", "plan")
    assert [r.learner_cpu_ids for r in plan.ranks] == [[0, 1], [96, 97]]
    assert [r.collector_cpu_ids[:2] for r in plan.ranks] == [[2, 3], [98, 99]]


def test_user_nccl_value_wins_over_the_plans() -> None:
    facts = host("node_8gpu_mps").model_copy(update={"nccl_env": {"NCCL_SOCKET_IFNAME": "eth0"}})
    spec = validate_spec_data(spec_data(training__devices=[0, 1], training__nccl_transport="loopback"), "t")
    plan = compile_plan(spec, facts, ROOT)
    env = {e.name: (e.value, e.source) for e in plan.nccl_env}
    assert env["NCCL_SOCKET_IFNAME"] == ("eth0", "user")
    assert env["NCCL_IB_DISABLE"] == ("1", "plan")


@pytest.mark.parametrize("fmt", ["toml", "json"])
def test_render_round_trip_keeps_plan_id(tmp_path: Path, fmt: str) -> None:
    plan = _plan("node_8gpu_mps", training__devices=[0, 1])
    p = tmp_path / f"plan.{fmt}"
    p.write_text(render(plan, fmt))  # type: ignore[arg-type]
    back = load_plan(p)
    assert back == plan and back.plan_id == compute_plan_id(back)


def test_edited_plan_file_is_refused(tmp_path: Path) -> None:
    from unilab.errors import UnilabError

    p = tmp_path / "plan.toml"
    p.write_text(render(_plan()).replace("total_env_steps = 100000", "total_env_steps = 100001"))
    with pytest.raises(UnilabError, match="was edited"):
        load_plan(p)


def test_stale_plan_comparison_names_the_first_changed_fact() -> None:
    plan = _plan(
        "node_8gpu_mps",
        sim__backend="mjwarp",
        algo={"name": "flashsac"},
        training__devices=[0, 1],
        training__cuda_process_sharing="mps",
    )
    same = compare_fingerprint(plan.host_facts, host("node_8gpu_mps"))
    assert same == []
    data = host("node_8gpu_mps").model_dump()
    data["mps"]["services"][1]["daemon_pid"] = 5
    data["nvidia"]["driver_version"] = "590.1"
    from unilab.host.facts import HostFacts

    changes = compare_fingerprint(plan.host_facts, HostFacts.model_validate(data))
    assert [c.key for c in changes] == ["nvidia.driver_version", "mps[train-gpu1].daemon_pid"]
    assert changes[0].render() == "nvidia.driver_version: planned '580.95.05', now '590.1'"


def test_stale_plan_new_nccl_variable_counts() -> None:
    plan = _plan("node_8gpu_mps", training__devices=[0, 1])
    facts = host("node_8gpu_mps").model_copy(update={"nccl_env": {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}})
    assert [c.key for c in compare_fingerprint(plan.host_facts, facts)] == ["nccl_env.NCCL_ALGO"]


def test_cpu_plan_ignores_gpu_facts() -> None:
    plan = _plan()
    facts = host("cpu_laptop").model_copy(update={"nvidia": host("one_h200").nvidia})
    assert compare_fingerprint(plan.host_facts, facts) == []


# -- properties ---------------------------------------------------------------------------------

spec_variants = st.fixed_dictionaries(
    {
        "run__seed": st.integers(0, 2**31 - 1),
        "run__total_env_steps": st.integers(2048, 10**9),
        "task__num_envs": st.sampled_from([1, 8, 16, 64]),
        "sim__decimation": st.integers(1, 10),
        # A warm-up shorter than the smallest run, and a batch that the replay fills before it ends
        # (rule algo.warmup): 2048 env steps of 64 envs on 2 ranks are 16 syncs per rank.
        "algo": st.sampled_from(
            [
                {"name": "sac", "warmup_env_steps": 64, "batch_size": 32},
                {"name": "flashsac", "warmup_env_steps": 64, "batch_size": 32},
                {"name": "sac", "critic": "c51", "warmup_env_steps": 64, "batch_size": 32},
            ]
        ),
        "training__devices": st.sampled_from(["cpu", ["cpu", "cpu"]]),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_variants)
def test_compile_is_deterministic(dotted) -> None:
    a, b = _plan(**dotted), _plan(**dotted)
    assert render(a) == render(b)
    assert a.plan_id == b.plan_id


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_variants, spec_variants)
def test_plan_id_changes_exactly_when_the_rendering_changes(d1, d2) -> None:
    a, b = _plan(**d1), _plan(**d2)
    assert (render(a) == render(b)) == (a.plan_id == b.plan_id)


# -- resolved values ------------------------------------------------------------------------------


def test_max_episode_steps_treats_float_noise_as_a_whole_step() -> None:
    # 0.9 / (0.003 * 10) is 30.000000000000004 in floats; the plan and the task both say 30.
    plan = _plan(sim__timestep=0.003, sim__decimation=10, task__episode_length_s=0.9)
    assert plan.task.max_episode_steps == 30
    assert _plan(sim__timestep=0.005, sim__decimation=4, task__episode_length_s=0.91).task.max_episode_steps == 46


@pytest.mark.parametrize(
    ("dotted", "effective"),
    [
        # PPO collects whole rollouts: 8 steps x 16 envs = 128; 1500 ends after 12 rollouts.
        ({"algo": {"name": "ppo", "num_steps_per_env": 8}, "run__total_env_steps": 1500}, 1536),
        ({"algo": {"name": "ppo", "num_steps_per_env": 8}, "run__total_env_steps": 1536}, 1536),
        # Two ranks: each collects its share (768) in rollouts of 128.
        (
            {
                "algo": {"name": "ppo", "num_steps_per_env": 8},
                "run__total_env_steps": 1500,
                "training__devices": ["cpu", "cpu"],
            },
            1536,
        ),
        # Off-policy: whole env steps of 16 envs per rank.
        ({"run__total_env_steps": 100_000}, 100_000),
        ({"run__total_env_steps": 100_001}, 100_016),
        ({"run__total_env_steps": 100_001, "training__devices": ["cpu", "cpu"]}, 100_000),
    ],
)
def test_plan_records_the_env_steps_the_run_collects(dotted, effective) -> None:
    plan = _plan(**dotted)
    assert plan.run.effective_env_steps == effective
    w = plan.topology.world_size
    unit = plan.task.num_envs * (plan.algo.num_steps_per_env if plan.algo.name == "ppo" else 1)
    share = plan.run.total_env_steps // w
    # Each rank's figure is the first whole unit at or past its share.
    assert (effective // w) % unit == 0 and share <= effective // w < share + unit


def test_the_plan_lists_every_reward_weight_with_the_specs_overrides() -> None:
    """A reviewer reads every reward weight in the plan, and a changed weight is a changed plan."""
    from unilab.tasks.registry import task_def

    default = _plan()
    tuned = _plan(task__reward_weights={"alive": 2.0, "base_height": 0.0})
    defaults = task_def(default.task).reward_weights(default.task)
    assert default.task.reward_weights == defaults
    assert list(tuned.task.reward_weights) == list(defaults)  # the task's order, every term
    assert tuned.task.reward_weights == defaults | {"alive": 2.0, "base_height": 0.0}
    assert tuned.plan_id != default.plan_id
    assert "[task.reward_weights]" in render(tuned) and "alive = 2.0" in render(tuned)


def test_a_plan_made_before_reward_weights_still_loads_with_its_id(tmp_path: Path) -> None:
    """Run directories keep their plan: one written before the key existed reads back with the
    plan_id it was made with (so --resume, eval and export still take it) and runs the defaults."""
    from unilab.plan.models import Plan
    from unilab.tasks.registry import task_def

    body = _plan().model_dump(mode="json")
    body["task"].pop("reward_weights")
    body["plan_id"] = ""
    old = Plan.model_validate(body)
    old = old.model_copy(update={"plan_id": compute_plan_id(old)})
    path = tmp_path / "plan.toml"
    path.write_text(render(old))
    loaded = load_plan(path)
    assert loaded.plan_id == old.plan_id and loaded.task.reward_weights is None
    assert task_def(loaded.task).weights(loaded.task) == task_def("g1_walk").reward_weights(loaded.task)


def test_a_hand_edited_plan_must_weigh_every_reward_term(tmp_path: Path) -> None:
    from unilab.errors import UnilabError
    from unilab.plan.models import Plan

    body = _plan().model_dump(mode="json")
    body["task"]["reward_weights"].pop("alive")
    body["plan_id"] = ""
    with pytest.raises(ValueError, match="must name each of g1_walk's reward terms once"):
        Plan.model_validate(body)
    path = tmp_path / "plan.toml"
    path.write_text(render(_plan()).replace("alive = 0.25\n", ""))
    with pytest.raises(UnilabError, match="reward_weights must name each"):
        load_plan(path)


def test_a_plan_from_an_earlier_unilab_with_fewer_keys_is_refused_with_the_reason() -> None:
    """A cartpole plan from before SAC's `n_step` (and the per-task models) lacks keys this unilab
    writes: it no longer hashes to its plan_id, and the refusal says that an earlier unilab's plan
    reads so, rather than running with keys the plan does not show."""
    with pytest.raises(UnilabError) as e:
        load_plan(ROOT / "tests" / "fixtures" / "plans" / "cartpole_one_task_model.toml")
    assert "plan_id does not match" in e.value.summary and "earlier unilab" in (e.value.detail or "")
