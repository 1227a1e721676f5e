"""The launcher records the first failing rank in the manifest; when the manifest cannot be read it
says so on stderr (one line) instead of leaving a secondary error recorded in silence."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from unilab.run.launch import _first_failure, _record_failure


@pytest.mark.parametrize("content", [b"{not json", b'{"schema_version": 1}', b"\xff\xfe"])
def test_an_unreadable_manifest_is_a_one_line_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: bytes
) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(content)
    _record_failure(tmp_path, "rank1", "killed by SIGKILL")
    err = capsys.readouterr().err
    assert err.startswith(f"warning: could not record the failure in {path}: it cannot be read")
    assert "rank1: killed by SIGKILL" in err and len(err.strip().splitlines()) == 1, err
    assert path.read_bytes() == content  # left as it was


def test_no_manifest_yet_is_not_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _record_failure(tmp_path, "rank1", "killed by SIGKILL")  # the rank failed before writing one
    assert capsys.readouterr().err == ""


def _failure(exitcode: int, timestamp: int) -> ProcessFailure:
    return ProcessFailure(local_rank=0, pid=1000 + timestamp, exitcode=exitcode, error_file="/nonexistent")


def test_a_rank_killed_by_a_signal_is_named_before_its_peers_secondary_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 killed outright, rank 0 failing on the broken collective, both seen in one launcher
    poll (the same second): the run names rank 1, not the lowest rank."""
    monkeypatch.setattr("time.time", lambda: 1_000.0)
    failures = {0: _failure(1, 0), 1: _failure(-9, 1)}
    assert _first_failure(failures)[0] == 1
    failures[0].timestamp = 999  # even when the peer's error is stamped first
    assert _first_failure(failures)[0] == 1


def test_without_a_signal_the_earliest_failure_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.time", lambda: 1_000.0)
    failures = {0: _failure(1, 0), 1: _failure(1, 1)}
    failures[1].timestamp = 998
    assert _first_failure(failures)[0] == 1
    failures[1].timestamp = 1_000
    assert _first_failure(failures)[0] == 0  # a tie: the lowest rank
