"""Physics warnings reach the manifest: the counts a backend's diagnostics hold, only kinds seen."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.sim_models import small_humanoid_xml
from unilab.sim.contract import physics_warnings
from unilab.sim.mujoco_cpu import MujocoCpuBackend


def test_mujoco_warnings_are_counted_by_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with MujocoCpuBackend(small_humanoid_xml(), 4, 2, None, workers=1) as b:
        assert physics_warnings(b.diagnostics()) == {}  # nothing seen: nothing recorded
        b.step(torch.full((4, b.dims.nu), float("nan")))  # MuJoCo zeroes bad controls and warns
        seen = physics_warnings(b.diagnostics())
    assert list(seen) == ["badctrl"] and seen["badctrl"] >= 4


def test_mjwarp_overflow_is_named_per_kind() -> None:
    """MuJoCo Warp reports overflowed worlds and the kinds of buffer (its diagnostics' shape)."""
    diag = {"backend": "mjwarp", "overflow_worlds": 3, "overflow_kinds": ["NEFC", "BROADPHASE"]}
    assert physics_warnings(diag) == {"overflow_nefc_worlds": 3, "overflow_broadphase_worlds": 3}
    assert physics_warnings({"backend": "mjwarp", "overflow_worlds": 0, "overflow_kinds": []}) == {}


def test_warnings_cross_from_the_collector_to_the_learner() -> None:
    from unilab.collect import channel as ch
    from unilab.collect.collector_client import CollectorStats
    from unilab.records.progress import Progress

    bufs = ch.SharedBuffers.allocate(2, 3, 1, 0)
    assert ch.read_evidence(bufs.physics_warnings) is None  # nothing written: no warning
    ch.write_evidence(bufs.physics_warnings, {"badqacc": 2, "overflow_nefc_worlds": 1})
    prog = Progress()
    prog.fold(CollectorStats(physics_warnings=ch.read_evidence(bufs.physics_warnings) or {}))
    assert prog.physics_warnings == {"badqacc": 2, "overflow_nefc_worlds": 1}
