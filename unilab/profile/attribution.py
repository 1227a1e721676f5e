"""Per-arm statistics over repeats (median and range; arms never pooled), the reconciliation of
phase sums against iteration time, and the go/no-go verdict for an update-state graph."""

from __future__ import annotations

import statistics

from unilab.profile.arms import Arm
from unilab.profile.models import ArmResult, ArmRun, HostSyncInventory, PhaseOps, Spread, Verdict

COVERAGE_TOLERANCE = 0.10
GRAPH_THRESHOLD = 0.15  # non-physics share of the collector above which an update-state graph is worth building


def spread(samples: list[float]) -> Spread:
    return Spread(median=statistics.median(samples), min=min(samples), max=max(samples), samples=samples)


def phase_ops_spread(inventories: list[HostSyncInventory]) -> dict[str, dict[str, Spread]] | None:
    """Phase -> counter -> spread over an arm's inventory runs; None without any."""
    if not inventories:
        return None
    counters = list(PhaseOps.model_fields)
    return {
        phase: {c: spread([getattr(inv.phase_ops[phase], c) for inv in inventories]) for c in counters}
        for phase in inventories[0].phase_ops
    }


def arm_result(
    arm: Arm,
    runs: list[ArmRun],
    physics_workers: int | None,
    tolerance: float,
    inventories: list[HostSyncInventory] | None = None,
) -> ArmResult:
    w = [r.window for r in runs]
    phases = list(w[0].collector_phases_us)
    cpu_phases = [p for p in phases if all(p in s.collector_phases_cpu_us for s in w)]
    return ArmResult(
        name=arm.name,
        overrides=dict(arm.overrides),
        physics_workers=physics_workers,
        runs=runs,
        collector_phases_us={p: spread([s.collector_phases_us[p] for s in w]) for p in phases},
        collector_phases_cpu_us={p: spread([s.collector_phases_cpu_us[p] for s in w]) for p in cpu_phases},
        collector_wait_us=spread([s.collector_wait_us for s in w]),
        learner_sample_ms=spread([s.learner_sample_ms for s in w]),
        learner_sample_us_per_sync=spread([s.learner_sample_us_per_sync for s in w]),
        learner_update_ms=spread([s.learner_update_ms for s in w]),
        learner_update_us_per_sync=spread([s.learner_update_us_per_sync for s in w]),
        learner_grad_sync_us_per_sync=spread([s.learner_grad_sync_us_per_sync for s in w]),
        learner_wait_us=spread([s.learner_wait_us for s in w]),
        iteration_us=spread([s.iteration_us for s in w]),
        collector_phase_sum_us=spread([s.collector_phase_sum_us for s in w]),
        coverage=spread([s.coverage for s in w]),
        non_physics_share=spread([s.non_physics_share for s in w]),
        reconciles=all(abs(s.coverage - 1.0) <= tolerance for s in w),
        collector_phase_ops=phase_ops_spread(inventories or []),
    )


def verdict(arms: list[ArmResult], device: str, threshold: float = GRAPH_THRESHOLD) -> Verdict:
    """Judged on the first arm (the baseline); the others are in the tables."""
    base = arms[0]
    share = base.non_physics_share.median
    go = share >= threshold
    where = (
        ""
        if device.startswith("cuda")
        else " (measured on CPU MuJoCo: an update-state CUDA graph needs a CUDA collector; indicative only)"
    )
    line = (
        f"{'GO' if go else 'NO-GO'}: the collector's non-physics share is {100 * share:.1f}% "
        f"(arm {base.name}, median of {len(base.runs)}; range {100 * base.non_physics_share.min:.1f}-"
        f"{100 * base.non_physics_share.max:.1f}%), {'at or above' if go else 'below'} the "
        f"{100 * threshold:.0f}% threshold for an update-state graph{where}"
    )
    return Verdict(basis_arm=base.name, non_physics_share=share, threshold=threshold, go=go, line=line)
