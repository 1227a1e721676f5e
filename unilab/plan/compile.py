"""compile(spec, facts) -> Plan: pure and deterministic. Every rule runs; if any is violated the
plan is refused with all of them, otherwise each decision is resolved and recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from unilab import __version__
from unilab.algos.registry import algo_def
from unilab.errors import PlanRefused, UnilabError
from unilab.host.facts import HostFacts
from unilab.plan.context import Context, build_context
from unilab.plan.fingerprint import digest, fingerprint_facts
from unilab.plan.inputs import display_path, resolve_input_path
from unilab.plan.models import (
    EnvVarPlan,
    GraphPlan,
    GraphsPlan,
    InitFromPlan,
    LearnerPlan,
    MotionPlan,
    Plan,
    PlanBody,
    PlanHeader,
    PrecisionPlan,
    RankMps,
    RankPlan,
    RobotPlan,
    RunPlan,
    SharingPlan,
    SimPlan,
    SyncPlan,
    TaskPlan,
    TaskPlanSection,
    TopologyPlan,
    WirePlan,
)
from unilab.plan.render import compute_plan_id
from unilab.plan.rules import RULES
from unilab.plan.rules.execution import GraphBlocker, learner_graph_blocker, physics_graph_blocker
from unilab.plan.rules.learner import resolve_precision, resolve_threads
from unilab.plan.rules.sharing import service_for
from unilab.sim.backends import backend_def
from unilab.spec.load import spec_digest
from unilab.spec.models import Spec
from unilab.tasks.registry import robot_spec, task_def
from unilab.tasks.timing import control_dt, max_episode_steps


def check(ctx: Context) -> None:
    diags = [d for r in RULES for d in r.check(ctx)]
    if diags:
        raise PlanRefused(diags)


def _graphs(ctx: Context) -> GraphsPlan:
    """Each graph as asked: `off` stays off, `on` passed its rule, `auto` runs where nothing blocks it
    (the same blocker functions as the rules: unilab.plan.rules.execution)."""
    t = ctx.spec.training

    def decide(requested: str, blocker: GraphBlocker | None, key: str) -> GraphPlan:
        if requested == "off":
            return GraphPlan(requested="off", enabled=False, disable_reason=f"training.{key} = off")
        if blocker is not None:
            return GraphPlan(requested=requested, enabled=False, disable_reason=blocker.reason)
        return GraphPlan(requested=requested, enabled=True)

    learner = decide(t.learner_graph, learner_graph_blocker(ctx), "learner_graph")
    physics = decide(t.physics_graph, physics_graph_blocker(ctx), "physics_graph")
    if t.collector_graph == "off":
        collector = GraphPlan(requested="off", enabled=False, disable_reason="experimental; opt in with update_state")
    else:
        collector = GraphPlan(requested="update_state", enabled=True)
    return GraphsPlan(learner=learner, physics=physics, collector=collector)


def _nccl_env(ctx: Context, graphs: GraphsPlan) -> list[EnvVarPlan]:
    if not ctx.on_cuda or ctx.world_size == 1:
        return []
    planned: dict[str, str] = {}
    if ctx.spec.training.nccl_transport == "loopback":
        planned |= {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}
    if graphs.learner.enabled:
        # PyTorch's CUDA graph notes: NCCL async error handling must be off for captured collectives.
        planned["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    user = ctx.facts.nccl_env
    names = sorted(set(planned) | set(user))
    return [
        EnvVarPlan(name=n, value=user[n], source="user")
        if n in user
        else EnvVarPlan(name=n, value=planned[n], source="plan")
        for n in names
    ]


def _robot(ctx: Context) -> RobotPlan:
    task, info = robot_spec(ctx.spec.task), ctx.robot
    if task is None or info is None:
        return RobotPlan(source=f"builtin:{ctx.spec.task.name}", actuators="file")
    if task.robot_mjcf is None:
        return RobotPlan(source="builtin", actuators=info.actuators)
    path = resolve_input_path(task.robot_mjcf, ctx.spec_dir)
    return RobotPlan(source=display_path(path), sha256=info.sha256, actuators=info.actuators)


def _motion(ctx: Context, ref: str) -> MotionPlan:
    info = ctx.motion
    if info is None or isinstance(info, UnilabError):
        raise UnilabError("internal: rules passed but the reference motion did not resolve")
    source = ref if ref.startswith("builtin:") else display_path(resolve_input_path(ref, ctx.spec_dir))
    return MotionPlan(source=source, sha256=info.sha256, num_frames=info.num_frames, fps=info.fps)


def _init_from(ctx: Context) -> InitFromPlan | None:
    src = ctx.init_from
    if src is None:
        return None
    return InitFromPlan(
        checkpoint=display_path(src.checkpoint), sha256=src.sha256, env_steps=src.env_steps, plan_id=src.plan.plan_id
    )


def _ranks(ctx: Context) -> tuple[list[RankPlan], list[str], str]:
    blocks = ctx.cpu_blocks()
    if blocks is None or ctx.devices is None:
        raise UnilabError("internal: rules passed but devices or CPU blocks did not resolve")
    ranks, services, reasons = [], [], []
    t = ctx.spec.training
    for i, d in enumerate(ctx.devices):
        mps = None
        if t.cuda_process_sharing == "mps" and d.gpu is not None:
            svc, _ = service_for(ctx, d.gpu.uuid)
            if svc is not None:
                services.append(svc.name)
                mps = RankMps(
                    service=svc.name,
                    pipe_directory=svc.pipe_directory,
                    log_directory=svc.log_directory,
                    daemon_pid=svc.daemon_pid,
                )
        threads = resolve_threads(ctx, blocks[i], d.kind)
        reasons.append(threads.reason)
        ranks.append(
            RankPlan(
                rank=i,
                device=d.kind,
                gpu_uuid=d.gpu.uuid if d.gpu else None,
                gpu_name=d.gpu.name if d.gpu else None,
                seed=ctx.spec.run.seed + i,
                collector_cpu_ids=threads.collector_cpu_ids,
                learner_cpu_ids=threads.learner_cpu_ids,
                torch_threads=threads.threads,
                mps=mps,
            )
        )
    return ranks, services, reasons[0]


def _learner(ctx: Context, threads_reason: str) -> LearnerPlan:
    precision = resolve_precision(ctx)
    return LearnerPlan(
        precision=PrecisionPlan(
            requested=ctx.spec.algo.precision, effective=precision.effective, reason=precision.reason
        ),
        threads_requested=ctx.spec.training.torch_threads,
        threads_reason=threads_reason,
    )


def effective_env_steps(spec: Spec, world_size: int) -> int:
    """The env steps an uninterrupted run collects, summed over ranks. Each rank collects its share
    `run.total_env_steps // world_size` in whole units and stops at the first unit boundary at or
    past it: a PPO rollout (`algo.num_steps_per_env` x `task.num_envs`; rsl-rl updates on whole
    rollouts), or one env step of `task.num_envs` envs for the off-policy learners. The executor
    stops there (unilab.run.onpolicy reads this figure), so the plan records what will run rather
    than refusing a total that is not a whole number of units."""
    algo = spec.algo
    unit = spec.task.num_envs * algo_def(algo).syncs_per_unit(algo)
    share = spec.run.total_env_steps // world_size
    return world_size * -(-share // unit) * unit


_TASK_PLAN: TypeAdapter[TaskPlan] = TypeAdapter(TaskPlanSection)


def _task(ctx: Context, dt: float) -> TaskPlan:
    """The spec's `[task]` with every reward weight, the robot and motion pinned by digest, and the
    episode in control steps."""
    task = ctx.spec.task
    resolved: dict[str, Any] = {
        "reward_weights": task_def(task).weights(task),
        "robot": _robot(ctx),
        "control_dt": round(dt, 9),
        # The task computes its time limit with the same function from the same control step.
        "max_episode_steps": max_episode_steps(task.episode_length_s, dt),
    }
    motion = task_def(task).motion(task)
    if motion is not None:
        resolved["reference_motion"] = _motion(ctx, motion)
    return _TASK_PLAN.validate_python({**task.model_dump(exclude={"reward_weights"}), **resolved})


def compile_plan(spec: Spec, facts: HostFacts, spec_dir: Path) -> Plan:
    ctx = build_context(spec, facts, spec_dir)
    check(ctx)
    t = spec.training
    graphs = _graphs(ctx)
    ranks, services, threads_reason = _ranks(ctx)
    host_facts = fingerprint_facts(ctx, services)
    dt = control_dt(spec.sim.timestep, spec.sim.decimation)
    workers = (
        1
        if not backend_def(spec.sim).cpu_workers
        else (min(len(r.collector_cpu_ids) for r in ranks) if spec.sim.workers == "auto" else spec.sim.workers)
    )
    workers = min(workers, spec.task.num_envs)
    world = ctx.world_size
    body = PlanBody(
        plan=PlanHeader(unilab_version=__version__, spec_digest=spec_digest(spec), host_fingerprint=digest(host_facts)),
        run=RunPlan(
            **spec.run.model_dump(exclude={"init_from"}),
            init_from=_init_from(ctx),
            effective_env_steps=effective_env_steps(spec, world),
        ),
        task=_task(ctx, dt),
        sim=SimPlan(**spec.sim.model_dump(), workers_per_rank=workers),
        algo=spec.algo,
        learner=_learner(ctx, threads_reason),
        topology=TopologyPlan(
            world_size=world,
            process_group_backend="nccl" if ctx.on_cuda else "gloo",
            launcher="elastic" if world > 1 else "single_process",
        ),
        sync=SyncPlan(
            env_steps_per_sync=t.env_steps_per_sync,
            inference_slot_capacity=t.inference_slot_capacity,
            action_dependency=t.action_dependency or "synchronous",
        ),
        cuda_process_sharing=SharingPlan(configured=t.cuda_process_sharing, effective=t.cuda_process_sharing),
        gradient_wire=WirePlan(
            dtype=t.dp_gradient_wire_dtype,
            active=world > 1,
            reduction=(
                "fp32 groups >= 1024 elements packed as bf16, SUM, restored to fp32, divided by world size "
                "in fp32; smaller groups and other dtypes unchanged"
            )
            if t.dp_gradient_wire_dtype == "bfloat16"
            else "SUM in fp32, divided by world size",
        ),
        graphs=graphs,
        ranks=ranks,
        nccl_env=_nccl_env(ctx, graphs),
        host_facts=host_facts,
    )
    return Plan(**dict(body), plan_id=compute_plan_id(body))
