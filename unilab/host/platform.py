"""The operating systems unilab's runtime runs on, for the plan rule `host.platform` and for the
commands that start the runtime's processes without a plan (`unilab eval`)."""

from __future__ import annotations

import platform

from unilab.errors import UnilabError

# The runtime's processes rest on Linux: CPU pinning (sched_setaffinity), workers that die with
# their parent (prctl PR_SET_PDEATHSIG) and the run directory's flock semantics.
RUNTIME_SYSTEMS = ("Linux",)
RUNTIME_NEEDS = "CPU pinning with sched_setaffinity, worker processes tied to their parent with prctl"
LINUX_FIX = "run it on a Linux machine (a VM or a container works: docs/install.md)"


def require_runtime_platform(command: str, system: str | None = None) -> None:
    """Refuse ``command`` on a system the runtime does not run on, before any process starts."""
    system = platform.system() if system is None else system
    if system not in RUNTIME_SYSTEMS:
        raise UnilabError(
            f"`{command}` runs unilab's runtime, which needs Linux ({RUNTIME_NEEDS}); this host runs "
            f"{system or 'an unnamed system'}",
            fix=LINUX_FIX + "; here, plan and diff work with a Linux node's facts (--host-facts), and schema, "
            "rules and manifest validate work as they are",
        )
