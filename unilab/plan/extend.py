"""A larger budget for a run being resumed (`unilab apply --resume RUN_DIR --set run.total_env_steps=N`).

rsl_rl and Isaac Lab users resume a finished run with more iterations as a matter of course. Here a
plan fixes the budget, so a larger one is a new plan: the run's spec is compiled again with only
`run.total_env_steps` changed, and the two plans must differ in the budget alone (and, with
`--replan` on a changed host, in how the run executes). Anything else a `--set` would change is a
new run, refused naming the rule. The run directory keeps the plan it replaces beside the new one,
and its manifest's sessions name both, as a re-planned resume does.
"""

from __future__ import annotations

from pathlib import Path

from unilab.errors import Diagnostic, PlanRefused, SpecError, UnilabError
from unilab.host.facts import HostFacts
from unilab.plan.compile import compile_plan
from unilab.plan.diff import Change, first_of
from unilab.plan.models import Plan
from unilab.plan.recheck import differences, spec_of_plan
from unilab.plan.replan import trains_differently
from unilab.spec.load import parse_override
from unilab.spec.models import RunSpec

BUDGET_KEY = "run.total_env_steps"
RULE_ID = "resume.budget-only"
# The plan keys a budget change moves: the requested budget and the steps the run will take.
BUDGET_KEYS = ("run.total_env_steps", "run.effective_env_steps")


def budget_override(overrides: list[str], run_dir: Path) -> int:
    """The new `run.total_env_steps` of `--set` overrides given with `--resume`; any other key is refused."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    value: object = None
    for text in overrides:
        path, value = parse_override(text)
        key = ".".join(path)
        if key != BUDGET_KEY:
            raise SpecError(
                f"--set {key} with --resume: a resumed run keeps its plan; only its budget may grow",
                diagnostics=[
                    Diagnostic(
                        RULE_ID,
                        key,
                        f"--resume {run_dir} takes --set {BUDGET_KEY}=N only (a larger budget); {key} would make "
                        "another run",
                        f"drop --set {key}; to train with it, start a new run: unilab apply SPEC --set {key}=..."
                        f' (or from this run\'s policy: --set run.init_from="{run_dir}")',
                    )
                ],
            )
    field = RunSpec.model_fields["total_env_steps"]
    try:
        return int(TypeAdapter(Annotated[int, *field.metadata]).validate_python(value, strict=True))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]["msg"]
        raise SpecError(
            f"--set {BUDGET_KEY}={value!r}: {first}",
            fix=f"give the new budget as a whole number of env steps, e.g. --set {BUDGET_KEY}=4_000_000",
        ) from None


def extend_for_resume(old: Plan, facts: HostFacts, run_dir: Path, total_env_steps: int) -> tuple[Plan, list[Change]]:
    """The run's plan with the budget `total_env_steps`, compiled for this host, and what changed.
    Refused when the budget does not grow or when another key of what is trained would change."""

    if total_env_steps <= old.run.total_env_steps:
        raise UnilabError(
            f"--set {BUDGET_KEY}={total_env_steps:,} does not extend run {run_dir}: its budget is already "
            f"{old.run.total_env_steps:,} env steps",
            detail="with --resume, run.total_env_steps is the run's new, larger budget",
            fix=f"give a budget above {old.run.total_env_steps:,}, or resume with the run's own: "
            f"unilab apply --resume {run_dir}",
        )
    spec = spec_of_plan(old)
    spec = spec.model_copy(update={"run": spec.run.model_copy(update={"total_env_steps": total_env_steps})})
    try:
        new = compile_plan(spec, facts, Path.cwd())
    except PlanRefused as exc:
        first = exc.diagnostics[0]
        raise UnilabError(
            f"run {run_dir} cannot be extended to {total_env_steps:,} env steps: [{first.rule_id}] "
            f"{first.key_path}: {first.condition}",
            detail="its spec with the larger budget breaks a plan rule",
            fix=first.fix,
        ) from None
    changes = differences(old, new)
    other = [c for c in changes if c.key not in BUDGET_KEYS and trains_differently(c)]
    if other:
        raise UnilabError(
            f"run {run_dir} cannot be extended to {total_env_steps:,} env steps: {first_of(other)} would change "
            "what is trained",
            detail="a larger budget continues a run only where the plan changes in its budget alone",
            fix=f"start a new run from its policy: unilab apply SPEC --set {BUDGET_KEY}=N "
            f'--set run.init_from="{run_dir}"',
        )
    return new, changes
