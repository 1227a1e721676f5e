"""The learner's precision and CPU thread budget: each condition is stated once, here, and read by
both the rule that refuses an explicit request and the plan's resolution of `auto`.

Precision. bfloat16 pays only where the CPU multiplies bf16 matrices in hardware: on a 2-vCPU Xeon
with AMX-BF16 the matched SAC update (FastSAC's sizes, batch 256) ran 1.7-1.9x faster than
float32 on one thread, while an AVX2-only EPYC ran bf16 matmuls 59-124x slower than float32
(docs/performance.md). An AMD EPYC (Zen 4) with AVX512-BF16 and no AMX ran the same update 1.47x
faster in bfloat16 on one thread (40.7 against 27.6 updates/s) and its 1024x768x768 matmul 2.4-2.6x
faster, so `auto` takes bfloat16 on either kind of bf16 unit. Not on CUDA: no GPU run of unilab has
been measured.

Threads. An off-policy learner on the CPU usually bounds the run. `auto` gives it one intra-op
thread per physical core of the rank's CPU block (SMT siblings share one core's matrix units) and
the whole block, the collector's CPUs included; the rank uses them only while the collector waits
for its action (unilab.run.offpolicy.LearnerThreads), so a run the collector bounds keeps the
collector's pace. On the 2-vCPU AMX Xeon that ran 1.7x the env steps/s of one learner thread on a
CPU apart, on a 2-core AVX2 EPYC 1.52x at the matched SAC config's 768-wide critic. Without AMX and
under 512 units it keeps half the block on CPUs apart from the collector's: there the whole block
ran 9 % slower end to end. One thread for small networks (under 256), where threading each
operation costs more than it saves (docs/performance.md has the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

from unilab.algos.registry import algo_def, names
from unilab.errors import Diagnostic
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule
from unilab.sim.backends import backend_def

# The widest hidden layer below which `auto` keeps float32 and one learner thread: at 64x64 SAC
# ran faster in float32 and on one thread; at 256x256 bfloat16 and two threads were no slower.
AUTO_BF16_MIN_WIDTH = 256
# The widest hidden layer from which a learner without AMX takes the whole CPU block while the
# collector waits. At 768 (the matched SAC config, 8 updates per vector step) one update outlasts
# the physics step many times over, so the collector waits most of the time and the learner's
# second thread pays; at 256 (the walking recipe, 2 updates per vector step) each update is shorter
# than the physics step, the learner seldom finds the collector waiting, and its idle threads cost
# the collector more than they give (docs/performance.md, AVX2 VM 2026-12-04).
WHOLE_BLOCK_MIN_WIDTH = 512


def bf16_blocker(ctx: Context) -> str | None:
    """The first unmet condition for a bfloat16 learner on this plan's devices; None when it can run."""
    d = algo_def(ctx.spec.algo)
    if not d.follows_precision:
        return f"{d.title} runs through {d.external_runner}'s learner, which computes in float32"
    if ctx.on_cuda:
        return None
    cpu = ctx.facts.cpu
    if cpu.features is None:
        return (
            "the host facts do not record the CPU's features (they predate unilab reading them), so bf16 "
            "matrix units cannot be confirmed"
        )
    if not cpu.bf16_matmul():
        have = ", ".join(cpu.features) or "none of the flags unilab reads"
        return (
            f"the CPU ({cpu.model}) has no bf16 matrix units: neither amx_bf16 nor avx512_bf16 (it has: {have}); "
            "bf16 matrix products ran 59-124x slower than float32 on such a CPU"
        )
    return None


@rule(
    "learner.precision",
    "algo.precision",
    f'`precision = "bfloat16"` needs a learner of unilab\'s own ({", ".join(names("offpolicy"))}) and bf16 matrix '
    "units: a CPU with "
    "AMX-BF16 or AVX512-BF16 in the host facts, or CUDA devices.",
)
def learner_precision(r: Rule, ctx: Context) -> list[Diagnostic]:
    if ctx.spec.algo.precision != "bfloat16":
        return []
    blocker = bf16_blocker(ctx)
    if blocker is None:
        return []
    if ctx.facts.cpu.features is None and algo_def(ctx.spec.algo).follows_precision:
        fix = 'record the host facts again (`unilab host --json > node.json`), or set algo.precision = "auto"'
    else:
        fix = 'set algo.precision = "auto" (or "float32")'
    return [r.diag(blocker, fix)]


def _widest_layer(ctx: Context) -> int:
    algo = ctx.spec.algo
    widths = getattr(algo, "critic_hidden_dims", None) or getattr(algo, "hidden_dims", None) or (0,)
    expansion = getattr(algo, "expansion", 1)  # FlashSAC's blocks widen by this factor
    return max(widths) * expansion


@dataclass(frozen=True)
class PrecisionDecision:
    effective: str  # "float32" | "bfloat16"
    reason: str


def resolve_precision(ctx: Context) -> PrecisionDecision:
    """What the learner computes in. Called after the rules passed: an explicit request stands."""
    requested = ctx.spec.algo.precision
    if requested != "auto":
        return PrecisionDecision(requested, f'algo.precision = "{requested}"')
    blocker = bf16_blocker(ctx)
    if blocker is not None:
        return PrecisionDecision("float32", f"auto: {blocker}")
    if ctx.on_cuda:
        return PrecisionDecision(
            "float32", 'auto: bfloat16 on CUDA is not measured yet; set algo.precision = "bfloat16" to use it'
        )
    widest = _widest_layer(ctx)
    if widest < AUTO_BF16_MIN_WIDTH:
        return PrecisionDecision(
            "float32",
            f"auto: the widest hidden layer ({widest}) is under {AUTO_BF16_MIN_WIDTH}, where bfloat16 measured "
            "slower (the check task's 64x64 SAC: 112 against 150 updates/s)",
        )
    if not ctx.facts.cpu.has("amx_bf16"):
        return PrecisionDecision(
            "bfloat16",
            "auto: the CPU has avx512_bf16 (no AMX tiles), measured 1.47x faster than float32 for the SAC update "
            "at FastSAC's sizes on one thread (docs/performance.md)",
        )
    return PrecisionDecision(
        "bfloat16",
        "auto: the CPU multiplies bf16 matrices on AMX tiles, measured 1.7-1.9x faster than float32 for the "
        "SAC update at FastSAC's sizes (docs/performance.md)",
    )


@dataclass(frozen=True)
class ThreadDecision:
    threads: int
    learner_cpu_ids: list[int]  # empty: not pinned (it shares the collector's CPUs)
    collector_cpu_ids: list[int]
    reason: str


def _physical_cores(ctx: Context, block: list[int]) -> int:
    """Physical cores among `block`'s CPUs (each CPU its own core where the facts do not say)."""
    cores = ctx.facts.cpu.cores
    if cores is None:
        return len(block)
    return sum(1 for group in cores if set(group) & set(block))


def resolve_threads(ctx: Context, block: list[int], kind: str) -> ThreadDecision:
    """The rank's learner threads and CPU sets, from its CPU block."""
    t = ctx.spec.training
    workers = ctx.spec.sim.workers
    keep = workers if isinstance(workers, int) and backend_def(ctx.spec.sim).cpu_workers else 1
    if kind == "cuda":
        threads = 1 if t.torch_threads == "auto" else t.torch_threads
        why = "a GPU learner needs one thread to launch its kernels"
        # It keeps two CPUs (its launch thread, and CUDA's and NCCL's helper threads) where the
        # block has room for the physics workers beside them.
        k = min(2, len(block) - keep)
        if not algo_def(ctx.spec.algo).overlaps_collector or t.collector_cpu_ids is not None or k < 1:
            return ThreadDecision(threads, [], block, why)
        return ThreadDecision(threads, block[:k], block[k:], why)
    half = max(1, len(block) // 2) if t.torch_threads == "auto" else t.torch_threads
    if not (d := algo_def(ctx.spec.algo)).overlaps_collector:
        return ThreadDecision(
            half, [], block, f"{d.title} updates between rollouts, while the physics workers wait: it shares their CPUs"
        )
    if t.collector_cpu_ids is not None:
        return ThreadDecision(
            half, [], block, "training.collector_cpu_ids is the user's layout: the learner is not pinned"
        )
    cores = _physical_cores(ctx, block)
    widest = _widest_layer(ctx)
    if t.torch_threads != "auto":
        threads, why = t.torch_threads, f"training.torch_threads = {t.torch_threads}"
    elif widest < AUTO_BF16_MIN_WIDTH:
        threads = 1
        why = (
            f"one: at hidden layers of {widest} and less, splitting each operation costs more than it saves "
            "(the check task's 64x64 SAC ran 150 updates/s on one thread, 130 on two)"
        )
    elif not ctx.facts.cpu.has("amx_bf16") and widest < WHOLE_BLOCK_MIN_WIDTH:
        threads = half
        why = (
            f"half the rank's CPUs: without AMX, at hidden layers under {WHOLE_BLOCK_MIN_WIDTH} a learner on CPUs of "
            "its own ran faster end to end than one on the whole block while the collector waits (256x256 SAC, "
            "2 updates per vector step, AVX2 EPYC: 1,499 against 1,363 env steps/s; docs/performance.md)"
        )
    else:
        threads = cores
        measured = (
            "this layout ran 1.7x the env steps/s of one thread on a CPU apart with AMX"
            if ctx.facts.cpu.has("amx_bf16")
            else f"at hidden layers of {WHOLE_BLOCK_MIN_WIDTH} and more this layout ran 1.52x the env steps/s of "
            "one thread on a CPU apart on an AVX2 EPYC"
        )
        why = (
            f"one per physical core of the rank's {len(block)} CPUs ({cores}), used while the collector waits "
            f"for its action: a wide off-policy learner bounds most runs, and {measured} (docs/performance.md)"
        )
    if threads <= len(block) - keep:
        # CPUs of its own: the physics workers keep the rest of the block.
        return ThreadDecision(threads, block[:threads], block[threads:], f"{why}; CPUs apart from the collector's")
    # More threads than CPUs apart: the learner shares the collector's, using them only while the
    # collector waits (unilab.run.offpolicy.LearnerThreads), so a collector-bound run keeps its pace.
    return ThreadDecision(
        threads,
        block,
        block[len(block) - keep :] if keep < len(block) else block,
        f"{why}; on the whole block, the collector's CPUs only while the collector waits",
    )
