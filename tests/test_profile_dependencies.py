"""`unilab profile` writes profile.png with matplotlib, the `profile` extra's package: without it
the profile refuses before any arm runs, naming the extra."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT
from unilab.errors import UnilabError
from unilab.profile import session
from unilab.profile.arms import Arm
from unilab.profile.session import ProfileRequest


def test_matplotlib_comes_with_the_profile_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].lower() for d in project["optional-dependencies"]["profile"]]
    assert "matplotlib" in names


def test_profile_without_matplotlib_refuses_before_any_arm_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    ran: list[object] = []
    monkeypatch.setattr(session, "run_apply_subprocess", lambda *a, **k: ran.append(a))
    req = ProfileRequest(
        spec=ROOT / "specs" / "cartpole.toml",
        arms=[Arm("workers-1", (("sim.workers", "1"),))],
        repeats=1,
        out_dir=tmp_path / "profile",
    )
    with pytest.raises(UnilabError, match="needs matplotlib") as info:
        session.run_profile(req, say=lambda *a, **k: None)
    assert "bash tools/setup.sh profile in the unilab checkout" in info.value.fix
    assert ran == [] and not (tmp_path / "profile").exists()
