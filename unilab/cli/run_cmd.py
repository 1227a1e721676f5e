"""`unilab apply`, `unilab manifest validate`, `unilab export`."""

from __future__ import annotations

import argparse
import json
import os

from unilab.cli.args import add_checkpoint_arg, add_run_dir_arg, path_arg
from unilab.errors import UnilabError
from unilab.lifetime import DIE_WITH_PARENT_ENV, die_with_parent
from unilab.records.run_dir import RunDir
from unilab.run.resolve import resolve_apply
from unilab.run.terminal import terminal_may_go
from unilab.stop import stop_signals_interrupt


def _die_with_a_parent_that_asked() -> None:
    """`unilab profile` starts each run in a session of its own and asks it to die with the profile."""

    parent = os.environ.pop(DIE_WITH_PARENT_ENV, None)  # popped: the run's own children die with it
    if parent is None:
        return
    if not parent.isdigit():
        raise UnilabError(f"{DIE_WITH_PARENT_ENV}={parent!r} is not a process id", fix=f"unset {DIE_WITH_PARENT_ENV}")
    die_with_parent(int(parent))


def cmd_apply(args: argparse.Namespace) -> int:
    from unilab.run.apply import ApplyRequest, run_apply

    _die_with_a_parent_that_asked()

    if args.checkpoint is not None and args.resume is None:
        raise UnilabError(
            "--checkpoint picks the checkpoint a resumed run continues from",
            fix="use it with --resume RUN_DIR; to start a new run from a checkpoint's policy, set run.init_from",
        )
    plan, resumes_plan = resolve_apply(args.target, args.set, args.resume, args.replan, args.smoke)

    # A closed pipe or hung-up terminal must not end the training run; a SIGTERM before the run's
    # own stop handling is in place ends it as cleanly as a Ctrl-C.
    with terminal_may_go(), stop_signals_interrupt():
        return run_apply(
            ApplyRequest(
                plan=plan,
                resume_dir=args.resume,
                progress=not args.quiet,
                resumes_plan=resumes_plan,
                checkpoint=args.checkpoint,
            )
        ).code


def cmd_manifest_validate(args: argparse.Namespace) -> int:
    shown = RunDir(args.file).manifest if args.file.is_dir() else args.file
    if not args.json:
        return _validate_manifest(args, shown)
    try:  # a script reads the verdict on stdout either way; the paragraph still goes to stderr
        return _validate_manifest(args, shown)
    except UnilabError as exc:
        print(json.dumps({"file": str(shown), "valid": False, "error": exc.render()}, indent=2))
        raise


def _validate_manifest(args: argparse.Namespace, shown) -> int:
    from unilab.records.manifest_io import validate_manifest_file
    from unilab.run.run_lock import RESUME_KILLED_FIX, describe_killed, killed_session

    m, report = validate_manifest_file(args.file)
    if report.run_dir_checked and (session := killed_session(shown.parent, m)) is not None:
        # Well-formed, but its `running` is no longer true: the user should know before trusting it.
        raise UnilabError(
            describe_killed(shown.parent, session),
            detail="the manifest is well-formed; only the run's end was never recorded, and nothing was changed",
            fix=RESUME_KILLED_FIX.format(run_dir=shown.parent),
        )
    if args.json:
        doc = {
            "file": str(shown),
            "valid": True,
            "schema_version": m.schema_version,
            "run_id": m.run_id,
            "status": str(getattr(m.status, "value", m.status)),
            "plan_checked": report.plan_checked,
            "run_dir_checked": report.run_dir_checked,
            "checkpoints": len(m.checkpoints),
            "checkpoints_verified": report.checkpoints_verified if report.run_dir_checked else None,
        }
        print(json.dumps(doc, indent=2))
        return 0
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
    from unilab.run.export import export_policy

    out = export_policy(args.run_dir, args.out, args.checkpoint, args.format)
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
        "same plan id); with --set run.total_env_steps=N, train it further to a larger budget",
    )
    sp.add_argument(
        "--checkpoint",
        type=path_arg,
        metavar="FILE",
        help="with --resume: continue from this checkpoint of the run (a file name in RUN_DIR/checkpoints/ or a "
        "path to one; default: the newest); the checkpoints after it are moved to checkpoints/superseded-<utc time>/",
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
    sp.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run of SPEC: the same plan with a budget of a few updates (no random warm-up; on-policy: two "
        "rollouts), named <run.name>-smoke; checks a spec end to end in seconds to a minute",
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
    vp.add_argument(
        "--json",
        action="store_true",
        help="machine-readable verdict on stdout: {file, valid, schema_version, run_id, status, plan_checked, "
        "run_dir_checked, checkpoints, checkpoints_verified}, or {file, valid: false, error} (exit 1)",
    )
    vp.set_defaults(func=cmd_manifest_validate)

    sp = sub.add_parser(
        "export",
        help="export a run's policy for deployment",
        description="Write the actor of RUN_DIR's newest checkpoint (or --checkpoint), with its observation "
        "normalizer, as an ONNX model (or a TorchScript module, --format torchscript): input `obs` [batch, "
        "obs_dim], output `action` [batch, act_dim] in [-1, 1]; its metadata (TorchScript: the extra file "
        "unilab_metadata.json) holds the control period and, for the G1, the joint names, standing pose and "
        "action scale (joint targets = default_joint_pos + action_scale * action).",
    )
    add_run_dir_arg(sp)
    sp.add_argument(
        "--format",
        choices=("onnx", "torchscript"),
        default="onnx",
        help="onnx (default, RUN_DIR/policy.onnx) or torchscript (RUN_DIR/policy.pt, for torch.jit.load and libtorch)",
    )
    sp.add_argument(
        "--out",
        type=path_arg,
        metavar="FILE",
        help="written atomically (default: RUN_DIR/policy.onnx or policy.pt); inside RUN_DIR only a previous "
        "export (*.onnx, *.pt) may be replaced",
    )
    add_checkpoint_arg(sp)
    sp.set_defaults(func=cmd_export)
