"""Rules on K (env steps per sync), the inference slot capacity and the action dependency."""

from __future__ import annotations

from unilab.errors import Diagnostic
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule

# What the executor implements today. A value the spec language accepts but the executor does
# not is refused here, never approximated.
IMPLEMENTED_ACTION_DEPENDENCIES = ("synchronous",)


@rule(
    "sync.action-dependency",
    "training.action_dependency",
    "K = 1 means `synchronous`; K > 1 needs an explicit action dependency that the executor implements.",
)
def sync_action_dependency(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.training
    k, dep = t.env_steps_per_sync, t.action_dependency
    if k == 1:
        if dep not in (None, "synchronous"):
            return [
                r.diag(
                    f"K = 1 is the synchronous contract, but action_dependency = {dep!r}",
                    'remove training.action_dependency or set it to "synchronous"',
                )
            ]
        return []
    if dep is None:
        multi = [d for d in IMPLEMENTED_ACTION_DEPENDENCIES if d != "synchronous"]
        return [
            r.diag(
                f"K = {k} > 1 needs an explicit action_dependency (there is no default)",
                # Offer only what the executor runs: today that is K = 1 alone.
                f"set training.env_steps_per_sync = 1, or training.action_dependency = {multi[0]!r}"
                if multi
                else "set training.env_steps_per_sync = 1 (this unilab's executor implements no action "
                "dependency for K > 1 yet)",
            )
        ]
    if dep == "synchronous":
        return [
            r.diag(f"`synchronous` means one env step per sync, but K = {k}", "set training.env_steps_per_sync = 1")
        ]
    if dep not in IMPLEMENTED_ACTION_DEPENDENCIES:
        return [
            r.diag(
                f"action_dependency {dep!r} is not implemented by this unilab's executor "
                f"(implemented: {', '.join(IMPLEMENTED_ACTION_DEPENDENCIES)})",
                "set training.env_steps_per_sync = 1 (and remove training.action_dependency)",
            )
        ]
    return []


@rule(
    "sync.slot-capacity",
    "training.inference_slot_capacity",
    "The inference slot capacity is 1 with K = 1 and at most K otherwise.",
)
def sync_slot_capacity(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.training
    k, cap = t.env_steps_per_sync, t.inference_slot_capacity
    if k == 1 and cap != 1:
        return [
            r.diag(
                f"K = 1 serves exactly one action request per sync, capacity is {cap}",
                "set training.inference_slot_capacity = 1",
            )
        ]
    if cap > k:
        return [
            r.diag(
                f"capacity {cap} exceeds K = {k}: slots beyond K are never filled",
                f"set training.inference_slot_capacity <= {k}",
            )
        ]
    return []
