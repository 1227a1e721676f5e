"""The rule catalog: each rule has a stable id, the spec key it guards, what it requires and a
small check function. `docs/rules.md` is generated from this catalog (`unilab rules --markdown`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from unilab.errors import Diagnostic
from unilab.plan.context import Context

Check = Callable[[Context], list[Diagnostic]]


@dataclass(frozen=True)
class Rule:
    id: str
    key_path: str
    requires: str  # one sentence for the catalog
    check: Check

    def diag(self, condition: str, fix: str, key_path: str | None = None) -> Diagnostic:
        return Diagnostic(self.id, key_path or self.key_path, condition, fix)


RULES: list[Rule] = []


def rule(rule_id: str, key_path: str, requires: str) -> Callable[[Callable[[Rule, Context], list[Diagnostic]]], Rule]:
    """Register `fn(rule, ctx) -> diagnostics` under a stable id."""

    def wrap(fn: Callable[[Rule, Context], list[Diagnostic]]) -> Rule:
        if any(r.id == rule_id for r in RULES):
            raise ValueError(f"duplicate rule id {rule_id}")
        holder: list[Rule] = []
        r = Rule(rule_id, key_path, requires, lambda ctx: fn(holder[0], ctx))
        holder.append(r)
        RULES.append(r)
        return r

    return wrap


def mps_start_command(index: int) -> str:
    """The fix that starts an MPS service for GPU ``index``, left running for `unilab apply`."""
    return f"unilab mps start --gpus {index} --name train-gpu{index} --daemon"


def quoted(names: tuple[str, ...], mark: str = "`") -> str:
    """`a`, `b` or `c`: names for a rule's text (or its fix, with `mark='"'`)."""
    q = [f"{mark}{n}{mark}" for n in names]
    return q[0] if len(q) == 1 else f"{', '.join(q[:-1])} or {q[-1]}"
