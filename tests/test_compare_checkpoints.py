"""tools/compare_checkpoints.py: the check a refactor runs to show that learning did not change."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.conftest import load_tool

tool = load_tool("compare_checkpoints")


def _run(root: Path, states: dict[str, dict]) -> Path:
    (root / "checkpoints").mkdir(parents=True)
    for name, state in states.items():
        torch.save(state, root / "checkpoints" / name)
    return root


def _state(w: float, plan_id: str = "sha256:a") -> dict:
    return {"plan_id": plan_id, "learner": {"actor": {"w": torch.full((2, 3), w)}, "steps": [torch.tensor(3)]}}


def test_equal_tensors_pass_whatever_the_plan_id(tmp_path: Path, capsys) -> None:
    a = _run(tmp_path / "a", {"ckpt-0000000000100.pt": _state(1.0)})
    b = _run(tmp_path / "b", {"ckpt-0000000000100.pt": _state(1.0, plan_id="sha256:b")})
    assert tool.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 checkpoints, 2 tensors, 0 differ" in out and "value differs: ckpt-0000000000100.pt/plan_id" in out


def test_one_bit_of_difference_fails_and_is_named(tmp_path: Path, capsys) -> None:
    a = _run(tmp_path / "a", {"ckpt-0000000000100.pt": _state(1.0)})
    b = _run(
        tmp_path / "b", {"ckpt-0000000000100.pt": _state(float(torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))))}
    )
    assert tool.main([str(a), str(b)]) == 1
    assert "tensor differs: ckpt-0000000000100.pt/learner/actor/w" in capsys.readouterr().out


def test_a_dtype_change_fails_and_runs_without_a_common_checkpoint_are_refused(tmp_path: Path, capsys) -> None:
    a = _run(tmp_path / "a", {"ckpt-0000000000100.pt": _state(1.0)})
    other = _state(1.0)
    other["learner"]["actor"]["w"] = other["learner"]["actor"]["w"].double()
    b = _run(tmp_path / "b", {"ckpt-0000000000100.pt": other})
    assert tool.main([str(a), str(b)]) == 1
    c = _run(tmp_path / "c", {"ckpt-0000000000200.pt": _state(1.0)})
    assert tool.main([str(a), str(c)]) == 1
    assert "share no checkpoint" in capsys.readouterr().err
    assert tool.main([str(a), str(tmp_path / "nowhere")]) == 1
