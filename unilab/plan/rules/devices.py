"""Rules on `training.devices`, CPU blocks and the CPU backend's workers."""

from __future__ import annotations

from unilab.algos.registry import algo_def
from unilab.errors import Diagnostic
from unilab.extras import install_command
from unilab.host.tested import TESTED_RELEASES, is_tested, tested_range
from unilab.plan.context import Context, resolve_device
from unilab.plan.rules.registry import Rule, mps_start_command, rule
from unilab.sim.backends import CPU_BACKEND, CUDA_BACKEND, backend_def


@rule("devices.exist", "training.devices", "Every device exists on the host: `cpu`, a visible GPU index or UUID.")
def devices_exist(r: Rule, ctx: Context) -> list[Diagnostic]:
    f = ctx.facts
    for i, ref in enumerate(ctx.spec.device_list()):
        key = f"training.devices[{i}]"
        if isinstance(ref, int) and f.nvidia.driver_present and f.nvidia.nvml_error:
            # An unreadable GPU is left out of the list: the indices after it would name other GPUs.
            return [
                r.diag(
                    f"GPU index {ref} cannot be trusted while a GPU cannot be read ({f.nvidia.nvml_error})",
                    "name the GPU by its UUID (`unilab host` lists the readable ones)",
                    key,
                )
            ]
        if resolve_device(ref, f) is not None:
            continue
        if not f.nvidia.driver_present:
            return [
                r.diag(
                    f"device {ref!r} is a GPU but the host has no NVIDIA driver ({f.nvidia.nvml_error})",
                    'use training.devices = "cpu", or plan for a GPU node with --host-facts NODE.json',
                    key,
                )
            ]
        visible = f.cuda_visible_devices
        if visible.error:
            return [
                r.diag(
                    f"CUDA_VISIBLE_DEVICES={visible.raw!r} cannot be mapped: {visible.error}",
                    "correct CUDA_VISIBLE_DEVICES (indices or GPU UUIDs from `unilab host`)",
                    key,
                )
            ]
        known = {g.uuid for g in f.nvidia.gpus}
        if isinstance(ref, int) and 0 <= ref < len(visible.uuids) and visible.uuids[ref] not in known:
            return [
                r.diag(
                    f"visible GPU {ref} is {visible.uuids[ref]} (CUDA_VISIBLE_DEVICES), which is not a GPU of the host",
                    "correct CUDA_VISIBLE_DEVICES (indices or GPU UUIDs from `unilab host`)",
                    key,
                )
            ]
        listing = ", ".join(f"{j}={u}" for j, u in enumerate(visible.uuids)) or "none"
        unread = f"; {f.nvidia.nvml_error}" if f.nvidia.nvml_error else ""
        return [
            r.diag(
                f"device {ref!r} is not among the visible GPUs ({listing}){unread}",
                "use an index or UUID listed by `unilab host`",
                key,
            )
        ]
    return []


@rule("devices.unique", "training.devices", "No GPU appears twice (CPU ranks may repeat `cpu`).")
def devices_unique(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.devices is None:
        return []
    seen: dict[str, int] = {}
    for i, d in enumerate(ctx.devices):
        if d.gpu is None:
            continue
        if d.gpu.uuid in seen:
            return [
                r.diag(
                    f"training.devices[{i}] and [{seen[d.gpu.uuid]}] are the same GPU {d.gpu.uuid}",
                    "list each GPU once; one rank per GPU",
                    f"training.devices[{i}]",
                )
            ]
        seen[d.gpu.uuid] = i
    return []


@rule("devices.no-mixing", "training.devices", "All ranks are CPU or all are GPU.")
def devices_no_mixing(r: Rule, ctx: Context) -> list[Diagnostic]:
    refs = ctx.spec.device_list()
    cpu = ["cpu" == d for d in refs]
    if any(cpu) and not all(cpu):
        return [
            r.diag(
                f"devices {refs!r} mix CPU and GPU ranks; data-parallel ranks must be alike",
                'use only "cpu" entries or only GPUs',
            )
        ]
    return []


@rule("devices.mig", "training.devices", "A GPU rank's GPU does not have MIG enabled (unilab plans whole GPUs).")
def devices_mig(r: Rule, ctx: Context) -> list[Diagnostic]:
    for i, d in enumerate(ctx.devices or ()):
        if d.gpu is not None and d.gpu.mig_mode == "enabled":
            return [
                r.diag(
                    f"GPU {d.gpu.index} ({d.gpu.uuid}) has MIG enabled",
                    f"choose a GPU without MIG, or disable it: sudo nvidia-smi -i {d.gpu.index} -mig 0",
                    f"training.devices[{i}]",
                )
            ]
    return []


@rule(
    "devices.compute-mode",
    "training.devices",
    "A GPU rank's GPU admits its CUDA processes: not `prohibited`; `exclusive_process` only with one CUDA "
    "process per rank (CPU physics) or with MPS.",
)
def devices_compute_mode(r: Rule, ctx: Context) -> list[Diagnostic]:
    reset = "sudo nvidia-smi -i {index} -c DEFAULT"
    for i, d in enumerate(ctx.devices or ()):
        g = d.gpu
        if g is None:
            continue
        key = f"training.devices[{i}]"
        if g.compute_mode == "prohibited":
            return [
                r.diag(
                    f"GPU {g.index} ({g.uuid}) is in compute mode prohibited: no process may use it",
                    f"choose another GPU, or allow compute on it: {reset.format(index=g.index)}",
                    key,
                )
            ]
        # An exclusive GPU takes one CUDA process. The learner is one; a CUDA backend's collector (MuJoCo
        # Warp) is a second unless both are clients of one MPS server (NVIDIA's recommended mode for MPS).
        exclusive = g.compute_mode in ("exclusive_process", "exclusive_thread")
        backend = backend_def(ctx.spec.sim)
        if exclusive and backend.cuda and ctx.spec.training.cuda_process_sharing != "mps":
            to_default = f"set its compute mode to default: {reset.format(index=g.index)}"
            via_mps = (
                f"share it through MPS ({mps_start_command(g.index)}, then training.cuda_process_sharing = "
                f'"mps"), or {to_default}'
            )
            return [
                r.diag(
                    f"GPU {g.index} ({g.uuid}) is in compute mode {g.compute_mode}: it admits one CUDA process, "
                    f"and the rank's learner and its {backend.title} collector are two",
                    via_mps
                    if algo_def(ctx.spec.algo).overlaps_collector
                    else f'{to_default}, or use sim.backend = "{CPU_BACKEND.name}"',
                    key,
                )
            ]
    return []


@rule("devices.torch-cuda", "training.devices", "GPU ranks need a CUDA build of torch installed.")
def devices_torch_cuda(r: Rule, ctx: Context) -> list[Diagnostic]:
    torch_v = ctx.facts.packages.torch
    if ctx.on_cpu or ctx.devices is None:
        return []
    if torch_v is None:
        return [r.diag("torch is not installed", "pip install torch (a CUDA build)")]
    if torch_v.endswith("+cpu"):
        return [r.diag(f"torch {torch_v} is a CPU-only build", "install a CUDA build of torch, e.g. pip install torch")]
    return []


@rule(
    "devices.cpu-blocks",
    "training.collector_cpu_ids",
    "One collector CPU block per rank: non-empty, no CPU twice, disjoint, inside the CPU affinity set.",
)
def devices_cpu_blocks(r: Rule, ctx: Context) -> list[Diagnostic]:
    aff = set(ctx.facts.cpu.affinity)
    n = ctx.world_size
    override = ctx.spec.training.collector_cpu_ids
    if override is None:
        if len(aff) < n:
            return [
                r.diag(
                    f"{n} ranks need at least {n} CPUs, the affinity set has {len(aff)} ({sorted(aff)})",
                    "use fewer ranks, or run on a host (or under a CPU affinity) with more CPUs",
                    "training.devices",
                )
            ]
        return []
    if len(override) != n:
        return [r.diag(f"{len(override)} CPU blocks given for {n} ranks", f"give exactly {n} blocks, one per rank")]
    seen: dict[int, int] = {}
    for i, block in enumerate(override):
        key = f"training.collector_cpu_ids[{i}]"
        if not block:
            return [r.diag(f"block of rank {i} is empty", "give each rank at least one CPU", key)]
        # A repeated CPU would count twice towards the block's size (sim.workers "auto").
        twice = sorted({c for c in block if block.count(c) > 1})
        if twice:
            return [
                r.diag(
                    f"CPUs {twice} appear more than once in the block of rank {i}",
                    f"list each CPU once: {key} = {sorted(set(block))}",
                    key,
                )
            ]
        outside = sorted(set(block) - aff)
        if outside:
            return [
                r.diag(
                    f"CPUs {outside} of rank {i} are outside the affinity set {sorted(aff)}",
                    "use CPUs listed by `unilab host`",
                    key,
                )
            ]
        for c in block:
            if c in seen and seen[c] != i:
                return [r.diag(f"CPU {c} is in the blocks of ranks {seen[c]} and {i}", "make the blocks disjoint", key)]
            seen[c] = i
    return []


@rule(
    "sim.buffers",
    "sim.njmax",
    "Constraint and contact capacities (sim.njmax, sim.nconmax) are MuJoCo Warp's; CPU MuJoCo sizes its own.",
)
def sim_buffers(r: Rule, ctx: Context) -> list[Diagnostic]:
    sim = ctx.spec.sim
    backend = backend_def(sim)
    if backend.fixed_buffers:
        return []
    return [
        r.diag(
            f"sim.{key} = {value} has no effect with sim.backend = {sim.backend!r}: {backend.title} allocates "
            "as it goes",
            f'remove sim.{key}, or set sim.backend = "{CUDA_BACKEND.name}"',
            f"sim.{key}",
        )
        for key, value in (("njmax", sim.njmax), ("nconmax", sim.nconmax))
        if value is not None
    ]


@rule(
    "sim.workers",
    "sim.workers",
    "An explicit worker count is for the CPU backend, at most one per CPU of the block and per env.",
)
def sim_workers(r: Rule, ctx: Context) -> list[Diagnostic]:
    w = ctx.spec.sim.workers
    if w == "auto":
        return []
    if not backend_def(ctx.spec.sim).cpu_workers:
        return [
            r.diag(
                f"sim.workers = {w} has no effect with sim.backend = {ctx.spec.sim.backend!r}",
                'remove sim.workers (or set it to "auto")',
            )
        ]
    if w > ctx.spec.task.num_envs:
        return [
            r.diag(
                f"{w} workers for {ctx.spec.task.num_envs} envs would leave workers idle",
                f"set sim.workers <= {ctx.spec.task.num_envs}",
            )
        ]
    blocks = ctx.cpu_blocks()
    if blocks is not None and w > min(len(b) for b in blocks):
        return [
            r.diag(
                f"{w} workers exceed the {min(len(b) for b in blocks)} CPU(s) of a rank's collector block",
                f'set sim.workers = "auto" or <= {min(len(b) for b in blocks)}',
            )
        ]
    return []


@rule(
    "sim.packages",
    "sim.backend",
    "The run's packages are installed on the host: torch and mujoco, and for sim.backend = mjwarp also "
    "warp-lang and mujoco-warp.",
)
def sim_packages(r: Rule, ctx: Context) -> list[Diagnostic]:
    backend = backend_def(ctx.spec.sim)
    missing = [dist for dist in ("torch", *backend.packages) if _installed(ctx, dist) is None]
    if not missing:
        return []
    # Only what the backend's extra adds beyond the base install (torch and CPU MuJoCo) is missing.
    if backend.extra is not None and set(missing) <= set(backend.packages) - set(CPU_BACKEND.packages):
        fix = (
            f"install them on that host with {install_command(backend.extra)}, then plan again; or set "
            f'sim.backend = "{CPU_BACKEND.name}"'
        )
    else:
        fix = (
            f"install unilab with its dependencies on that host (pip install {' '.join(missing)}, or bash "
            "tools/setup.sh in a checkout), then plan again"
        )
    return [r.diag(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed on the host", fix)]


def _installed(ctx: Context, dist: str) -> str | None:
    """The host's version of a distribution the plan needs (by the name pip installs it as)."""
    return getattr(ctx.facts.packages, dist.replace("-", "_"))  # type: ignore[no-any-return]


@rule(
    "sim.tested-versions",
    "sim.backend",
    "The run's physics engine is a release this unilab is tested with (MuJoCo, and for sim.backend = mjwarp "
    "MuJoCo Warp): another release can change the physics under a plan.",
)
def sim_tested_versions(r: Rule, ctx: Context) -> list[Diagnostic]:
    for dist in backend_def(ctx.spec.sim).tested:
        version = _installed(ctx, dist)
        if version is None or is_tested(dist, version):  # a missing one is sim.packages' refusal
            continue
        tested = " or ".join(f"{a}.{b}.x" for a, b in TESTED_RELEASES[dist])
        return [
            r.diag(
                f"{dist} {version} is installed on the host; this unilab is tested with {dist} {tested}, and "
                "another release can change the physics the plan trains on",
                f"install a tested release: pip install '{tested_range(dist)}' (in a checkout, bash tools/setup.sh "
                "installs the locked versions), then plan again",
            )
        ]
    return []
