"""profile.md (the tables) and profile.png (phase time per arm) from a Profile."""

from __future__ import annotations

import shlex
from pathlib import Path

from unilab.extras import require
from unilab.profile.models import ArmResult, Profile, Spread


def _fmt(s: Spread, scale: float = 1.0, digits: int = 1) -> str:
    return f"{s.median * scale:,.{digits}f} ({s.min * scale:,.{digits}f}-{s.max * scale:,.{digits}f})"


OPS_COLUMNS = (  # (PhaseOps field, column label, scale)
    ("allocations", "allocs", 1),
    ("allocated_bytes", "KiB", 1 / 1024),
    ("host_to_device_copies", "H2D", 1),
    ("device_to_host_copies", "D2H", 1),
    ("host_reads", "host reads", 1),
    ("device_syncs", "device syncs", 1),
    ("cuda_sync_warnings", "CUDA sync warnings", 1),
    ("device_synced_us", "us, device synced", 1),
)


def phase_rows(arm: ArmResult) -> list[tuple[str, Spread]]:
    """Every attributed phase of one sync, in microseconds: the collector's lifecycle phases, its
    wait for actions, and the learner's sample, update (of which data-parallel sync) and wait."""
    rows = [(f"collector.{p}", s) for p, s in arm.collector_phases_us.items()]
    rows += [
        ("collector.wait_for_action", arm.collector_wait_us),
        ("learner.sample (per sync)", arm.learner_sample_us_per_sync),
        ("learner.update (per sync)", arm.learner_update_us_per_sync),
        ("learner.sync (per sync, in update)", arm.learner_grad_sync_us_per_sync),
        ("learner.wait_for_obs", arm.learner_wait_us),
    ]
    return rows


def cpu_rows(arm: ArmResult) -> dict[str, Spread]:
    """The collector thread's CPU time per sync, keyed like ``phase_rows``."""
    return {f"collector.{p}": s for p, s in arm.collector_phases_cpu_us.items()}


def render_markdown(p: Profile) -> str:
    pv = p.provenance
    names = [a.name for a in p.arms]
    out = [
        f"# unilab profile {p.profile_id}",
        "",
        f"Spec `{pv.spec}`: task {pv.task}, algo {pv.algo}, physics {pv.physics}, {pv.num_envs} envs, "
        f"decimation {pv.decimation}, K = {pv.env_steps_per_sync}. Warm-up {pv.warmup_env_steps:,} env steps "
        f"({pv.warmup_syncs} syncs), measured window {pv.window_env_steps:,} env steps ({pv.window_syncs} syncs), "
        f"{pv.repeats} repeats per arm, interleaved: {' '.join(pv.schedule)}.",
        "",
        f"Host: {pv.host.cpu}; {pv.host.os}; python {pv.host.python}; torch {pv.host.torch}; "
        f"mujoco {pv.host.mujoco}; unilab {pv.host.unilab} "
        f"(commit {pv.host.git_commit}{', modified' if pv.host.git_dirty else ''}).",
        "",
        "Command: `" + shlex.join(pv.command) + "`",  # quoted: it can be pasted back into a shell
        "",
        "## Phase time per sync (microseconds: median (min-max) over repeats)",
        "",
        "Wall: wall-clock time. CPU: the collector thread's CPU time (physics worker processes and device "
        "work are not in it; wall minus CPU is time the thread waited).",
        "",
        "| phase | " + " | ".join(f"{n} wall | {n} CPU" for n in names) + " |",
        "|---|" + "---:|---:|" * len(names),
    ]
    per_arm = [dict(phase_rows(a)) for a in p.arms]
    per_arm_cpu = [cpu_rows(a) for a in p.arms]
    for key in per_arm[0]:
        cells = [
            f"{_fmt(r[key])} | {_fmt(c[key]) if key in c else '-'}" for r, c in zip(per_arm, per_arm_cpu, strict=True)
        ]
        out.append(f"| {key} | " + " | ".join(cells) + " |")
    out += [
        "| **collector phase sum** | " + " | ".join(f"{_fmt(a.collector_phase_sum_us)} | " for a in p.arms) + " |",
        "| **iteration (window wall / sync)** | " + " | ".join(f"{_fmt(a.iteration_us)} | " for a in p.arms) + " |",
        "",
        "## Summary",
        "",
        "| arm | overrides | learner sample ms | learner update ms | coverage | reconciles (within "
        f"{100 * p.coverage_tolerance:.0f}%) | non-physics share |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for a in p.arms:
        ov = ", ".join(f"{k}={v}" for k, v in a.overrides.items()) or "(none)"
        out.append(
            f"| {a.name} | `{ov}` | {_fmt(a.learner_sample_ms, digits=2)} | {_fmt(a.learner_update_ms, digits=2)} | "
            f"{_fmt(a.coverage, 100)}% | {'yes' if a.reconciles else 'NO'} | {_fmt(a.non_physics_share, 100)}% |"
        )
    out += [
        "",
        "Coverage = (collector phase sum + collector wait for actions) / window wall time per sync; the "
        "window runs from the manifest written at the end of warm-up to the loop's last iteration event.",
        "",
        "## Runs",
        "",
        "| order | arm | repeat | manifest |",
        "|---:|---|---:|---|",
    ]
    for name, r in sorted(((a.name, r) for a in p.arms for r in a.runs), key=lambda x: x[1].order):
        out.append(f"| {r.order} | {name} | {r.repeat} | `{r.manifest}` |")
    if p.host_sync is not None:
        hs = p.host_sync
        out += [
            "",
            f"## Host-sync inventory ({hs.steps} collector steps, {hs.num_envs} envs, {hs.device})",
            "",
            f"Method: {hs.method}.",
            "",
            "| owner | via unilab | kind | op | calls/iter | shape | device | phase | in capture | disposition |",
            "|---|---|---|---|---:|---|---|---|---|---|",
        ]
        for r in hs.rows:
            out.append(
                f"| `{r.owner_file}:{r.owner_line}` {r.owner_function} | {r.unilab_owner or ''} | {r.kind} | {r.op} "
                f"| {r.calls_per_iteration:.2f} | {' '.join(r.shapes)} | {r.device} | {r.phase or 'outside step'} "
                f"| {'yes' if r.inside_capture else 'no'} | {r.disposition} |"
            )
        if not hs.rows:
            out.append("| (no host reads) | | | | | | | | | |")
    out += ops_tables(p)
    out += ["", "## Verdict", "", p.verdict.line, ""]
    return "\n".join(out)


def ops_tables(p: Profile) -> list[str]:
    """Per arm: allocations, host-device copies and syncs of every collector phase, per iteration."""
    out: list[str] = []
    for a in p.arms:
        if not a.collector_phase_ops:
            continue
        n = len(next(iter(next(iter(a.collector_phase_ops.values())).values())).samples)
        out += [
            "",
            f"## Allocations, copies and syncs per collector step: arm {a.name}",
            "",
            f"In-process inventory of the arm's collector ({n} runs, one per repeat, own seed each); per step, "
            "median (min-max) over the runs. Device syncs: host reads of a non-CPU tensor.",
            "",
            "| phase | " + " | ".join(label for _, label, _ in OPS_COLUMNS) + " |",
            "|---|" + "---:|" * len(OPS_COLUMNS),
        ]
        for phase, counts in a.collector_phase_ops.items():
            cells = [
                _fmt(counts[key], scale, digits=1 if key == "allocated_bytes" else 2) for key, _, scale in OPS_COLUMNS
            ]
            out.append(f"| {phase} | " + " | ".join(cells) + " |")
    return out


def require_matplotlib() -> None:
    """profile.png needs matplotlib: check before the arms run, not after minutes of runs."""
    require("matplotlib", "profile", "`unilab profile` (it writes profile.png)")


def render_png(p: Profile, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_arm = [phase_rows(a) for a in p.arms]
    keys = [k for k, _ in per_arm[0]]
    n = len(p.arms)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(keys) + 1.5))
    for j, (arm, rows) in enumerate(zip(p.arms, per_arm, strict=True)):
        med = [max(s.median, 1e-3) for _, s in rows]
        lo = [m - max(s.min, 1e-3) for m, (_, s) in zip(med, rows, strict=True)]
        hi = [max(s.max, 1e-3) - m for m, (_, s) in zip(med, rows, strict=True)]
        ys = [i + (j - (n - 1) / 2) * height for i in range(len(keys))]
        ax.barh(ys, med, height=height, xerr=[lo, hi], label=arm.name, capsize=2)
    ax.set_yticks(range(len(keys)), keys)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("microseconds per sync (median; bars: min-max over repeats)")
    ax.set_title(f"unilab profile {p.profile_id}: phase time per arm")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
