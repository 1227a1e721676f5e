"""`unilab apply`, `unilab manifest validate`, `unilab export`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.cli.args import add_run_dir_arg, path_arg
from unilab.errors import UnilabError

if TYPE_CHECKING:
    from unilab.host.facts import HostFacts
    from unilab.plan.models import Plan


def _resolve(
    target: Path, overrides: list[str], resume_dir: Path | None = None, replan: bool = False
) -> tuple[Plan, str | None]:
    """A spec is planned against this host; a saved plan is re-checked against it (stale-plan refusal).
    `resume_dir`: the plan is that run's own, re-planned for this host only with `replan` (then the
    second value is the run's plan id the new plan continues; else None)."""
    from unilab.cli.common import reading
    from unilab.host.probe import probe_host
    from unilab.plan.diff import first_of
    from unilab.plan.fingerprint import compare_fingerprint
    from unilab.plan.render import is_plan_file, load_plan

    facts = probe_host()
    with reading(target, "spec or plan"):
        is_plan = target.is_file() and is_plan_file(target)
    if is_plan:
        if overrides:
            raise UnilabError(
                f"{target} is a saved plan; --set applies to specs only", fix="put the override on the spec and re-plan"
            )
        with reading(target, "plan"):
            plan = load_plan(target)
        changes = compare_fingerprint(plan.host_facts, facts)
        if changes:
            if resume_dir is not None and replan:
                # Compiled afresh from the plan's spec values: an edited derived value does not carry
                # over, and the checkpoint must still belong to this plan id (resolve_resume).
                return _replanned(plan, facts, resume_dir), plan.plan_id
            if resume_dir is not None:
                raise UnilabError(
                    f"run {resume_dir} was planned for other host facts: {first_of(changes)}",
                    detail="a run resumes with its own plan, on the host facts it was compiled against",
                    fix=f"continue it on this host with a plan re-made for it: unilab apply --resume {resume_dir} "
                    "--replan (refused if that would change what is trained); or restore what changed, or start "
                    "a new run: unilab apply SPEC",
                )
            raise UnilabError(
                f"the saved plan {target} is stale: {first_of(changes)}",
                detail="a plan is only valid on the host facts it was compiled against",
                fix="re-plan: unilab plan SPEC --out PLAN.toml (or apply the spec directly)",
            )
        from unilab.plan.inputs import check_init_from, check_planned_inputs
        from unilab.plan.recheck import recheck_saved_plan

        # The plan's files first: a changed or missing one is named as such, not as a plan that
        # no longer compiles to itself (apply checks them again just before it runs).
        check_planned_inputs(plan.task, Path.cwd(), resume_dir)
        if resume_dir is None:
            check_init_from(plan.run, Path.cwd())
        recheck_saved_plan(plan, facts, target)  # its id proves nothing: anyone can recompute it
        return plan, None
    from unilab.plan.compile import compile_plan
    from unilab.spec.load import load_spec

    with reading(target, "spec"):
        loaded = load_spec(target, overrides)
    return compile_plan(loaded.spec, facts, loaded.spec_dir), None


def _replanned(plan: Plan, facts: HostFacts, run_dir: Path) -> Plan:
    """The run's plan made again for this host; the changes are shown as `unilab diff` shows them."""
    from unilab.plan.replan import replan_for_resume

    new, changes = replan_for_resume(plan, facts, run_dir)
    print(
        f"re-planned {run_dir} for this host: {len(changes)} change{'s' if len(changes) != 1 else ''} to how it "
        "executes, none to what it trains",
        file=sys.stderr,
    )
    for c in changes:
        print(f"  {c.render()}", file=sys.stderr)
    return new


def _die_with_a_parent_that_asked() -> None:
    """`unilab profile` starts each run in a session of its own and asks it to die with the profile."""
    from unilab.lifetime import DIE_WITH_PARENT_ENV, die_with_parent

    parent = os.environ.pop(DIE_WITH_PARENT_ENV, None)  # popped: the run's own children die with it
    if parent is None:
        return
    if not parent.isdigit():
        raise UnilabError(f"{DIE_WITH_PARENT_ENV}={parent!r} is not a process id", fix=f"unset {DIE_WITH_PARENT_ENV}")
    die_with_parent(int(parent))


def cmd_apply(args: argparse.Namespace) -> int:
    from unilab.run.apply import ApplyRequest, run_apply

    _die_with_a_parent_that_asked()

    target = args.target
    if target is None:
        if args.resume is None:
            raise UnilabError(
                "apply needs a SPEC or a saved PLAN", fix="unilab apply specs/g1.toml (or --resume RUN_DIR)"
            )
        if args.set:
            raise UnilabError(
                "--resume continues the run's own plan; --set would make another plan",
                fix=f"drop --set to resume {args.resume}, or start a new run: unilab apply SPEC --set ...",
            )
        target = args.resume / "plan.toml"  # the run's own plan, re-checked against this host
        if not args.resume.is_dir():
            raise UnilabError(
                f"--resume {args.resume}: " + ("no such directory" if not args.resume.exists() else "not a directory"),
                fix="pass the run directory `unilab apply` printed at the end of the run",
            )
        if not target.is_file():
            raise UnilabError(
                f"{args.resume} is not a unilab run directory (no plan.toml)",
                fix="pass the directory `unilab apply` printed at the end of the run",
            )
    if args.replan and args.resume is None:
        raise UnilabError("--replan re-plans a run being resumed", fix="use it with --resume RUN_DIR, or drop it")
    plan, resumes_plan = _resolve(target, args.set, args.resume if args.target is None else None, args.replan)
    from unilab.run.stop import stop_signals_interrupt
    from unilab.run.terminal import terminal_may_go

    # A closed pipe or hung-up terminal must not end the training run; a SIGTERM before the run's
    # own stop handling is in place ends it as cleanly as a Ctrl-C.
    with terminal_may_go(), stop_signals_interrupt():
        return run_apply(
            ApplyRequest(plan=plan, resume_dir=args.resume, progress=not args.quiet, resumes_plan=resumes_plan)
        )


def cmd_manifest_validate(args: argparse.Namespace) -> int:
    from unilab.run.manifest_io import validate_manifest_file
    from unilab.run.run_lock import RESUME_KILLED_FIX, describe_killed, killed_session

    m, report = validate_manifest_file(args.file)
    shown = args.file / "manifest.json" if args.file.is_dir() else args.file
    if report.run_dir_checked and (session := killed_session(shown.parent, m)) is not None:
        # Well-formed, but its `running` is no longer true: the user should know before trusting it.
        raise UnilabError(
            describe_killed(shown.parent, session),
            detail="the manifest is well-formed; only the run's end was never recorded, and nothing was changed",
            fix=RESUME_KILLED_FIX.format(run_dir=shown.parent),
        )
    checked = []
    if report.plan_checked:
        checked.append("plan.toml has its plan_id")
    if not report.run_dir_checked:
        checked.append("plan and checkpoints not checked (only a run directory's manifest.json is)")
    elif m.checkpoints:
        checked.append(f"{report.checkpoints_verified} of {len(m.checkpoints)} checkpoints match their sha256")
    also = f"; {', '.join(checked)}" if checked else ""
    print(f"{shown}: valid manifest v{m.schema_version} (run {m.run_id}, status {m.status}){also}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from unilab.run.export import export_onnx

    out = export_onnx(args.run_dir, args.out)
    print(f"exported the actor with its observation normalizer to {out}")
    return 0


def add_parsers(sub: argparse._SubParsersAction, spec_opts) -> None:
    sp = sub.add_parser(
        "apply",
        help="run a spec or a saved plan (the main job)",
        description="Plan SPEC for this host, or re-check a saved PLAN against it (a stale plan is "
        "refused), then train. The run directory <run.output_dir>/<run.name>-<utc time>/ (run.output_dir "
        "defaults to runs) gets plan.toml, manifest.json, events.jsonl, tensorboard/ and checkpoints/. "
        "Ctrl-C stops gracefully (final checkpoint, exit 130).",
    )
    sp.add_argument(
        "target",
        type=path_arg,
        nargs="?",
        metavar="SPEC|PLAN",
        help="run spec (.toml) or saved plan; with --resume it defaults to RUN_DIR/plan.toml",
    )
    sp.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec key (repeatable), as in `unilab plan`",
    )
    sp.add_argument(
        "--resume",
        type=path_arg,
        metavar="RUN_DIR",
        help="continue RUN_DIR from its last checkpoint with its own plan (a SPEC|PLAN given must have the "
        "same plan id)",
    )
    sp.add_argument(
        "--replan",
        action="store_true",
        help="with --resume on a host whose facts changed (another node, CPU set, GPU, package patch version): "
        "re-plan the run for this host, show the changes and continue, unless they change what is trained",
    )
    sp.add_argument(
        "--quiet", action="store_true", help="print only the final summary (no start lines, no progress line)"
    )
    sp.set_defaults(func=cmd_apply)

    sp = sub.add_parser("manifest", help="check a run manifest against the manifest schema")
    msub = sp.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    vp = msub.add_parser(
        "validate",
        help="validate a manifest against schemas/manifest.v1.json and its run directory",
        description="Check a manifest's schema and consistency; next to its run directory also that "
        "plan.toml has its plan id and every checkpoint its recorded sha256.",
    )
    vp.add_argument("file", type=path_arg, metavar="RUN_DIR|FILE", help="a run directory or a manifest.json")
    vp.set_defaults(func=cmd_manifest_validate)

    sp = sub.add_parser(
        "export",
        help="export a run's policy for deployment",
        description="Write the actor of RUN_DIR's last checkpoint, with its observation normalizer, "
        "as an ONNX model: input `obs` [batch, obs_dim], output `action` [batch, act_dim] in [-1, 1]; "
        "its metadata holds the control period and, for the G1, the joint names, standing pose and "
        "action scale (joint targets = default_joint_pos + action_scale * action).",
    )
    add_run_dir_arg(sp)
    sp.add_argument("--format", choices=("onnx",), default="onnx")
    sp.add_argument(
        "--out",
        type=path_arg,
        metavar="FILE",
        help="written atomically (default: RUN_DIR/policy.onnx); inside RUN_DIR only a previous export "
        "(*.onnx) may be replaced",
    )
    sp.set_defaults(func=cmd_export)
