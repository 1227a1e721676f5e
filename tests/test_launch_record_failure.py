"""The launcher records the first failing rank in the manifest; when the manifest cannot be read it
says so on stderr (one line) instead of leaving a secondary error recorded in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from unilab.run.launch import _record_failure


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
