"""Re-planning a run that resumes on another host (`unilab apply --resume RUN_DIR --replan`).

A requeued job lands on another node; a `pip install -U` moves a patch version. The run's spec is
compiled again against the host it is on now (from the plan's own sections, as a saved plan is
re-checked) and the two plans are compared key by key. What only says how the run executes may
change: the ranks' devices, GPUs and CPU blocks, threads, workers, the learner's precision, graphs,
MPS services, and the host facts themselves, with package versions that differ in their patch
level only. Anything that changes what is trained (task, algorithm, network shapes, observation
layout, budget, world size, a package's major or minor version) refuses the resume, naming the
key: that is a new run.
"""

from __future__ import annotations

import re
from pathlib import Path

from unilab.errors import PlanRefused, UnilabError
from unilab.host.facts import HostFacts
from unilab.plan.compile import compile_plan
from unilab.plan.diff import Change, first_of
from unilab.plan.models import Plan
from unilab.plan.recheck import differences, spec_of_plan
from unilab.plan.render import compute_plan_id

# Plan keys (prefixes) that record how a run executes, not what it trains.
EXECUTION_KEYS = (
    "plan.host_fingerprint",
    "plan.unilab_version",
    "ranks[",
    "sim.workers_per_rank",
    "learner.",
    "graphs.",
    "nccl_env",
    "cuda_process_sharing.effective",
    "host_facts.",
)
_PACKAGE_FACT = re.compile(r"^host_facts\.packages\.(\w+)$")


def _release(version: object) -> tuple[str, ...] | None:
    """(major, minor) of a version string such as 2.13.0+cpu; None when it has no such form."""
    m = re.match(r"^(\d+)\.(\d+)", str(version)) if version is not None else None
    return (m.group(1), m.group(2)) if m else None


def trains_differently(change: Change) -> bool:
    """Whether a plan change alters what the run trains (then a resume must not re-plan)."""
    if not change.key.startswith(EXECUTION_KEYS):
        return True
    pkg = _PACKAGE_FACT.match(change.key)
    if pkg and pkg.group(1) != "unilab":  # unilab's own version: its plans are compared key by key above
        return _release(change.old) is None or _release(change.old) != _release(change.new)
    return False


def replan_for_resume(old: Plan, facts: HostFacts, run_dir: Path) -> tuple[Plan, list[Change]]:
    """The run's plan compiled for this host, and what changed; refused when a change alters what
    is trained or the spec no longer passes the rules here."""

    fix = (
        f"resume on a host like the one the run started on, or start a new run from its spec (see {run_dir}/plan.toml)"
    )
    try:
        new = compile_plan(spec_of_plan(old), facts, Path.cwd())
    except PlanRefused as exc:
        first = exc.diagnostics[0]
        raise UnilabError(
            f"run {run_dir} cannot continue on this host: [{first.rule_id}] {first.key_path}: {first.condition}",
            detail="its spec, compiled for this host, breaks a plan rule here",
            fix=fix,
        ) from None
    # The run's spec is the one the user wrote: its digest stays (the spec rebuilt from the plan
    # compiles the same way but is not word for word the user's).
    header = new.plan.model_copy(update={"spec_digest": old.plan.spec_digest})
    new = new.model_copy(update={"plan": header})
    new = new.model_copy(update={"plan_id": compute_plan_id(new)})
    changes = differences(old, new)
    training = [c for c in changes if trains_differently(c)]
    if training:
        raise UnilabError(
            f"run {run_dir} cannot continue on this host: {first_of(training)} would change what is trained",
            detail="--replan continues a run only where the host changes how it executes (devices, CPUs, threads, "
            "workers, precision, graphs, MPS services, package patch versions)",
            fix=fix,
        )
    return new, changes
