"""One `unilab profile`: run the arms interleaved, attribute their windows, take the host-sync
inventory, and write profile.json, profile.md and profile.png into the profile directory."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.algos.registry import algo_def
from unilab.atomic import write_text_atomic
from unilab.errors import UnilabError
from unilab.host import probe
from unilab.plan.compile import compile_plan
from unilab.plan.models import Plan
from unilab.profile.arms import RESERVED_KEYS, Arm, schedule
from unilab.profile.attribution import COVERAGE_TOLERANCE, GRAPH_THRESHOLD, arm_result, verdict
from unilab.profile.models import ArmRun, HostSyncInventory, Profile, ProfileProvenance
from unilab.profile.report import render_markdown, render_png, require_matplotlib
from unilab.profile.runner import Windows, apply_command, place_windows, run_apply_subprocess, window_sample
from unilab.records.run_dir import RunDir
from unilab.sim.backends import backend_def
from unilab.spec.load import load_spec

if TYPE_CHECKING:
    from unilab.host.facts import HostFacts


@dataclass(frozen=True)
class ProfileRequest:
    spec: Path
    arms: list[Arm]
    base_sets: list[str] = field(default_factory=list)
    repeats: int = 2
    warmup_env_steps: int = 4096
    window_env_steps: int = 4096
    host_sync_steps: int = 128
    threshold: float = GRAPH_THRESHOLD
    out_dir: Path | None = None
    run_timeout_s: float = 600.0
    command: list[str] = field(default_factory=list)
    default_arms: bool = False  # the arms are the defaults (no --arm): a refusal must not blame an --arm


@dataclass(frozen=True)
class ProfileOutput:
    directory: Path
    profile: Profile


def new_profile_dir(output_dir: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = output_dir / f"profile-{stamp}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}.{i}")
    return path


def _load(spec: Path, sets: list[str]):
    return load_spec(spec, sets)


def collector_device(spec) -> str:
    """The torch device a profiled spec's collector runs on: the CPU for CPU MuJoCo physics or when
    every `training.devices` entry is "cpu" (a CPU data-parallel spec lists it once per rank; the
    plan refuses mixing), else the first visible GPU. As ``Plan.collector_device`` decides for a run."""
    cpu = not backend_def(spec.sim).cuda or all(d == "cpu" for d in spec.device_list())
    return "cpu" if cpu else "cuda:0"


def _steps_per_sync(spec) -> int:
    """Env steps one sync adds to `run.total_env_steps`: every env of every rank (a data-parallel
    rank runs its share, so the windows, placed in syncs, are per rank)."""
    return spec.task.num_envs * spec.training.env_steps_per_sync * len(spec.device_list())


def run_profile(req: ProfileRequest, say=print) -> ProfileOutput:
    _refuse_request(req)
    spec_path = req.spec.resolve()
    base = _load(spec_path, req.base_sets)
    spec = base.spec
    # PPO checkpoints (and so the warm-up boundary) fall between rollouts of num_steps_per_env syncs.
    d = algo_def(spec.algo)
    iteration_syncs = d.syncs_per_unit(spec.algo)
    windows = place_windows(_steps_per_sync(spec), req.warmup_env_steps, req.window_env_steps, iteration_syncs)
    # Off-policy learners start updating after algo.warmup_env_steps: make that the profile's
    # warm-up, so the measured window has updates throughout (unless the caller set it).
    algo_warmup = d.uses_replay and not any(
        s.split("=", 1)[0].strip() == "algo.warmup_env_steps" for s in req.base_sets
    )

    facts = probe.probe_host()
    arm_windows, arm_plans = _plan_arms(req, spec_path, windows, facts)

    out = req.out_dir or new_profile_dir(Path(spec.run.output_dir).expanduser())
    out.mkdir(parents=True, exist_ok=False)
    order = schedule(req.arms, req.repeats)
    say(
        f"profile {out}: {len(req.arms)} arms x {req.repeats} repeats, warm-up {windows.warmup_syncs} syncs, "
        f"window {windows.window_syncs} syncs"
    )
    runs, workers = _run_arms(req, spec_path, out, order, arm_windows, algo_warmup, say)

    device = collector_device(spec)
    host_sync, arm_inventories = _take_inventories(req, spec, base.spec_dir, order, arm_plans, device, say)
    arms = [arm_result(a, runs[a.name], workers[a.name], COVERAGE_TOLERANCE, arm_inventories[a.name]) for a in req.arms]

    prov = _provenance(req, spec, facts, windows, order, runs)
    profile = Profile(
        profile_id=out.name,
        created_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        coverage_tolerance=COVERAGE_TOLERANCE,
        provenance=prov,
        arms=arms,
        host_sync=host_sync,
        verdict=verdict(arms, device, req.threshold),
    )
    write_outputs(profile, out)
    return ProfileOutput(out, profile)


def _refuse_request(req: ProfileRequest) -> None:
    """Refuse what the profile cannot honour before the spec is loaded or anything runs."""
    if req.repeats < 1:
        raise UnilabError("--repeats must be at least 1", fix="e.g. --repeats 2")
    if len(req.arms) < 1:
        raise UnilabError(
            "a profile needs at least one arm", fix="pass --arm NAME:KEY=VALUE, or no --arm for the defaults"
        )

    require_matplotlib()
    for s in req.base_sets:  # the profile sets these itself, after every --set: refuse, never drop
        key = s.split("=", 1)[0].strip()
        if key in RESERVED_KEYS or key == "run":
            raise UnilabError(
                f"--set {s!r}: {key} is set by the profile itself",
                detail="the profile places the warm-up and measured windows and each run's directory",
                fix="use --warmup / --window for the run length and --out for where it goes; drop that --set",
            )


def _plan_arms(
    req: ProfileRequest, spec_path: Path, windows: Windows, facts: HostFacts
) -> tuple[dict[str, Windows], dict[str, tuple[Plan, Path]]]:
    """Each arm's windows (the profile's syncs, in the arm's own env steps per sync) and its plan for
    this host, with the spec dir its inventory's collector is built from."""

    arm_windows: dict[str, Windows] = {}
    arm_plans: dict[str, tuple[Plan, Path]] = {}
    for arm in req.arms:  # every arm is planned for this host before anything runs: refusals come first
        try:
            loaded = _load(spec_path, [*req.base_sets, *arm.set_args()])
            arm_plans[arm.name] = (compile_plan(loaded.spec, facts, loaded.spec_dir), loaded.spec_dir)
        except UnilabError as exc:  # its fixes speak of --set: say that the arm's pairs are ones
            if req.default_arms:  # (a PlanRefused shows its rules' fixes, so the way out goes here)
                names = " vs ".join(a.name for a in req.arms)
                exc.summary = (
                    f"the default comparison ({names}) cannot run on this host; choose what to compare with "
                    f"--arm NAME:KEY=VALUE (docs/profile.md). Arm {arm.name}: {exc.summary}"
                )
            else:
                exc.summary = f"--arm {arm.name} (its KEY=VALUE pairs are applied as --set): {exc.summary}"
            raise
        arm_spec = loaded.spec
        arm_windows[arm.name] = Windows(_steps_per_sync(arm_spec), windows.warmup_syncs, windows.window_syncs)
    return arm_windows, arm_plans


def _run_arms(
    req: ProfileRequest,
    spec_path: Path,
    out: Path,
    order: list[tuple[Arm, int]],
    arm_windows: dict[str, Windows],
    algo_warmup: bool,
    say,
) -> tuple[dict[str, list[ArmRun]], dict[str, int | None]]:
    """Run every (arm, repeat) in the interleaved ``order`` as its own `unilab apply`: the runs of
    each arm, and the physics workers its rank 0 used (None when its manifest has no ranks)."""
    try:
        runs: dict[str, list[ArmRun]] = {a.name: [] for a in req.arms}
        workers: dict[str, int | None] = {}
        for i, (arm, r) in enumerate(order):
            run_out = out / "arms" / f"{arm.name}-r{r}"
            cmd = apply_command(spec_path, arm, req.base_sets, arm_windows[arm.name], run_out, algo_warmup)
            say(f"  [{i + 1}/{len(order)}] arm {arm.name} repeat {r} ...", end="", flush=True)
            outcome = run_apply_subprocess(cmd, run_out, req.run_timeout_s, run_out.with_name(run_out.name + ".log"))
            sample = window_sample(outcome.warmup, outcome.final, outcome.window_s)
            workers[arm.name] = outcome.final.ranks[0].physics_workers if outcome.final.ranks else None
            runs[arm.name].append(
                ArmRun(
                    repeat=r,
                    order=i,
                    command=cmd,
                    run_dir=str(outcome.run_dir),
                    manifest=str(RunDir(outcome.run_dir).manifest),
                    exit_code=outcome.exit_code,
                    window=sample,
                )
            )
            say(f" {sample.iteration_us / 1e3:.1f} ms/sync, coverage {100 * sample.coverage:.1f}%")
    except BaseException:
        # The runs so far stay (each a complete run directory); the profile itself was not made.
        print(f"profile stopped before it finished: {out} holds its runs so far, no profile.json", file=sys.stderr)
        raise
    return runs, workers


def _take_inventories(
    req: ProfileRequest,
    spec,
    spec_dir: Path,
    order: list[tuple[Arm, int]],
    arm_plans: dict[str, tuple[Plan, Path]],
    device: str,
    say,
) -> tuple[HostSyncInventory | None, dict[str, list[HostSyncInventory]]]:
    """The base spec's host-sync inventory and each arm's, or none of them with --host-sync-steps 0."""
    host_sync = None
    arm_inventories: dict[str, list[HostSyncInventory]] = {a.name: [] for a in req.arms}
    if req.host_sync_steps > 0:
        say(f"  host-sync inventory over {req.host_sync_steps} collector steps ...", flush=True)
        host_sync = take_inventory(spec, spec_dir, req.host_sync_steps, device)
        # Per arm, the collector its runs used (the arm's plan), once per repeat with its own seed, in
        # the interleaved order: the per-phase allocation, copy and sync counts get a spread per arm.
        say(f"  per-arm inventories ({len(order)} x {req.host_sync_steps} steps) ...", flush=True)
        for arm, r in order:
            plan, arm_spec_dir = arm_plans[arm.name]
            arm_inventories[arm.name].append(take_plan_inventory(plan, arm_spec_dir, req.host_sync_steps, r))
    return host_sync, arm_inventories


def _provenance(
    req: ProfileRequest,
    spec,
    facts: HostFacts,
    windows: Windows,
    order: list[tuple[Arm, int]],
    runs: dict[str, list[ArmRun]],
) -> ProfileProvenance:
    """What the profile measured and how: the host, the spec and its overrides, the windows and the schedule."""
    from unilab.records.manifest_io import provenance

    return ProfileProvenance(
        host=provenance(facts),
        spec=str(req.spec),
        task=spec.task.name,
        algo=spec.algo.name,
        physics=spec.sim.backend,
        num_envs=spec.task.num_envs,
        decimation=spec.sim.decimation,
        env_steps_per_sync=spec.training.env_steps_per_sync,
        command=req.command,
        base_overrides=list(req.base_sets),
        warmup_env_steps=windows.warmup_env_steps,
        window_env_steps=windows.window_env_steps,
        warmup_syncs=windows.warmup_syncs,
        window_syncs=windows.window_syncs,
        repeats=req.repeats,
        schedule=[a.name for a, _ in order],
        manifests={a.name: [r.manifest for r in runs[a.name]] for a in req.arms},
    )


def take_inventory(spec, spec_dir: Path, steps: int, device: str) -> HostSyncInventory:
    from unilab.collect.build import build_collector
    from unilab.profile.host_sync import inventory

    collector = build_collector(spec.task, spec.sim, spec_dir=spec_dir, device=device, seed=spec.run.seed)
    with collector:
        return inventory(collector, steps, seed=spec.run.seed)


def take_plan_inventory(plan: Plan, spec_dir: Path, steps: int, repeat: int) -> HostSyncInventory:
    """The inventory of rank 0's collector built as `unilab apply` builds it from ``plan``."""
    from unilab.collect.build import build_collector
    from unilab.profile.host_sync import inventory

    rp = plan.ranks[0]
    collector = build_collector(
        plan.task,
        plan.sim,
        spec_dir=spec_dir,
        num_envs=plan.task.num_envs,
        workers=plan.sim.workers_per_rank,
        cpu_ids=list(rp.collector_cpu_ids) or None,  # pinned physics workers, as in the run
        device=plan.collector_device(0),
        physics_graph=plan.graphs.physics.enabled,
        seed=rp.seed + repeat,
    )
    with collector:
        return inventory(collector, steps, seed=rp.seed + repeat)


def write_outputs(profile: Profile, out: Path) -> None:

    write_text_atomic(out / "profile.json", json.dumps(profile.model_dump(mode="json"), indent=2) + "\n", "profile")
    write_text_atomic(out / "profile.md", render_markdown(profile), "profile report")
    render_png(profile, out / "profile.png")
