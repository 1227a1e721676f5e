"""Rules on `training.cuda_process_sharing = "mps"`: the daemon must exist and serve each rank's
GPU (by UUID) before anything starts, since CUDA clients silently run without MPS otherwise."""

from __future__ import annotations

from unilab.algos.registry import algo_def, names
from unilab.errors import Diagnostic
from unilab.host.facts import MpsServiceFacts
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, mps_start_command, quoted, rule
from unilab.sim.backends import CUDA_BACKEND, backend_def


def _wants_mps(ctx: Context) -> bool:
    return ctx.spec.training.cuda_process_sharing == "mps"


@rule(
    "mps.host",
    "training.cuda_process_sharing",
    "mps: an NVIDIA driver (NVML), every rank on a GPU, no MIG device (Linux: rule host.platform).",
)
def mps_host(r: Rule, ctx: Context) -> list[Diagnostic]:
    if not _wants_mps(ctx):
        return []
    f = ctx.facts
    off = 'or set training.cuda_process_sharing = "none"'
    if not f.nvidia.driver_present:
        return [
            r.diag(
                f"no NVIDIA driver: {f.nvidia.nvml_error}",
                f"run on a host with an NVIDIA GPU (or plan for one with --host-facts NODE.json), {off}",
            )
        ]
    if ctx.devices is None:
        return []  # devices.exist reports it
    for i, d in enumerate(ctx.devices):
        if d.gpu is None:
            return [
                r.diag(
                    f"rank {i} runs on the CPU; MPS shares a GPU between CUDA processes",
                    f"set training.devices to GPUs, e.g. [0], {off}",
                    f"training.devices[{i}]",
                )
            ]
        if d.gpu.mig_mode == "enabled":
            return [
                r.diag(
                    f"GPU {d.gpu.index} ({d.gpu.uuid}) of rank {i} has MIG enabled; MPS is not used on MIG",
                    f"use a GPU without MIG, {off}",
                    f"training.devices[{i}]",
                )
            ]
    return []


@rule("mps.backend", "sim.backend", "mps: the collector runs MuJoCo Warp on the GPU (`sim.backend = mjwarp`).")
def mps_backend(r: Rule, ctx: Context) -> list[Diagnostic]:
    if _wants_mps(ctx) and not backend_def(ctx.spec.sim).cuda:
        return [
            r.diag(
                f"sim.backend = {ctx.spec.sim.backend!r} steps physics on the CPU, so the collector has no "
                "CUDA context to share",
                f'set sim.backend = "{CUDA_BACKEND.name}", or training.cuda_process_sharing = "none"',
            )
        ]
    return []


@rule(
    "mps.algo",
    "algo.name",
    f"mps: an off-policy learner ({quoted(names('offpolicy'))}) that overlaps the collector.",
)
def mps_algo(r: Rule, ctx: Context) -> list[Diagnostic]:
    if _wants_mps(ctx) and not algo_def(ctx.spec.algo).overlaps_collector:
        choices = quoted(names("offpolicy"), mark='"')
        return [
            r.diag(
                f"algo {ctx.spec.algo.name!r} waits for each rollout before it updates, so its learner never "
                "overlaps the collector on the GPU and MPS has nothing to share",
                f'set algo.name = {choices}, or training.cuda_process_sharing = "none"',
            )
        ]
    return []


def service_for(ctx: Context, uuid: str) -> tuple[MpsServiceFacts | None, list[MpsServiceFacts]]:
    """The service a rank on GPU `uuid` will use: the named one, else the one registered for it."""
    name = ctx.spec.training.mps_service
    services = ctx.facts.mps_services_for(uuid)
    if name is not None:
        named = [s for s in ctx.facts.mps.services if s.name == name]
        return (named[0] if named and named[0].gpu_uuid == uuid else None), services
    return (services[0] if len(services) == 1 else None), services


@rule(
    "mps.service",
    "training.cuda_process_sharing",
    "mps: each rank's GPU UUID has a registered `unilab mps` service whose control socket exists and daemon runs.",
)
def mps_service(r: Rule, ctx: Context) -> list[Diagnostic]:
    if not _wants_mps(ctx) or ctx.devices is None or mps_host.check(ctx):
        return []
    if ctx.facts.mps.registry_error:
        return [
            r.diag(
                ctx.facts.mps.registry_error,
                f"inspect or remove {ctx.facts.mps.state_directory}/services.json, then start the services again: "
                f"{mps_start_command(ctx.devices[0].gpu.index if ctx.devices[0].gpu else 0)}",
            )
        ]
    out = []
    for i, d in enumerate(ctx.devices):
        if d.gpu is None:
            continue
        svc, candidates = service_for(ctx, d.gpu.uuid)
        start = mps_start_command(d.gpu.index)
        name = ctx.spec.training.mps_service
        if svc is None:
            if name is not None:
                cond = f"MPS service {name!r} is not registered for rank {i}'s GPU {d.gpu.uuid}"
                out.append(
                    r.diag(
                        cond, f"{start}, or set training.mps_service to a service of that GPU", "training.mps_service"
                    )
                )
            elif candidates:
                names = ", ".join(s.name for s in candidates)
                out.append(
                    r.diag(
                        f"several MPS services serve GPU {d.gpu.uuid} ({names})",
                        "choose one with training.mps_service = NAME",
                        "training.mps_service",
                    )
                )
            else:
                out.append(
                    r.diag(f"no MPS service is registered for rank {i}'s GPU {d.gpu.index} ({d.gpu.uuid})", start)
                )
            continue
        if not svc.control_socket_exists:
            out.append(
                r.diag(
                    f"MPS service {svc.name!r}: control socket {svc.pipe_directory}/control does not exist",
                    f"unilab mps stop --name {svc.name}; {start}",
                )
            )
        elif not svc.daemon_alive:
            out.append(
                r.diag(
                    f"MPS service {svc.name!r}: daemon pid {svc.daemon_pid} is not running",
                    f"unilab mps stop --name {svc.name}; {start}",
                )
            )
    return out


@rule(
    "mps.service-unused",
    "training.mps_service",
    "`mps_service` is only set together with `cuda_process_sharing = mps`.",
)
def mps_service_unused(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.training
    if t.mps_service is not None and t.cuda_process_sharing != "mps":
        return [
            r.diag(
                f'mps_service = {t.mps_service!r} has no effect with cuda_process_sharing = "none"',
                'set training.cuda_process_sharing = "mps", or remove training.mps_service',
            )
        ]
    return []
