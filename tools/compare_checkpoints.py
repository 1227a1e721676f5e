"""Do two runs hold the same learned state? For refactors that must not change learning.

    python tools/compare_checkpoints.py RUN_A RUN_B

Train the same spec and seed with the code before and after a change (a `git worktree` of the
old commit, run with `PYTHONPATH=<worktree>`), then compare: every checkpoint the two runs share by
name is loaded, and every tensor in it (networks, optimizer moments, normalizers, replay cursors,
RNG states) must be bitwise equal, with the same dtype and shape. Other values are listed where
they differ (a `plan_id` differs whenever the plans do, e.g. another `run.output_dir`). Exit 0 when
every tensor matches, 1 otherwise or when the runs share no checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from unilab.records.run_dir import RunDir


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}/{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


@dataclass
class Comparison:
    checkpoints: list[str] = field(default_factory=list)
    tensors: int = 0
    differing_tensors: list[str] = field(default_factory=list)
    differing_values: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return bool(self.checkpoints) and not self.differing_tensors


def _same(a: Any, b: Any) -> bool:
    return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def compare_runs(run_a: Path, run_b: Path) -> Comparison:
    dir_a, dir_b = RunDir(run_a).checkpoints, RunDir(run_b).checkpoints
    names_a = {p.name for p in dir_a.glob("ckpt-*.pt")}
    names_b = {p.name for p in dir_b.glob("ckpt-*.pt")}
    out = Comparison(checkpoints=sorted(names_a & names_b))
    for name in out.checkpoints:
        a = dict(_leaves(torch.load(dir_a / name, weights_only=False, map_location="cpu")))
        b = dict(_leaves(torch.load(dir_b / name, weights_only=False, map_location="cpu")))
        for key in sorted(a.keys() | b.keys()):
            va, vb = a.get(key), b.get(key)
            if isinstance(va, torch.Tensor) or isinstance(vb, torch.Tensor):
                out.tensors += 1
                if not (isinstance(va, torch.Tensor) and _same(va, vb)):
                    out.differing_tensors.append(f"{name}{key}")
            elif va != vb:
                out.differing_values.append(f"{name}{key}: {str(va)[:48]} | {str(vb)[:48]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    args = ap.parse_args(argv)
    for run in (args.run_a, args.run_b):
        if not RunDir(run).checkpoints.is_dir():
            print(f"error: {run} has no checkpoints/ directory (pass run directories)", file=sys.stderr)
            return 1
    c = compare_runs(args.run_a, args.run_b)
    if not c.checkpoints:
        print("error: the runs share no checkpoint name (train both to the same env steps)", file=sys.stderr)
        return 1
    print(f"{len(c.checkpoints)} checkpoints, {c.tensors} tensors, {len(c.differing_tensors)} differ")
    for line in c.differing_tensors[:20]:
        print(f"  tensor differs: {line}")
    for line in c.differing_values[:20]:
        print(f"  value differs: {line}")
    return 0 if c.equal else 1


if __name__ == "__main__":
    sys.exit(main())
