"""Key-by-key comparison of two plans, in the plans' own key order."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


def _value(v: Any) -> str:
    """A plan value as the JSON plan writes it ("text", true, null, [1, 2]), not as Python would."""
    return json.dumps(v, ensure_ascii=False)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists of dicts -> {"a.b[0].c": value}; lists of scalars stay values."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list) and any(isinstance(v, dict) for v in data):
        for i, v in enumerate(data):
            out |= flatten(v, f"{prefix}[{i}]")
    else:
        out[prefix] = data
    return out


@dataclass(frozen=True)
class Change:
    kind: Literal["changed", "added", "removed"]
    key: str
    old: Any = None
    new: Any = None

    def render(self) -> str:
        if self.kind == "changed":
            return f"~ {self.key}: {_value(self.old)} -> {_value(self.new)}"
        if self.kind == "added":
            return f"+ {self.key}: {_value(self.new)}"
        return f"- {self.key}: {_value(self.old)}"


def diff_plans(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    fa, fb = flatten(a), flatten(b)
    changes = []
    for k, v in fa.items():
        if k not in fb:
            changes.append(Change("removed", k, old=v))
        elif fb[k] != v:
            changes.append(Change("changed", k, old=v, new=fb[k]))
    changes += [Change("added", k, new=v) for k, v in fb.items() if k not in fa]
    return changes


class _Renders(Protocol):
    def render(self) -> str: ...


def first_of(changes: Sequence[_Renders]) -> str:
    """The first change, and how many follow it: what a refusal names of a list of differences."""
    more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
    return f"{changes[0].render()}{more}"
