"""`unilab profile`: arm parsing, window placement, the host-sync inventory (planted reads are
found, removed ones are not), and the command end to end with two tiny arms of real runs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from unilab.cli.main import main
from unilab.errors import UnilabError
from unilab.profile.arms import default_arms, parse_arm, parse_arms, schedule
from unilab.profile.runner import PUBLISH_EVERY_SYNCS, place_windows

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "specs" / "g1.toml"


# ----------------------------------------------------------------------------------- arms
def test_arm_keeps_commas_inside_toml_values() -> None:
    arm = parse_arm("big:algo.hidden_dims=[64, 64],sim.workers=2")
    assert arm.name == "big"
    assert arm.overrides == (("algo.hidden_dims", "[64, 64]"), ("sim.workers", "2"))
    assert arm.set_args() == ["algo.hidden_dims=[64, 64]", "sim.workers=2"]


@pytest.mark.parametrize("text", ["noname", ":sim.workers=1", "a:sim.workers", "a b:sim.workers=1"])
def test_malformed_arms_are_refused(text: str) -> None:
    with pytest.raises(UnilabError):
        parse_arm(text)


def test_arm_may_not_move_the_profile_windows() -> None:
    with pytest.raises(UnilabError, match="set by the profile"):
        parse_arm("a:run.total_env_steps=100")


def test_arm_names_are_unique() -> None:
    with pytest.raises(UnilabError, match="repeated: a"):
        parse_arms(["a:sim.workers=1", "a:sim.workers=2"])


def test_schedule_interleaves_arms() -> None:
    a, b = parse_arms(["a:sim.workers=1", "b:sim.workers=2"])
    assert [(arm.name, r) for arm, r in schedule([a, b], 3)] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 2),
    ]


def test_default_arms_compare_what_the_host_has() -> None:
    assert [a.name for a in default_arms("mujoco", cuda=False)] == ["workers-1", "workers-2"]
    assert [a.name for a in default_arms("mjwarp", cuda=True)] == ["graph-off", "graph-on"]


def test_windows_are_whole_publication_blocks() -> None:
    w = place_windows(64, warmup_env_steps=1, window_env_steps=64 * PUBLISH_EVERY_SYNCS + 1)
    assert (w.warmup_syncs, w.window_syncs) == (PUBLISH_EVERY_SYNCS, 2 * PUBLISH_EVERY_SYNCS)
    assert w.total_env_steps == 3 * PUBLISH_EVERY_SYNCS * 64


def test_ppo_windows_are_also_whole_rollouts() -> None:
    w = place_windows(16, warmup_env_steps=1, window_env_steps=1, iteration_syncs=24)
    assert w.warmup_syncs == w.window_syncs == 192  # lcm(64, 24): a checkpoint can fall there


def test_cli_refuses_a_bad_arm_before_running_anything(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "p"
    assert main(["profile", str(SPEC), "--arm", 'x:run.name="y"', "--out", str(out)]) == 1
    assert "set by the profile" in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_an_arm_the_host_cannot_plan(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "p"
    rc = main(["profile", str(SPEC), "--arm", "ok:sim.workers=1", "--arm", "bad:sim.workers=0", "--out", str(out)])
    assert rc == 1
    assert "sim.workers" in capsys.readouterr().err
    assert not out.exists()  # refused before the first run


# ------------------------------------------------------------------------ host-sync inventory
def _collector(num_envs: int = 8):
    from unilab.collect.build import build_collector
    from unilab.spec.load import load_spec

    loaded = load_spec(SPEC, [f"task.num_envs={num_envs}"])
    return build_collector(loaded.spec.task, loaded.spec.sim, spec_dir=loaded.spec_dir, workers=1)


@pytest.mark.slow
def test_inventory_lists_planted_host_reads_and_not_removed_ones() -> None:
    from unilab.profile.host_sync import inventory

    collector = _collector()
    with collector:
        term = collector.task.rewards[0]
        original = term.fn

        def planted_reward(task):
            r = original(task)
            if r.max().item() > 1e9:  # a host read a term author might write
                r = r * 0.0
            _ = (r > 0).nonzero()  # a data-dependent shape
            return r

        term.fn = planted_reward
        inv = inventory(collector, 6)
        planted = [r for r in inv.rows if r.owner_function == "planted_reward"]
        assert {r.kind for r in planted} == {"scalar_read", "nonzero"}
        for r in planted:
            assert r.owner_file == "tests/test_profile.py"
            assert r.unilab_owner == "unilab/tasks/base.py:compute_rewards"
            assert r.phase == "reward" and r.inside_capture
            assert r.calls == 6 and r.calls_per_iteration == 1.0
            assert r.device == "cpu" and not r.device_sync
        assert next(r for r in planted if r.kind == "nonzero").disposition.startswith("fixed-shape pack")
        assert next(r for r in planted if r.kind == "scalar_read").disposition.startswith("device-resident")
        # The collector's own per-step read of its CPU done mask, and the stats read after each step.
        assert any(r.owner_function == "step" and r.phase == "metrics" for r in inv.rows)
        assert any(r.owner_function == "episode_stats" and not r.inside_capture for r in inv.rows)

        term.fn = original  # the test removes its reads: they must be gone from the inventory
        again = inventory(collector, 6)
        assert not [r for r in again.rows if r.owner_file == "tests/test_profile.py"]
        assert {(r.owner_file, r.owner_function, r.kind) for r in again.rows} <= {
            (r.owner_file, r.owner_function, r.kind) for r in inv.rows
        }
        # The collector's timer is back to its own methods after the inventory.
        assert "lap" not in collector.timer.__dict__


# ------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_profile_two_tiny_arms_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from unilab.manifest.models import Manifest
    from unilab.profile.models import Profile

    out = tmp_path / "prof"
    rc = main([
        "profile", str(SPEC),
        "--arm", "one:sim.workers=1",
        "--arm", "two:sim.workers=2,algo.hidden_dims=[64, 64]",
        "--set", "task.num_envs=16",
        "--set", "algo.batch_size=64",
        "--repeats", "2", "--warmup", "1", "--window", "1",
        "--host-sync-steps", "8",
        "--out", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0
    for name in ("profile.json", "profile.md", "profile.png"):
        assert (out / name).stat().st_size > 0
    data = json.loads((out / "profile.json").read_text())
    jsonschema.validate(data, json.loads((ROOT / "schemas" / "profile.v1.json").read_text()))
    prof = Profile.model_validate(data)

    pv = prof.provenance
    assert pv.schedule == ["one", "two", "one", "two"]
    assert (pv.num_envs, pv.warmup_syncs, pv.window_syncs) == (16, PUBLISH_EVERY_SYNCS, PUBLISH_EVERY_SYNCS)
    assert pv.command[:3] == ["unilab", "profile", str(SPEC)]
    assert [a.name for a in prof.arms] == ["one", "two"]
    assert [a.physics_workers for a in prof.arms] == [1, 2]  # the overrides reached the runs
    for arm in prof.arms:
        assert [r.order for r in arm.runs] == ([0, 2] if arm.name == "one" else [1, 3])
        assert len({r.run_dir for r in arm.runs}) == 2
        assert arm.reconciles, f"{arm.name}: coverage {arm.coverage.samples}"
        for run in arm.runs:
            w = run.window
            assert w.syncs == PUBLISH_EVERY_SYNCS and w.updates == PUBLISH_EVERY_SYNCS
            assert abs(w.coverage - 1.0) <= prof.coverage_tolerance
            assert w.collector_phases_us["physics_step"] > 0
            # The window is a part of the run the manifest attributes: never more time than the whole.
            m = Manifest.model_validate_json(Path(run.manifest).read_text())
            assert m.status == "succeeded" and m.counters.syncs == 2 * PUBLISH_EVERY_SYNCS
            for phase, us in w.collector_phases_us.items():
                assert us * w.syncs <= m.timing.collector_phases_us[phase] * m.counters.syncs * (1 + 1e-9)
            assert sorted(m.timing.collector_phases_us) == sorted(w.collector_phases_us)
    two_plan = Path(prof.arms[1].runs[0].run_dir, "plan.toml").read_text()
    assert "[64, 64]" in two_plan
    assert prof.host_sync is not None and prof.host_sync.steps == 8 and prof.host_sync.rows
    assert prof.verdict.line in printed and prof.verdict.line in (out / "profile.md").read_text()
    assert prof.verdict.go == (prof.verdict.non_physics_share >= 0.15)
    assert "| collector.physics_step |" in printed
