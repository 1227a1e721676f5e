"""What a manifest's schema cannot say: its fields agree with each other and with its run directory.

The schema pins each field's form; a manifest that proves what ran must also be coherent (a failed
run names its first error, a finished one has a finish time, counters and checkpoints agree) and,
next to its run directory, match the plan it ran and the checkpoint bytes it lists. The runtime
writes manifests that pass these checks; `unilab manifest validate` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from unilab import __version__
from unilab.digests import file_sha256
from unilab.errors import UnilabError
from unilab.manifest.models import Manifest
from unilab.plan.render import load_plan
from unilab.run_layout import CHECKPOINTS, EVENTS, MANIFEST, PLAN, RunLayout


@dataclass
class ConsistencyReport:
    problems: list[str] = field(default_factory=list)
    run_dir_checked: bool = False  # the manifest sat in its run directory (manifest.json)
    plan_checked: bool = False
    checkpoints_verified: int = 0


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _non_finite(node: object, where: str) -> list[tuple[str, float]]:
    """(key path, value) of every NaN or infinity: Python's json reads them, JSON has no such numbers."""
    if isinstance(node, float):
        return [] if math.isfinite(node) else [(where, node)]
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _non_finite(v, f"{where}.{k}" if where else str(k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _non_finite(v, f"{where}[{i}]")]
    return []


def check_fields(m: Manifest) -> list[str]:
    """Contradictions between the manifest's own fields."""
    out = []
    if m.status == "failed" and m.first_error is None:
        out.append("status is failed but first_error is missing (a failed run names what failed first)")
    if m.status != "failed" and m.first_error is not None:
        out.append(f"status is {m.status} but first_error is set ({m.first_error.where})")
    if m.status == "running" and m.finished_at is not None:
        out.append("status is running but finished_at is set")
    if m.status != "running" and m.finished_at is None:
        out.append(f"status is {m.status} but finished_at is missing")
    try:
        started, updated = _time(m.started_at), _time(m.updated_at)
        finished = _time(m.finished_at) if m.finished_at is not None else None
    except ValueError as exc:  # the schema checks the form (digits), not the calendar (month 13)
        out.append(f"a time stamp is not a valid date and time: {exc}")
    else:
        if updated < started:
            out.append(f"updated_at {m.updated_at} is before started_at {m.started_at}")
        if finished is not None and finished < started:
            out.append(f"finished_at {m.finished_at} is before started_at {m.started_at}")
    if m.sessions and m.sessions[-1].ended != m.status:
        out.append(f"the last session ended {m.sessions[-1].ended} but status is {m.status} (it is this apply's)")
    earlier = [i for i, s in enumerate(m.sessions[:-1]) if s.ended == "running"]
    if earlier:
        out.append(f"session {earlier[0]} still says running, but a later apply ran (a resume records it as killed)")
    if m.timing.train_s > m.timing.wall_s:
        out.append(f"timing.train_s {m.timing.train_s:.1f} exceeds the session's wall_s {m.timing.wall_s:.1f}")
    w = m.topology.world_size
    ids = [r.rank for r in m.ranks]
    # Every rank's evidence is gathered before the first "running" manifest; a run that failed while
    # gathering it (an MPS client check, a peer that never answered) records none.
    if sorted(ids) != list(range(w)) and not (ids == [] and m.status == "failed"):
        out.append(f"ranks {ids} are not the {w} rank(s) of topology.world_size {w}, each once")
    if m.data_parallel is not None and m.data_parallel.world_size != w:
        out.append(f"data_parallel.world_size {m.data_parallel.world_size} is not topology.world_size {w}")
    out += [f"{where} is {value} (not a finite number)" for where, value in _non_finite(m.model_dump(), "")]
    if m.status == "succeeded" and m.counters.dropped_transitions != 0:
        out.append(f"a succeeded run dropped {m.counters.dropped_transitions} transitions (the invariant is 0)")
    steps = [c.env_steps for c in m.checkpoints]
    if steps != sorted(set(steps)):
        out.append(f"checkpoint env steps {steps} are not increasing")
    if steps and steps[-1] > m.counters.env_steps:
        out.append(f"checkpoint at {steps[-1]} env steps is past counters.env_steps {m.counters.env_steps}")
    return out


def _older_unilabs_plan_id(plan: Path) -> str | None:
    """The plan_id of a plan another unilab version wrote (whose fields this one may not read or
    hash alike): only its id can be compared. None for this version's plans and unreadable files."""
    import tomllib

    try:
        data = tomllib.loads(plan.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    version = data.get("plan", {}).get("unilab_version") if isinstance(data.get("plan"), dict) else None
    plan_id = data.get("plan_id")
    if version is None or version == __version__ or not isinstance(plan_id, str):
        return None
    return plan_id


def check_run_dir(m: Manifest, run_dir: Path, report: ConsistencyReport) -> None:
    """The run directory's plan.toml is the plan the manifest names; listed checkpoints hold the
    bytes it recorded. A run killed mid-checkpoint may list one that pruning removed: a missing
    file counts only once the run has finished."""

    plan = RunLayout(run_dir).plan
    if not plan.is_file():
        report.problems.append(f"{plan} is missing: a run directory keeps the plan it ran")
    else:
        try:
            plan_id = load_plan(plan).plan_id  # also: its content still hashes to its plan_id
        except UnilabError as exc:
            plan_id = _older_unilabs_plan_id(plan)
            if plan_id is None:
                report.problems.append(exc.summary)
        if plan_id is not None:
            report.plan_checked = True
            if plan_id != m.plan_id:
                report.problems.append(f"{plan} has plan_id {plan_id!r}, the manifest {m.plan_id!r}")
    _check_code_diff(m, run_dir, report)
    for c in m.checkpoints:
        path = run_dir / c.path
        if not path.resolve().is_relative_to(run_dir.resolve()):
            report.problems.append(f"checkpoint {c.path} is outside the run directory")
            continue
        if not path.is_file():
            if m.status != "running":
                report.problems.append(f"checkpoint {c.path} is listed but not in {run_dir}")
            continue
        try:
            digest = file_sha256(path)
        except OSError as exc:
            report.problems.append(f"checkpoint {c.path} cannot be read: {exc.strerror}")
            continue
        if digest != c.sha256:
            report.problems.append(f"checkpoint {c.path} does not have the recorded sha256 (changed after the run)")
        else:
            report.checkpoints_verified += 1


def _check_code_diff(m: Manifest, run_dir: Path, report: ConsistencyReport) -> None:
    """The patch of a dirty checkout is the one the run recorded."""
    name = m.provenance.git_diff
    if name is None:
        return
    path = run_dir / name
    if not path.resolve().is_relative_to(run_dir.resolve()):
        report.problems.append(f"provenance.git_diff {name} is outside the run directory")
    elif not path.is_file():
        report.problems.append(f"provenance.git_diff {name} is recorded but not in {run_dir}")
    elif "sha256:" + file_sha256(path) != m.provenance.git_diff_sha256:
        report.problems.append(f"{name} does not have the recorded sha256 (changed after the run)")


def check_manifest(m: Manifest, path: Path) -> ConsistencyReport:
    report = ConsistencyReport(problems=check_fields(m))
    run_dir = path.parent
    in_run_dir = path.name == MANIFEST and any((run_dir / name).exists() for name in (PLAN, EVENTS, CHECKPOINTS))
    if in_run_dir:  # check the files it names too (a manifest copied out alone has none beside it)
        report.run_dir_checked = True
        check_run_dir(m, path.parent, report)
    return report
