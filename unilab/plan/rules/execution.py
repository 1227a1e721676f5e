"""Rules on data-parallel wire dtype, NCCL transport and the CUDA graph boundaries."""

from __future__ import annotations

from dataclasses import dataclass

from unilab.algos.registry import algo_def, names
from unilab.errors import Diagnostic
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule
from unilab.sim.backends import CUDA_BACKEND, backend_def
from unilab.tasks.registry import task_def


@rule(
    "wire.bf16-needs-dp",
    "training.dp_gradient_wire_dtype",
    "A bfloat16 gradient wire needs more than one rank (an explicit request that would do nothing is refused) "
    "and an off-policy learner (PPO's gradients are synchronised inside rsl-rl-lib, in float32).",
)
def wire_bf16(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.training.dp_gradient_wire_dtype == "bfloat16" and ctx.world_size == 1:
        return [
            r.diag(
                "one rank has no gradient all-reduce, so a bfloat16 wire would change nothing",
                'set training.dp_gradient_wire_dtype = "float32", or list two or more devices',
            )
        ]
    d = algo_def(ctx.spec.algo)
    if ctx.spec.training.dp_gradient_wire_dtype == "bfloat16" and not d.gradient_wire:
        return [
            r.diag(
                f"{d.title} synchronises gradients inside {d.external_runner}'s runner, which has no bfloat16 wire",
                'set training.dp_gradient_wire_dtype = "float32"',
            )
        ]
    return []


@rule("nccl.transport", "training.nccl_transport", "`nccl_transport = loopback` needs NCCL: two or more GPU ranks.")
def nccl_transport(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.training.nccl_transport == "loopback" and (ctx.on_cpu or ctx.world_size == 1):
        return [
            r.diag(
                "the NCCL transport is only used between two or more GPU ranks",
                'set training.nccl_transport = "default"',
            )
        ]
    return []


@dataclass(frozen=True)
class GraphBlocker:
    """Why a CUDA graph cannot run here: `reason` as the plan records it when `auto` leaves the
    graph off, `condition` and `fix` as the rule refuses an explicit `on`. One function per graph
    decides both, so the plan's resolution and its rule cannot disagree."""

    reason: str
    condition: str
    fix: str


def learner_graph_blocker(ctx: Context) -> GraphBlocker | None:
    d = algo_def(ctx.spec.algo)
    if not d.capturable_update:
        return GraphBlocker(
            f"{d.title} runs through {d.external_runner}'s eager runner",
            f"{d.title} runs through {d.external_runner}'s eager runner, which is not captured",
            'set training.learner_graph = "auto" (or "off")',
        )
    if not ctx.on_cuda:
        return GraphBlocker(
            CUDA_REASON,
            "a CUDA graph needs CUDA devices; the ranks run on the CPU",
            'set training.learner_graph = "auto" (or "off"), or use GPU devices',
        )
    user = nccl_error_handling_conflict(ctx)
    if user is not None:
        return GraphBlocker(
            f"TORCH_NCCL_ASYNC_ERROR_HANDLING={user} in the environment; captured collectives need 0",
            f"TORCH_NCCL_ASYNC_ERROR_HANDLING={user} is set in the environment; the captured all-reduces need "
            "NCCL's async error handling off (0), and a user's value wins over the plan's",
            "unset TORCH_NCCL_ASYNC_ERROR_HANDLING (or set it to 0) and re-plan, "
            'or set training.learner_graph = "auto"',
        )
    return None


def physics_graph_blocker(ctx: Context) -> GraphBlocker | None:
    backend = backend_def(ctx.spec.sim)
    if not backend.cuda:
        return GraphBlocker(
            f"sim.backend = {backend.name}: {backend.title} has no graph",
            f"the {backend.title} backend has no graph to capture",
            f'set sim.backend = "{CUDA_BACKEND.name}", or training.physics_graph = "auto"',
        )
    if not ctx.on_cuda:
        return GraphBlocker(
            CUDA_REASON,
            "Warp graph capture needs a CUDA device; the ranks run on the CPU",
            'set training.physics_graph = "auto" (or "off"), or use GPU devices',
        )
    return None


CUDA_REASON = "ranks run on the CPU; CUDA graphs need CUDA devices"


@rule(
    "graph.learner",
    "training.learner_graph",
    f"`learner_graph = on` needs CUDA ranks, a learner of unilab's own ({', '.join(names('offpolicy'))}) and, "
    "with data parallel, no TORCH_NCCL_ASYNC_ERROR_HANDLING other than 0 in the environment.",
)
def graph_learner(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.training.learner_graph != "on" or (b := learner_graph_blocker(ctx)) is None:
        return []
    return [r.diag(b.condition, b.fix)]


def nccl_error_handling_conflict(ctx: Context) -> str | None:
    """The user's TORCH_NCCL_ASYNC_ERROR_HANDLING when it is set to anything but 0 for a data-parallel
    CUDA run: PyTorch's CUDA graph notes ask for 0 with captured NCCL collectives."""
    if not ctx.on_cuda or ctx.world_size == 1:
        return None
    value = ctx.facts.nccl_env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    return value if value is not None and value.strip() != "0" else None


@rule("graph.physics", "training.physics_graph", "`physics_graph = on` needs MuJoCo Warp on CUDA devices.")
def graph_physics(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.training.physics_graph != "on" or (b := physics_graph_blocker(ctx)) is None:
        return []
    return [r.diag(b.condition, b.fix)]


@rule(
    "graph.collector",
    "training.collector_graph",
    "`collector_graph = update_state` needs MuJoCo Warp on CUDA and a task whose terms all pass the preflight.",
)
def graph_collector(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.training.collector_graph != "update_state":
        return []
    off = 'or set training.collector_graph = "off"'
    if not backend_def(ctx.spec.sim).cuda:
        return [
            r.diag(
                f"the update-state graph captures {CUDA_BACKEND.title} collectors only",
                f'set sim.backend = "{CUDA_BACKEND.name}", {off}',
            )
        ]
    if not ctx.on_cuda:
        return [
            r.diag("the update-state graph needs CUDA devices; the ranks run on the CPU", f"use GPU devices, {off}")
        ]
    out = []
    task = ctx.spec.task
    for term in task_def(task).terms(task):
        for why in term.graph_blockers():
            out.append(
                r.diag(
                    f"preflight: {term.kind} term `{term.name}` {why}",
                    f"turn the option off that adds `{term.name}` (see docs/tasks.md), {off}",
                    "task",
                )
            )
    return out
