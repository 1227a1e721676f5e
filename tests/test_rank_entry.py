"""`python -m unilab.rank` (the torchrun entry) checks what holds on every node, and never writes
over a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SPECS
from unilab import rank
from unilab.errors import UnilabError
from unilab.host.probe import probe_host
from unilab.plan.compile import compile_plan
from unilab.spec.load import load_spec


def _plan():  # type: ignore[no-untyped-def]
    loaded = load_spec(SPECS / "cartpole.toml")
    return compile_plan(loaded.spec, probe_host(), loaded.spec_dir)


def test_a_node_with_other_package_versions_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan()
    rank.check_node(plan)  # this node is the one planned for
    facts = probe_host()
    other = facts.model_copy(update={"packages": facts.packages.model_copy(update={"torch": "0.0.1"})})
    monkeypatch.setattr("unilab.host.probe.probe_host", lambda: other)
    with pytest.raises(UnilabError, match=r"software differs from the plan's: packages\.torch") as e:
        rank.check_node(plan)
    assert "unilab host --json" in e.value.fix


def test_a_run_dir_that_holds_a_run_is_never_overwritten(tmp_path: Path) -> None:
    plan = _plan()
    fresh = rank.create_run_dir(plan, tmp_path / "run")
    assert (fresh / "plan.toml").is_file()
    (fresh / "manifest.json").write_text("{}")
    before = (fresh / "plan.toml").read_bytes()
    with pytest.raises(UnilabError, match="already holds a run") as e:
        rank.create_run_dir(plan, fresh)
    assert f"--resume {fresh}" in e.value.fix
    assert (fresh / "plan.toml").read_bytes() == before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert rank.create_run_dir(plan, empty) == empty  # an existing empty directory is fine


def test_outside_torchrun_it_says_how_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert rank.main([str(SPECS / "cartpole.toml")]) == 1
    assert "runs under torchrun" in capsys.readouterr().err
