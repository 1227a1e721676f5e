"""`unilab profile`: interleaved arms of real runs, per-phase attribution, host-sync inventory."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from unilab.cli.args import path_arg
from unilab.errors import UnilabError
from unilab.inputfile import reading
from unilab.plan.render import is_plan_file
from unilab.profile import session
from unilab.profile.arms import default_arms, parse_arms
from unilab.profile.report import render_markdown
from unilab.profile.session import ProfileRequest, collector_device
from unilab.spec.load import load_spec
from unilab.stop import stop_signals_interrupt


def _command(args: argparse.Namespace) -> list[str]:
    """The effective command line (what the parser understood), for the provenance record."""
    cmd = ["unilab", "profile", str(args.spec)]
    for a in args.arm:
        cmd += ["--arm", a]
    for s in args.set:
        cmd += ["--set", s]
    cmd += ["--repeats", str(args.repeats), "--warmup", str(args.warmup), "--window", str(args.window)]
    cmd += ["--host-sync-steps", str(args.host_sync_steps), "--threshold", str(args.threshold)]
    if args.out is not None:
        cmd += ["--out", str(args.out)]
    return cmd


def cmd_profile(args: argparse.Namespace) -> int:

    with reading(args.spec, "spec"):
        if args.spec.is_file() and is_plan_file(args.spec):
            raise UnilabError(
                f"{args.spec} is a saved plan; `unilab profile` takes a spec",
                detail="each arm changes spec keys and is planned anew, so a fixed plan cannot be profiled",
                fix="pass the spec the plan was made from, e.g. `unilab profile specs/cartpole.toml`",
            )
        spec = load_spec(args.spec, args.set).spec  # spec errors come before anything else
    if args.out is not None and (args.out.exists() or args.out.is_symlink()):
        what = "directory" if args.out.is_dir() else "file"
        raise UnilabError(
            f"--out {args.out} already exists (a {what}); a profile writes a new directory",
            fix="pass a path that does not exist yet, or leave --out out for <run.output_dir>/profile-<utc time>",
        )
    if args.out is not None and not args.out.parent.is_dir():  # as for plan --out: no directories made up
        raise UnilabError(
            f"cannot create --out {args.out}: directory {args.out.parent} does not exist",
            fix=f"create it first (mkdir -p {args.out.parent}), or choose another --out",
        )
    if args.arm:
        arms = parse_arms(args.arm)
    else:
        import torch

        arms = default_arms(spec.sim.backend, torch.cuda.is_available() and collector_device(spec) != "cpu")
    req = ProfileRequest(
        spec=args.spec,
        arms=arms,
        base_sets=list(args.set),
        repeats=args.repeats,
        warmup_env_steps=args.warmup,
        window_env_steps=args.window,
        host_sync_steps=args.host_sync_steps,
        threshold=args.threshold,
        out_dir=args.out,
        run_timeout_s=args.run_timeout,
        command=_command(args),
        default_arms=not args.arm,
    )

    with stop_signals_interrupt():  # a SIGTERM or SIGHUP stops a profile as Ctrl-C does
        result = session.run_profile(req)
    print()
    print(render_markdown(result.profile))
    print(f"profile directory: {result.directory}")
    print(result.profile.verdict.line)
    return 0


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return v


def _share(text: str) -> float:
    v = _finite(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text!r}")
    return v


def _seconds(text: str) -> float:
    v = _finite(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text!r}")
        return v

    return parse


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "profile",
        help="attribute collector/learner time per phase over interleaved arms; go/no-go for a collector graph",
        description="Run SPEC through `unilab apply` once per arm and repeat (arms interleaved: A B A B ...), "
        "measure each run over a window after its warm-up, and report per lifecycle phase the median and "
        "range over repeats, whether the phases add up to the iteration time, a host-sync inventory of the "
        "collector, and a go/no-go line for an update-state graph. Writes <run.output_dir>/profile-<utc time>/ "
        "(run.output_dir defaults to runs) with "
        "profile.json, profile.md and profile.png. Default arms: physics graph off vs on (CUDA MuJoCo Warp), "
        "else one vs two CPU physics workers.",
    )
    sp.add_argument("spec", type=path_arg, metavar="SPEC", help="run spec (.toml)")
    sp.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="an arm: a name and its spec overrides (TOML values; repeatable)",
    )
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a spec key for every arm")
    sp.add_argument("--repeats", type=_count(1), default=2, metavar="N", help="runs per arm (default 2)")
    sp.add_argument(
        "--warmup",
        type=_count(0),
        default=4096,
        metavar="ENV_STEPS",
        help="env steps before the measured window, rounded up to 64 syncs (PPO: lcm(64, rollout)) (default 4096)",
    )
    sp.add_argument(
        "--window",
        type=_count(1),
        default=4096,
        metavar="ENV_STEPS",
        help="env steps measured, rounded up to 64 syncs (PPO: lcm(64, rollout)) (default 4096)",
    )
    sp.add_argument(
        "--host-sync-steps",
        type=_count(0),
        default=128,
        metavar="N",
        help="collector steps for the host-sync inventory; 0 skips it (default 128)",
    )
    sp.add_argument(
        "--threshold",
        type=_share,
        default=0.15,
        metavar="SHARE",
        help="go/no-go non-physics share, in (0, 1] (default 0.15)",
    )
    sp.add_argument(
        "--out",
        type=path_arg,
        metavar="DIR",
        help="new profile directory, must not exist (default: <run.output_dir>/profile-<utc time>)",
    )
    sp.add_argument(
        "--run-timeout",
        type=_seconds,
        default=600.0,
        metavar="S",
        help="limit per run, seconds > 0; a run past it is stopped as by Ctrl-C (default 600)",
    )
    sp.set_defaults(func=cmd_profile)
