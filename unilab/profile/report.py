"""profile.md (the tables) and profile.png (phase time per arm) from a Profile."""

from __future__ import annotations

from pathlib import Path

from unilab.profile.models import ArmResult, Profile, Spread


def _fmt(s: Spread, scale: float = 1.0, digits: int = 1) -> str:
    return f"{s.median * scale:,.{digits}f} ({s.min * scale:,.{digits}f}-{s.max * scale:,.{digits}f})"


def phase_rows(arm: ArmResult) -> list[tuple[str, Spread]]:
    """Every attributed phase of one sync, in microseconds: the collector's lifecycle phases, its
    wait for actions, and the learner's update and wait."""
    rows = [(f"collector.{p}", s) for p, s in arm.collector_phases_us.items()]
    rows += [
        ("collector.wait_for_action", arm.collector_wait_us),
        ("learner.update (per sync)", arm.learner_update_us_per_sync),
        ("learner.wait_for_obs", arm.learner_wait_us),
    ]
    return rows


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
        f"mujoco {pv.host.mujoco}; unilab {pv.host.unilab} (commit {pv.host.git_commit}).",
        "",
        "Command: `" + " ".join(pv.command) + "`",
        "",
        "## Phase time per sync (microseconds: median (min-max) over repeats)",
        "",
        "| phase | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    per_arm = [dict(phase_rows(a)) for a in p.arms]
    for key in per_arm[0]:
        out.append(f"| {key} | " + " | ".join(_fmt(r[key]) for r in per_arm) + " |")
    out += [
        "| **collector phase sum** | " + " | ".join(_fmt(a.collector_phase_sum_us) for a in p.arms) + " |",
        "| **iteration (window wall / sync)** | " + " | ".join(_fmt(a.iteration_us) for a in p.arms) + " |",
        "",
        "## Summary",
        "",
        "| arm | overrides | learner update ms | coverage | reconciles (within "
        f"{100 * p.coverage_tolerance:.0f}%) | non-physics share |",
        "|---|---|---:|---:|---|---:|",
    ]
    for a in p.arms:
        ov = ", ".join(f"{k}={v}" for k, v in a.overrides.items()) or "(none)"
        out.append(
            f"| {a.name} | `{ov}` | {_fmt(a.learner_update_ms, digits=2)} | {_fmt(a.coverage, 100)}% | "
            f"{'yes' if a.reconciles else 'NO'} | {_fmt(a.non_physics_share, 100)}% |"
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
    out += ["", "## Verdict", "", p.verdict.line, ""]
    return "\n".join(out)


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
