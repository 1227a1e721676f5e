"""`unilab profile` decides CPU vs GPU in one place: a CPU data-parallel spec (`["cpu", "cpu"]`) is a
CPU profile, both for the default arms and for the host-sync inventory's collector."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, host
from unilab.profile import session
from unilab.profile.arms import Arm
from unilab.profile.models import WindowSample
from unilab.profile.session import ProfileRequest, collector_device
from unilab.spec.load import load_spec

DP2_CPU = ROOT / "specs" / "g1_dp2_cpu.toml"


@pytest.mark.parametrize(
    ("devices", "backend", "expected"),
    [
        ('"cpu"', "mjwarp", "cpu"),
        ('["cpu"]', "mjwarp", "cpu"),
        ('["cpu", "cpu"]', "mjwarp", "cpu"),
        ("[0]", "mjwarp", "cuda:0"),
        ("[0, 1]", "mjwarp", "cuda:0"),
        # A GPU learner with CPU MuJoCo physics: the collector stays on the CPU.
        ("[0]", "mujoco", "cpu"),
        ("[0, 1]", "mujoco", "cpu"),
    ],
)
def test_collector_device_follows_every_device_entry_and_the_backend(devices: str, backend: str, expected: str) -> None:
    spec = load_spec(DP2_CPU, [f"training.devices={devices}", f'sim.backend="{backend}"']).spec
    assert collector_device(spec) == expected


@pytest.mark.parametrize(("backend", "expected"), [("mujoco", "cpu"), ("mjwarp", "cuda:0")])
def test_a_gpu_rank_runs_cpu_mujoco_on_the_cpu_and_mujoco_warp_on_its_gpu(backend: str, expected: str) -> None:
    """What `unilab apply` gives each rank's collector (the mujoco backend refuses a CUDA device)."""
    from unilab.plan.compile import compile_plan

    spec = load_spec(ROOT / "specs" / "g1.toml", ["training.devices=[0]", f'sim.backend="{backend}"']).spec
    plan = compile_plan(spec, host("one_h200"), ROOT / "specs")
    assert plan.ranks[0].device == "cuda"
    assert plan.collector_device(0) == expected


class _Stop(Exception):
    pass


def test_a_two_cpu_profile_takes_its_inventory_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The arms' runs are stubbed; what matters is the device the inventory's collector gets."""
    import unilab.host.probe

    monkeypatch.setattr(unilab.host.probe, "probe_host", lambda *a, **k: host("cpu_laptop"))
    sample = WindowSample(
        syncs=1,
        updates=0,
        wall_s=1.0,
        collector_phases_us={},
        collector_wait_us=0.0,
        learner_update_ms=0.0,
        learner_update_us_per_sync=0.0,
        learner_wait_us=0.0,
        iteration_us=1000.0,
        collector_phase_sum_us=1000.0,
        coverage=1.0,
        non_physics_share=0.0,
    )
    outcome = SimpleNamespace(
        warmup=None, final=SimpleNamespace(ranks=[]), window_s=1.0, exit_code=0, run_dir=tmp_path / "run"
    )
    commands: list[list[str]] = []

    def run_apply_subprocess(cmd, *a, **k):  # type: ignore[no-untyped-def]
        commands.append(cmd)
        return outcome

    monkeypatch.setattr(session, "run_apply_subprocess", run_apply_subprocess)
    monkeypatch.setattr(session, "window_sample", lambda *a, **k: sample)
    seen: list[str] = []

    def inventory(spec, spec_dir, steps, device):
        seen.append(device)
        raise _Stop

    monkeypatch.setattr(session, "take_inventory", inventory)
    req = ProfileRequest(
        spec=DP2_CPU,
        arms=[Arm("workers-1", (("sim.workers", "1"),))],
        repeats=1,
        host_sync_steps=1,
        warmup_env_steps=1,  # each rounded up to one block of 64 syncs
        window_env_steps=1,
        out_dir=tmp_path / "profile",
    )
    with pytest.raises(_Stop):
        session.run_profile(req, say=lambda *a, **k: None)
    assert seen == ["cpu"]
    # The windows are syncs of each rank: 64 + 64 syncs of 32 envs on each of the 2 ranks (the run
    # used to get half of that: windows off the 64-sync blocks the manifests are read on).
    (cmd,) = commands
    assert "run.total_env_steps=8192" in cmd and "run.checkpoint_every_env_steps=4096" in cmd


def test_default_arms_of_a_two_cpu_spec_are_cpu_arms_on_a_gpu_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a GPU present, a `["cpu", "cpu"]` MuJoCo Warp spec still gets the CPU arms, not the CUDA graph arms."""
    import torch

    from unilab.cli.profile_cmd import cmd_profile

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen: list[ProfileRequest] = []

    def run_profile(req: ProfileRequest):
        seen.append(req)
        raise _Stop

    monkeypatch.setattr(session, "run_profile", run_profile)
    args = argparse.Namespace(
        spec=DP2_CPU,
        set=['sim.backend="mjwarp"'],
        arm=[],
        out=tmp_path / "p",
        repeats=1,
        warmup=64,
        window=64,
        host_sync_steps=0,
        threshold=0.05,
        run_timeout=60.0,
    )
    with pytest.raises(_Stop):
        cmd_profile(args)
    assert [a.name for a in seen[0].arms] == ["workers-1", "workers-2"]
