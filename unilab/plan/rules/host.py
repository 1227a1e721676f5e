"""Rules on the host as a whole, before any rank is placed on it."""

from __future__ import annotations

from unilab.errors import Diagnostic
from unilab.host.platform import LINUX_FIX, RUNTIME_NEEDS, RUNTIME_SYSTEMS
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule


@rule(
    "host.platform",
    "training.devices",
    "The host runs Linux: unilab's runtime pins CPUs (sched_setaffinity) and ties its worker processes to "
    "their parent (prctl). Plan for a Linux node from another system with --host-facts.",
)
def host_platform(r: Rule, ctx: Context) -> list[Diagnostic]:
    system = ctx.facts.os.system
    if system in RUNTIME_SYSTEMS:
        return []
    return [
        r.diag(
            f"the host runs {system or 'an unnamed system'}, and unilab's runtime needs Linux ({RUNTIME_NEEDS})",
            f"{LINUX_FIX}; to review a plan for a Linux node from here, record its facts there with "
            "`unilab host --json > node.json` and pass --host-facts node.json",
        )
    ]
