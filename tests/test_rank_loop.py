"""The rank loop's checkpoint cadence: a checkpoint at the first unit at or past each multiple of
`run.checkpoint_every_env_steps`, once per unit however many multiples it passed, for the
off-policy sync and the PPO rollout alike (one helper, `unilab.run.rank_loop.Cadence`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from unilab.run.offpolicy import OffPolicyRank
from unilab.run.onpolicy import OnPolicyRank
from unilab.run.rank_loop import Cadence, RankLoop


def _fired(every: int | None, unit: int, units: int, done: int = 0) -> list[int]:
    c = Cadence(every, done)
    return [done + unit * k for k in range(1, units + 1) if c.due(done + unit * k)]


def test_a_checkpoint_at_the_first_unit_at_or_past_each_multiple() -> None:
    assert _fired(100, 64, 8) == [128, 256, 320, 448, 512]


def test_a_unit_that_passes_several_multiples_checkpoints_once_and_catches_up() -> None:
    # 250 env steps per unit, every 100: each unit passes two or three multiples.
    c = Cadence(100, 0)
    assert c.due(250) and c.next == 300
    assert not c.due(299)
    assert c.due(500) and c.next == 600


def test_a_resumed_run_counts_from_its_env_steps() -> None:
    assert _fired(100, 64, 3, done=150) == [214, 342]


def test_no_interval_never_fires() -> None:
    assert _fired(None, 64, 10) == []


def test_both_drivers_run_the_one_loop() -> None:
    assert "_step" in vars(OffPolicyRank) and "_step" in vars(OnPolicyRank)
    assert "run" not in vars(OffPolicyRank) and "run" not in vars(OnPolicyRank)
    assert OffPolicyRank.run is RankLoop.run


def test_a_resumed_rank_without_the_run_directory_finds_it_above_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranks other than 0 are not handed the run directory; resuming, each checks the checkpoint
    against the run's plan ids, read from the directory the checkpoint lies in."""
    from unilab.records import checkpoint
    from unilab.records.run_dir import RunDir
    from unilab.run import rank_run

    seen: list[Path] = []
    monkeypatch.setattr(RunDir, "plan_ids", lambda self, plan_id: seen.append(self.root) or {plan_id})
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda path, plan_id: {"state": {"from": path.name}})
    ckpt = tmp_path / "run" / "checkpoints" / "ckpt-0000000000064.pt"
    plan = SimpleNamespace(plan_id="p", run=SimpleNamespace(init_from=None))
    job = rank_run.RankJob(plan=plan, rank=1, run_dir=None, resume_checkpoint=ckpt)  # type: ignore[arg-type]
    assert rank_run._starting_states(job) == ({"from": ckpt.name}, None)
    assert seen == [tmp_path / "run"]
