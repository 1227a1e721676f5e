"""A saved plan, checked before it runs: compiled again from its own sections and compared.

`plan_id` is a content address, not a signature: anyone can edit a plan and recompute it. So
`unilab apply PLAN` does not trust a plan for what it says; it rebuilds the spec the plan was
compiled from (every spec value is in the plan's sections, resolved), compiles that spec against
the host facts, which apply has already found equal to the plan's, and runs the plan only if the
result is the same plan. An edited value is refused with the rule it breaks (a warm-up longer than
the budget, say), or, when it breaks none, with the first key whose value compile would not have
written (an `effective_env_steps` of 10^12, a rank's CPUs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unilab.errors import Diagnostic, PlanRefused, UnilabError, first_validation_error
from unilab.host.facts import HostFacts
from unilab.plan.compile import compile_plan
from unilab.plan.diff import Change, diff_plans, first_of
from unilab.plan.models import Plan
from unilab.spec.models import Spec, TrainingSpec
from unilab.tasks.registry import robot_spec

# Keys a recompile writes differently without a different run: the spec's own path strings (the
# plan also pins each file by its resolved path and digest, which are compared) and the spec
# digest (of the spec as the user wrote it, which the plan does not keep word for word).
_SPEC_WORDING = ("plan.spec_digest", "task.robot_mjcf", "task.motion")


_TRAINING_DEFAULTS = TrainingSpec().model_dump()


def spec_of_plan(plan: Plan, explicit_cpu_blocks: bool = False) -> Spec:
    """The spec `plan` was compiled from, as far as compiling it again needs: every section's
    values, file inputs by the paths the plan resolved them to (relative to the working directory),
    and `[training]` from what the plan records of it. ``explicit_cpu_blocks``: the ranks' collector
    CPUs as `training.collector_cpu_ids` (for a spec that set them) instead of the even split."""
    # Values at their defaults are left out, as a spec leaves them: some rules refuse an option that
    # is set where it has no effect, even to its default.
    run = plan.run.model_dump(exclude={"effective_env_steps", "init_from"}, exclude_defaults=True)
    if plan.run.init_from is not None:
        run["init_from"] = plan.run.init_from.checkpoint
    resolved = {"robot", "reference_motion", "control_dt", "max_episode_steps"}
    if robot_spec(plan.task) is None:
        # An older plan's, never the spec's: plans made while one `[task]` model served every task
        # wrote these G1 keys for the cart-pole too.
        resolved |= {"observation_noise", "domain_randomization"}
    task = plan.task.model_dump(exclude=resolved, exclude_defaults=True)
    task = {k: v for k, v in task.items() if v is not None}
    if not plan.task.robot.source.startswith("builtin"):
        task["robot_mjcf"] = plan.task.robot.source
    if plan.task.reference_motion is not None:
        task["motion"] = plan.task.reference_motion.source
    on_cuda = any(r.device == "cuda" for r in plan.ranks)
    devices: Any = [r.gpu_uuid for r in plan.ranks] if on_cuda else ["cpu"] * len(plan.ranks)
    training: dict[str, Any] = {
        "devices": devices[0] if len(devices) == 1 else devices,
        "env_steps_per_sync": plan.sync.env_steps_per_sync,
        "inference_slot_capacity": plan.sync.inference_slot_capacity,
        "action_dependency": plan.sync.action_dependency,
        "cuda_process_sharing": plan.cuda_process_sharing.configured,
        "dp_gradient_wire_dtype": plan.gradient_wire.dtype,
        "learner_graph": plan.graphs.learner.requested,
        "physics_graph": plan.graphs.physics.requested,
        "collector_graph": plan.graphs.collector.requested,
        "nccl_transport": "loopback"
        if any(e.name == "NCCL_SOCKET_IFNAME" and e.source == "plan" for e in plan.nccl_env)
        else "default",
    }
    if plan.learner is not None:
        training["torch_threads"] = plan.learner.threads_requested
    if explicit_cpu_blocks:
        training["collector_cpu_ids"] = [r.collector_cpu_ids for r in plan.ranks]
    return Spec.model_validate(
        {
            "schema_version": 1,
            "run": run,
            "task": task,
            "sim": plan.sim.model_dump(exclude={"workers_per_rank"}, exclude_defaults=True),
            "algo": {"name": plan.algo.name, **plan.algo.model_dump(exclude_defaults=True)},
            "training": {k: v for k, v in training.items() if v != _TRAINING_DEFAULTS.get(k)},
        }
    )


def differences(plan: Plan, again: Plan) -> list[Change]:
    """Keys whose values differ, but for the spec's own wording (paths as written, its digest)."""
    return [
        c
        for c in diff_plans(plan.model_dump(mode="json"), again.model_dump(mode="json"))
        if c.key != "plan_id" and c.key not in _SPEC_WORDING
    ]


class SavedPlanRefused(PlanRefused):
    """A saved plan whose values break plan rules: it was edited after `unilab plan` wrote it."""

    def __init__(self, source: Path, diagnostics: list[Diagnostic]) -> None:
        super().__init__(diagnostics)
        n = len(self.diagnostics)
        self.summary = (
            f"the saved plan {source} breaks {n} plan rule{'s' if n != 1 else ''}: it was edited after "
            "`unilab plan` wrote it (re-plan from the spec instead)"
        )
        self.args = (self.summary,)


def recheck_saved_plan(plan: Plan, facts: HostFacts, source: Path) -> None:
    """Refuse a saved plan (read from ``source``) that its own spec does not compile to on this
    host: it was edited. Its rules are run again on the way (a rule's refusal names the rule)."""
    from pydantic import ValidationError

    fix = f"re-plan from the spec (unilab plan SPEC --out {source}) instead of editing the plan"
    changes: list[Change] = []
    for explicit in (False, True):
        try:
            spec = spec_of_plan(plan, explicit_cpu_blocks=explicit)
        except ValidationError as exc:
            raise UnilabError(
                f"the saved plan {source} holds a value no spec can have: {first_validation_error(exc)}",
                detail="the plan was edited after `unilab plan` wrote it",
                fix=fix,
            ) from None
        try:
            again = compile_plan(spec, facts, Path.cwd())
        except PlanRefused as exc:
            raise SavedPlanRefused(source, exc.diagnostics) from None
        except UnilabError as exc:
            raise UnilabError(
                f"the saved plan {source} does not pass the plan rules: {exc.summary}",
                detail=exc.detail,
                fix=fix,
            ) from None
        changes = differences(plan, again)
        if not changes:
            return
    raise UnilabError(
        f"the saved plan {source} is not what its own spec compiles to: {first_of(changes)}",
        detail="`unilab plan` did not write this value (old -> what compile writes); the plan was edited after it "
        "was written, and its plan_id recomputed",
        fix=fix,
    )
