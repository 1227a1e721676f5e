"""The collector update-state graph runner (`unilab.collect.update_graph`) through its eager twin on
the CPU: bitwise the eager collector, host counters kept although replays run no Python, carriers
checked, and the run-time preflight refusing what a replay cannot reproduce. The CUDA capture runs
in tests/test_tasks_cuda.py on a GPU."""

from __future__ import annotations

import re

import pytest
import torch

from unilab.collect.build import build_collector
from unilab.collect.collector import Collector
from unilab.errors import UnilabError
from unilab.spec.models import SimSpec, task_spec
from unilab.tasks.g1_walk.spec import CommandRanges

N = 8


pytestmark = pytest.mark.usefixtures("one_thread")


def _collector(update_graph: str | None, **task: object) -> Collector:
    # One command per episode: a command drawn again within it draws in the update body.
    task.setdefault("commands", CommandRanges(resample_s=0.0))
    spec = task_spec(name="g1_walk", num_envs=N, episode_length_s=0.6, **task)
    c = build_collector(spec, SimSpec(workers=1), finite_check_interval=5, seed=3, update_graph=update_graph)
    # On CUDA the collector never reads the done mask on the host; the graph forces that here too,
    # so the reference runs the same (masked, possibly empty) reset path every step.
    c._host_done_check = False
    return c


def _actions(i: int) -> torch.Tensor:
    return torch.rand(N, 29, generator=torch.Generator().manual_seed(i)) * 2 - 1


def test_twin_collector_is_bitwise_the_eager_collector() -> None:
    steps = 40  # episodes of 0.6 s = 30 steps: time-outs and falls reset worlds inside the window
    with _collector(None) as ref, _collector("eager_twin") as twin:
        ref.reset_all()
        twin.reset_all()
        for i in range(steps):
            a = ref.step(_actions(i))
            b = twin.step(_actions(i))
            for x, y, name in zip(a, b, ("obs", "reward", "terminated", "truncated"), strict=True):
                assert torch.equal(x, y), (i, name)
            assert torch.equal(ref.next_obs, twin.next_obs), i
        assert twin.task._step_count == ref.task._step_count == steps
        assert torch.equal(ref.completed_totals, twin.completed_totals)
        assert ref.completed_totals[0] > 0  # episodes did end inside the window
        s = twin.update_graph.stats  # type: ignore[union-attr]
        assert (s.eager_updates, s.captures, s.replays, s.state) == (3, 1, steps - 3, "captured")
        assert any(c.startswith("collector.next_obs:") for c in s.carriers)
        assert any(c.startswith("state.qpos:") for c in s.carriers)
        assert s.rng_draw_version is not None and s.allocated_bytes == {}
        assert twin.timings()["update_state"].calls == steps
        assert twin.timings()["reward"].calls == 0  # inside the graph there is no phase clock


def test_a_moved_carrier_forces_a_recapture() -> None:
    with _collector("eager_twin") as c:
        c.reset_all()
        for i in range(5):
            c.step(_actions(i))
        c.next_obs = c.next_obs.clone()  # same values, new address: a graph would write the old one
        c.step(_actions(5))
        s = c.update_graph.stats  # type: ignore[union-attr]
        assert s.invalidations == 1 and s.last_invalidation and "carrier moved" in s.last_invalidation
        for i in range(6, 10):
            c.step(_actions(i))
        assert s.captures == 2 and s.state == "captured"


def test_observation_noise_is_refused_before_anything_runs() -> None:
    with pytest.raises(UnilabError, match="noise") as e:
        _collector("eager_twin", observation_noise=True)
    assert "collector_graph" in e.value.fix


def test_a_body_that_draws_random_numbers_is_refused_at_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    with _collector("eager_twin") as c:
        c.reset_all()
        original = c.task.step_events

        def drawing_events() -> None:  # a per-step random command, which no preflight declared
            torch.rand(1, generator=c.task.generator)
            original()

        monkeypatch.setattr(c.task, "step_events", drawing_events)
        with pytest.raises(UnilabError, match="random numbers"):
            c.step(_actions(0))
        assert c.update_graph.stats.state == "failed"  # type: ignore[union-attr]


def test_a_cuda_graph_of_a_cpu_collector_is_refused() -> None:
    with pytest.raises(UnilabError, match="CUDA collector"):
        _collector("cuda_graph")


@pytest.mark.parametrize(
    "task",
    [
        {},
        {"observation_noise": True},
        {"push_interval_s": 0.5},
        {"name": "g1_motion_tracking", "motion": "builtin:g1_squat"},
    ],
    ids=["walk", "walk_noise", "walk_pushes", "tracking"],
)
def test_plan_preflight_and_run_time_preflight_agree(task: dict[str, object]) -> None:
    """The plan refuses from the spec what the collector would refuse from the built task: the same
    kinds of blocker (noise, interval events, each curriculum by name), not only the same yes or no."""
    from unilab.collect.update_graph import INTERVAL_BLOCKER, graph_blockers
    from unilab.tasks.registry import task_def

    fields = {"name": "g1_walk", "num_envs": 2, **task}
    spec = task_spec(**fields)
    terms = task_def(spec).terms(spec)
    planned: set[str] = set()  # the plan names a term per blocker; the run time names the kind once
    for t in terms:
        kinds = {
            "noise": t.noise,
            "interval events": t.interval_event,
            "host rng": t.rng_shortcut,  # the run time has no such blocker: it must not occur
            f"curriculum {t.name}": t.non_reset_curriculum,
            f"recorder {t.name}": t.kind == "recorder",  # likewise
        }
        planned |= {k for k, blocks in kinds.items() if blocks}
    assert bool(planned) == any(t.graph_blockers() for t in terms)  # every planned blocker is in the mapping
    with build_collector(spec, SimSpec(workers=1)) as c:
        reasons = graph_blockers(c.task)
    runtime: set[str] = set()
    for why in reasons:
        if why == "observation noise draws random numbers in the update body":
            runtime.add("noise")
        elif why == INTERVAL_BLOCKER:
            runtime.add("interval events")
        elif m := re.fullmatch(r"curriculum `(.+)` updates outside resets", why):
            runtime.add(f"curriculum {m[1]}")
        else:
            runtime.add(f"unmapped: {why}")  # a new run-time blocker: this test must learn it
    assert planned == runtime, (planned, reasons)
    assert len(runtime) == len(reasons)  # each kind refused once


def test_evidence_crosses_the_channel_and_fits_the_manifest() -> None:
    """What the collector process publishes is what the manifest's `backend.collector_graph` holds."""
    from unilab.collect.channel import GRAPH_EVIDENCE_BYTES, read_evidence, write_evidence
    from unilab.manifest.models import GraphEvidence

    with _collector("eager_twin") as c:
        c.reset_all()
        for i in range(5):
            c.step(_actions(i))
        evidence = c.update_graph.stats.evidence()  # type: ignore[union-attr]
    buf = torch.zeros(GRAPH_EVIDENCE_BYTES, dtype=torch.uint8)
    assert read_evidence(buf) is None  # all zero: the graph is off
    write_evidence(buf, evidence)
    assert read_evidence(buf) == evidence
    planned = {"requested": "update_state", "enabled": True, "disable_reason": None}
    m = GraphEvidence(**planned, **read_evidence(buf))  # type: ignore[arg-type]
    assert m.state == "captured" and m.replays == 2 and m.carriers == evidence["carriers"]
    small = torch.zeros(512, dtype=torch.uint8)  # a carrier list too long for the buffer keeps the counters
    write_evidence(small, evidence)
    back = read_evidence(small)
    assert back is not None and back["replays"] == 2 and "too long" in back["carriers"][0]
