"""What `unilab apply` runs: a spec planned for this host, a saved plan re-checked against it, or
a run's own plan for a resume (re-planned for this host with `--replan`). The CLI and the Python
API (unilab.api) both go through here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.errors import UnilabError
from unilab.host import probe
from unilab.inputfile import reading
from unilab.plan.compile import compile_plan
from unilab.plan.diff import first_of
from unilab.plan.extend import budget_override, extend_for_resume
from unilab.plan.fingerprint import compare_fingerprint
from unilab.plan.inputs import check_init_from, check_planned_inputs
from unilab.plan.recheck import recheck_saved_plan
from unilab.plan.render import is_plan_file, load_plan
from unilab.plan.replan import replan_for_resume
from unilab.plan.smoke import refuse_saved_plan, smoke_plan
from unilab.records.run_dir import RunDir
from unilab.spec.load import load_spec

if TYPE_CHECKING:
    from unilab.host.facts import HostFacts
    from unilab.plan.models import Plan


def resolve_apply(
    target: Path | None, overrides: list[str], resume: Path | None = None, replan: bool = False, smoke: bool = False
) -> tuple[Plan, str | None]:
    """The plan to apply and, for a resume re-planned for this host, the plan id it continues.
    ``smoke``: the spec's smoke run (unilab.plan.smoke)."""
    if smoke:
        return _smoke(target, overrides, resume), None
    resume_dir = resume if target is None else None  # the run's own plan is what a resume applies
    if target is None:
        if resume is None:
            raise UnilabError(
                "apply needs a SPEC or a saved PLAN", fix="unilab apply specs/g1.toml (or --resume RUN_DIR)"
            )
        target = RunDir(resume).plan  # the run's own plan, re-checked against this host
        if not resume.is_dir():
            raise UnilabError(
                f"--resume {resume}: " + ("no such directory" if not resume.exists() else "not a directory"),
                fix="pass the run directory `unilab apply` printed at the end of the run",
            )
        if not target.is_file():
            raise UnilabError(
                f"{resume} is not a unilab run directory (no plan.toml)",
                fix="pass the directory `unilab apply` printed at the end of the run",
            )
    if resume is not None and target == RunDir(resume).plan:
        _check_own_plan(resume)
    if replan and resume is None:
        raise UnilabError("--replan re-plans a run being resumed", fix="use it with --resume RUN_DIR, or drop it")
    if resume_dir is not None and overrides:
        return _extended(resume_dir, overrides, replan)
    return _resolve_target(target, overrides, resume_dir, replan)


def _check_own_plan(run_dir: Path) -> None:
    """The run's own plan.toml emptied or replaced: read as a spec or plan, its errors would speak of
    specs, or of re-planning, not of the run."""

    target = RunDir(run_dir).plan
    try:
        with reading(target, "plan"):
            ok = is_plan_file(target)  # a plan with a flaw of its own (edited, older) is named by loading it
    except UnilabError:
        ok = False
    if not ok:
        raise UnilabError(
            f"{target} is not the plan `unilab apply` wrote for run {run_dir} (it is empty, not TOML, or was replaced)",
            detail="a run resumes with its own plan, whose id its checkpoints carry",
            fix=f"restore {target} (a copy, or `unilab plan SPEC --out {target}` with the run's spec and host, "
            f"which gives the same plan id), or start a new run from this one's policy: unilab apply SPEC "
            f'--set run.init_from="{run_dir}"',
        )


def _smoke(target: Path | None, overrides: list[str], resume: Path | None) -> Plan:
    if resume is not None:
        raise UnilabError(
            "--smoke starts a new, short run of a spec; --resume continues a run",
            fix=f"drop --smoke to resume {resume}, or drop --resume for a smoke run: unilab apply SPEC --smoke",
        )
    if target is None:
        raise UnilabError("--smoke needs a SPEC", fix="unilab apply specs/g1.toml --smoke")
    refuse_saved_plan(target, "apply")
    return smoke_plan(lambda o: _resolve_target(target, o)[0], overrides)


def _resolve_target(
    target: Path, overrides: list[str], resume_dir: Path | None = None, replan: bool = False
) -> tuple[Plan, str | None]:
    """A spec is planned against this host; a saved plan is re-checked against it (stale-plan refusal).
    `resume_dir`: the plan is that run's own, re-planned for this host only with `replan` (then the
    second value is the run's plan id the new plan continues; else None)."""

    facts = probe.probe_host()
    with reading(target, "spec or plan"):
        is_plan = target.is_file() and is_plan_file(target)
    if is_plan:
        if overrides:
            raise UnilabError(
                f"{target} is a saved plan; --set applies to specs only", fix="put the override on the spec and re-plan"
            )
        with reading(target, "plan"):
            plan = load_plan(target)
        changes = compare_fingerprint(plan.host_facts, facts)
        if changes:
            if resume_dir is not None and replan:
                # Compiled afresh from the plan's spec values: an edited derived value does not carry
                # over, and the checkpoint must still belong to this plan id (resolve_resume).
                return _replanned(plan, facts, resume_dir), plan.plan_id
            if resume_dir is not None:
                raise UnilabError(
                    f"run {resume_dir} was planned for other host facts: {first_of(changes)}",
                    detail="a run resumes with its own plan, on the host facts it was compiled against",
                    fix=f"continue it on this host with a plan re-made for it: unilab apply --resume {resume_dir} "
                    "--replan (refused if that would change what is trained); or restore what changed, or start "
                    "a new run: unilab apply SPEC",
                )
            raise UnilabError(
                f"the saved plan {target} is stale: {first_of(changes)}",
                detail="a plan is only valid on the host facts it was compiled against",
                fix="re-plan: unilab plan SPEC --out PLAN.toml (or apply the spec directly)",
            )
        _recheck(plan, facts, target, resume_dir)
        return plan, None

    with reading(target, "spec"):
        loaded = load_spec(target, overrides)
    return compile_plan(loaded.spec, facts, loaded.spec_dir), None


def _extended(run_dir: Path, overrides: list[str], replan: bool) -> tuple[Plan, str]:
    """The run's plan with the larger budget `--set run.total_env_steps=N` asks for (nothing else
    may change), and the plan id of the run it continues; the changes are shown as `unilab diff`
    shows them."""

    total = budget_override(overrides, run_dir)
    plan_path = RunDir(run_dir).plan
    with reading(plan_path, "plan"):
        old = load_plan(plan_path)
    facts = probe.probe_host()
    if (host_changes := compare_fingerprint(old.host_facts, facts)) and not replan:
        raise UnilabError(
            f"run {run_dir} was planned for other host facts: {first_of(host_changes)}",
            detail="a run resumes with its own plan, on the host facts it was compiled against",
            fix=f"extend it on this host with a plan re-made for it: unilab apply --resume {run_dir} --replan "
            f"--set run.total_env_steps={total}; or restore what changed",
        )
    if not host_changes:
        _recheck(old, facts, plan_path, run_dir)  # an edited plan.toml is not extended
    new, changes = extend_for_resume(old, facts, run_dir, total)
    print(
        f"extending {run_dir} to {total:,} env steps: {len(changes)} change{'s' if len(changes) != 1 else ''} "
        "to its plan",
        file=sys.stderr,
    )
    for c in changes:
        print(f"  {c.render()}", file=sys.stderr)
    return new, old.plan_id


def _recheck(plan: Plan, facts: HostFacts, source: Path, resume_dir: Path | None) -> None:
    """A saved plan on this host's facts: its input files, then the plan against its own spec."""

    # The plan's files first: a changed or missing one is named as such, not as a plan that
    # no longer compiles to itself (apply checks them again just before it runs).
    check_planned_inputs(plan.task, Path.cwd(), resume_dir)
    if resume_dir is None:
        check_init_from(plan.run, Path.cwd())
    recheck_saved_plan(plan, facts, source)  # its id proves nothing: anyone can recompute it


def _replanned(plan: Plan, facts: HostFacts, run_dir: Path) -> Plan:
    """The run's plan made again for this host; the changes are shown as `unilab diff` shows them."""

    new, changes = replan_for_resume(plan, facts, run_dir)
    print(
        f"re-planned {run_dir} for this host: {len(changes)} change{'s' if len(changes) != 1 else ''} to how it "
        "executes, none to what it trains",
        file=sys.stderr,
    )
    for c in changes:
        print(f"  {c.render()}", file=sys.stderr)
    return new


def resolve_plan_object(plan: Plan) -> Plan:
    """A Plan handed over in-process (unilab.apply) is checked as a saved plan file is: against
    this host's facts, its input files, and its own spec (a plan changed by model_copy is refused)."""

    facts = probe.probe_host()
    if changes := compare_fingerprint(plan.host_facts, facts):
        raise UnilabError(
            f"the plan was compiled for other host facts: {first_of(changes)}",
            detail="a plan is only valid on the host facts it was compiled against",
            fix="plan the spec on this host: unilab.plan(spec) without host_facts",
        )
    _recheck(plan, facts, Path("<the Plan passed to unilab.apply>"), None)
    return plan
