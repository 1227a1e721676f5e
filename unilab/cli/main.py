"""`unilab` command line. Subcommands import what they need lazily, so `unilab plan` never
loads torch, warp or mujoco. Every failure ends in one clear paragraph and a non-zero exit."""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from pathlib import Path

from unilab import __version__, plugins, schemas
from unilab.algos.registry import ALGOS, plugin_algo_def
from unilab.cli import completion, eval_cmd, habits, mps_cmd, play_cmd, profile_cmd, run_cmd
from unilab.cli.args import path_arg
from unilab.cli.common import check_out_file, plan_from_path, write_atomic
from unilab.cli.completion import autocomplete
from unilab.errors import UnilabError
from unilab.host import probe
from unilab.host.facts import LEARNER_CPU_FLAGS
from unilab.inputfile import file_error, reading
from unilab.plan.diff import diff_plans
from unilab.plan.inputs import planned_input_paths
from unilab.plan.render import is_plan_file, plan_data, render
from unilab.plan.rules_doc import render_json, render_markdown, render_text
from unilab.records.run_dir import RunDir
from unilab.tasks.registry import TASKS, plugin_task_def

EXIT_OK, EXIT_ERROR, EXIT_DIFFERENT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _plan_format(fmt: str | None, out: Path | None) -> str:
    """A saved plan is read back by its extension (.json is JSON, anything else TOML), so --out
    decides the format when --format is not given, and a mismatch is refused."""
    if out is None:
        return fmt or "toml"
    by_ext = "json" if out.suffix.lower() == ".json" else "toml"
    if fmt is not None and fmt != by_ext:
        raise UnilabError(
            f"--format {fmt} does not match --out {out}: a plan file ending in "
            f"{out.suffix or '(no extension)'} is read back as {by_ext.upper()}",
            fix=f"drop --format (the extension decides), or name the file {out.with_suffix('.' + fmt).name}",
        )
    return by_ext


def _cmd_plan(args: argparse.Namespace) -> int:

    fmt = _plan_format(args.format, args.out)
    inputs = [args.spec, *([args.host_facts] if args.host_facts is not None else [])]
    if args.out is not None:
        check_out_file(args.out, inputs, "plan")  # before compiling: refuse early
    if args.smoke:
        from unilab.plan.smoke import refuse_saved_plan, smoke_plan

        refuse_saved_plan(args.spec, "plan")
        plan = smoke_plan(lambda o: plan_from_path(args.spec, o, args.host_facts), args.set)
    else:
        plan = plan_from_path(args.spec, args.set, args.host_facts)
    if args.out is not None:  # and the files the plan pins by digest (robot MJCF, motion)
        check_out_file(args.out, planned_input_paths(plan.task, Path.cwd()), "plan")
    text = render(plan, fmt)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
        try:
            print(f"plan {plan.plan_id} written to {args.out}")
        except _OutputError:  # the plan is written: a lost confirmation line is no failure
            _silence_stdout()
    return EXIT_OK


def _plan_of_run_dir(side: str, path: Path) -> Path:
    """A run directory stands for the plan it ran (RUN_DIR/plan.toml)."""
    if not path.is_dir():
        return path
    plan = RunDir(path).plan
    if not plan.is_file():
        raise UnilabError(
            f"{side} ({path}) is a directory without plan.toml",
            fix="pass a spec, a saved plan, or a run directory written by `unilab apply`",
        )
    return plan


def _cmd_diff(args: argparse.Namespace) -> int:

    paths = [_plan_of_run_dir(side, path) for side, path in (("A", args.a), ("B", args.b))]
    saved = [p.is_file() and is_plan_file(p) for p in paths]
    if args.host_facts is not None and all(saved):
        raise UnilabError(
            "both sides are saved plans; --host-facts compiles a spec against recorded facts",
            fix=f"pass a spec on one side: unilab diff SPEC {args.b} --host-facts {args.host_facts}",
        )
    # --host-facts is for the spec side(s); a saved plan holds the facts it was compiled against.
    sides = []
    for side, path, is_saved in (("A", paths[0], saved[0]), ("B", paths[1], saved[1])):
        try:
            sides.append(plan_data(plan_from_path(path, args.set, None if is_saved else args.host_facts)))
        except UnilabError as exc:  # say which side failed: both may come from similar files
            exc.summary = f"{side} ({path}): {exc.summary}"
            exc.args = (exc.summary,)
            raise
    a, b = sides
    changes = [c for c in diff_plans(a, b) if c.key != "plan_id"]
    if args.json:
        doc = {
            "a": {"path": str(args.a), "plan_id": a["plan_id"]},
            "b": {"path": str(args.b), "plan_id": b["plan_id"]},
            "equal": not changes,
            "changes": [{"kind": c.kind, "key": c.key, "a": c.old, "b": c.new} for c in changes],
        }
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return EXIT_DIFFERENT if changes else EXIT_OK
    if not changes:
        print(f"no changes: both plans are {a['plan_id']}")
        return EXIT_OK
    print(f"--- {args.a}  {a['plan_id']}\n+++ {args.b}  {b['plan_id']}")
    for c in changes:
        print(c.render())
    print(f"{len(changes)} key{'s' if len(changes) != 1 else ''} differ")
    return EXIT_DIFFERENT


def _cmd_host(args: argparse.Namespace) -> int:

    facts = probe.probe_host()
    if args.json:
        sys.stdout.write(facts.model_dump_json(indent=2) + "\n")
        return EXIT_OK
    nv, cpu = facts.nvidia, facts.cpu
    lines = [
        f"os        {facts.os.system} {facts.os.release} {facts.os.machine} (python {facts.os.python})",
        f"cpu       {facts.cpu.model}: {facts.cpu.logical_count} logical, affinity {facts.cpu.affinity}",
        f"  features {' '.join(cpu.features) or 'none (of ' + ' '.join(LEARNER_CPU_FLAGS) + ')'}"
        if cpu.features is not None
        else "  features not readable (no /proc/cpuinfo flags)",
        f"  cores    {len(cpu.cores)} physical, SMT siblings: "
        + (", ".join(str(g) for g in cpu.cores if len(g) > 1) or "none")
        if cpu.cores is not None
        else "  cores    not readable (no sysfs CPU topology)",
        f"nvidia    driver {nv.driver_version}, CUDA {nv.cuda_driver_version}"
        if nv.driver_present
        else f"nvidia    no driver ({nv.nvml_error})",
    ]
    for g in nv.gpus:
        lines.append(
            f"  gpu {g.index}   {g.uuid}  {g.name}  {g.memory_total_mib} MiB  compute={g.compute_mode} mig={g.mig_mode}"
        )
    if nv.driver_present and nv.nvml_error:
        lines.append(f"  unreadable: {nv.nvml_error}")
    cvd = facts.cuda_visible_devices
    if nv.driver_present or cvd.raw is not None:
        shown = ", ".join(f"{i}={u}" for i, u in enumerate(cvd.uuids)) or "none"
        lines.append(
            f"visible   CUDA_VISIBLE_DEVICES={cvd.raw if cvd.raw is not None else '(unset)'} -> {shown}"
            + (f"  [{cvd.error}]" if cvd.error else "")
        )
    lines.append(
        f"mps       control binary: {facts.mps.control_binary or 'not found'}; "
        f"{len(facts.mps.services)} registered service(s) in {facts.mps.state_directory}"
    )
    if facts.mps.registry_error:
        lines.append(f"  registry unreadable: {facts.mps.registry_error}")
    for s in facts.mps.services:
        state = "running" if s.daemon_alive and s.control_socket_exists else "NOT running"
        lines.append(f"  {s.name}  {s.gpu_uuid}  pipe {s.pipe_directory}  pid {s.daemon_pid}  {state}")
    p = facts.packages
    lines.append(f"packages  torch {p.torch}, warp-lang {p.warp_lang}, mujoco {p.mujoco}, mujoco-warp {p.mujoco_warp}")
    if facts.nccl_env:
        lines.append("nccl env  " + " ".join(f"{k}={v}" for k, v in facts.nccl_env.items()))
    print("\n".join(lines))
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:

    if args.out.exists() and not args.out.is_dir():
        raise UnilabError(f"--out {args.out} is not a directory", fix="pass the directory that holds the schema files")
    if args.check:
        if not args.out.is_dir():
            raise UnilabError(
                f"schema directory {args.out} does not exist",
                fix="pass the directory of the committed schemas with --out (unilab schema --check --out "
                f"CHECKOUT/schemas), or create it with `unilab schema --out {args.out}`",
            )
        with reading(args.out, "schema file"):
            stale = schemas.drift(args.out)
        if stale:
            raise UnilabError(
                f"schemas under {args.out}/ differ from the code: {', '.join(stale)}",
                fix=f"regenerate them with `unilab schema --out {args.out}` and commit the result (run in "
                "the checkout, or point --out at its schemas/)",
            )
        print(f"schemas under {args.out}/ match the code")
        return EXIT_OK
    for p in schemas.export(args.out):
        print(f"wrote {p}")
    return EXIT_OK


def _cmd_rules(args: argparse.Namespace) -> int:

    if args.json and args.markdown:
        raise UnilabError("--json and --markdown are two renderings of the same list", fix="pass one of them")
    sys.stdout.write(render_json() if args.json else render_markdown() if args.markdown else render_text())
    return EXIT_OK


def _plugin_rows() -> list[dict[str, str]]:
    """Every installed plugin entry point and what loading it gives."""

    rows: list[dict[str, str]] = []
    kinds = (
        (plugins.TASK_GROUP, "task", TASKS, plugin_task_def),
        (plugins.ALGO_GROUP, "algorithm", ALGOS, plugin_algo_def),
    )
    for group, kind, builtin, load in kinds:
        for name, declared in plugins.declared(group).items():  # type: ignore[arg-type]
            row = {"kind": kind, "name": name, "package": ", ".join(d.package for d in declared)}
            row["value"] = ", ".join(d.value for d in declared)
            if name in builtin:
                row |= {"status": "shadowed", "detail": f"unilab's built-in {kind} {name!r} keeps the name"}
            else:
                try:
                    record = load(name)
                    row |= {"status": "ok", "detail": getattr(record, "title", name)}
                except UnilabError as exc:
                    row |= {"status": "broken", "detail": exc.render().removeprefix("error: ")}
            rows.append(row)
    return rows


def _cmd_plugins(args: argparse.Namespace) -> int:
    import json

    rows = _plugin_rows()
    foreign = plugins.foreign_unilab()
    if foreign is not None:
        print(foreign, file=sys.stderr)
    if args.json:
        print(json.dumps({"plugins": rows, "warnings": [foreign] if foreign else []}, indent=2))
        return EXIT_OK
    if not rows:
        print("no plugin is installed (entry-point groups unilab.tasks, unilab.algos; docs/extending.md)")
        return EXIT_OK
    for r in rows:
        print(f"{r['kind']} {r['name']}: {r['status']} ({r['package']}, {r['value']})")
        print("  " + r["detail"].replace("\n", "\n  "))
    return EXIT_OK


class _Version(argparse.Action):
    """`--version`: the version, and a warning where the public index's `unilab` is installed too."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"unilab {__version__} ({plugins.DISTRIBUTION})")
        foreign = plugins.foreign_unilab()
        if foreign is not None:
            print(foreign, file=sys.stderr)
        parser.exit(EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unilab",
        description="Declarative training runtime for humanoid RL (Unitree G1). "
        "Write a TOML spec, review its plan, apply it.",
        epilog="Start with: unilab apply specs/g1.toml (or unilab plan specs/g1.toml to review the plan first). "
        "Spec keys: docs/spec.md. Plan rules: docs/rules.md. Exit codes: 0 success, 1 error (usage errors "
        "included), 2 only from `unilab diff` when the plans differ, 130 interrupted.",
    )
    p.add_argument("--version", action=_Version, nargs=0, help="show the version (and a foreign `unilab` beside it)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run_cmd.add_parsers(sub, _spec_opts)  # apply (the main job), manifest, export
    eval_cmd.add_parser(sub)
    play_cmd.add_parser(sub)
    _add_plan_parsers(sub)  # plan, diff
    _add_info_parsers(sub)  # host, schema, rules, plugins
    mps_cmd.add_parser(sub)
    profile_cmd.add_parser(sub)
    completion.add_parser(sub)
    return p


def _spec_opts(sp: argparse.ArgumentParser) -> None:
    """The options of every command that compiles a spec: its overrides and the host it is compiled for."""
    sp.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec key, TOML value syntax (repeatable), e.g. --set task.num_envs=128",
    )
    sp.add_argument(
        "--host-facts",
        type=path_arg,
        metavar="FILE",
        help="compile against facts recorded with `unilab host --json` instead of probing this host",
    )


def _add_plan_parsers(sub: argparse._SubParsersAction) -> None:
    """`unilab plan` and `unilab diff`: compile a spec without running it, and compare plans."""
    sp = sub.add_parser(
        "plan",
        help="compile a spec into an execution plan and print it",
        description="Compile SPEC against this host's facts into an immutable execution plan. "
        "Every request the host cannot honour is refused with the rule, the key, the first unmet "
        "condition and the fixing command (exit 1).",
    )
    sp.add_argument("spec", type=path_arg, metavar="SPEC", help="run spec (.toml), or a saved plan to re-render")
    _spec_opts(sp)
    sp.add_argument(
        "--out",
        type=path_arg,
        metavar="FILE",
        help="write the plan to FILE (atomically) instead of stdout; FILE must not be SPEC or a directory",
    )
    sp.add_argument(
        "--smoke", action="store_true", help="the plan of `unilab apply SPEC --smoke`: the same run with a short budget"
    )
    sp.add_argument(
        "--format",
        choices=("toml", "json"),
        default=None,
        help="rendering (default: json when FILE ends in .json, else toml); a plan file is read back by its "
        "extension, so --format json needs a .json FILE and --format toml a non-.json one",
    )
    sp.set_defaults(func=_cmd_plan)

    sp = sub.add_parser(
        "diff",
        help="compare two specs, saved plans or runs' plans key by key (exit 0 equal, 2 different, 1 error)",
        description="Compare A and B (each a spec, compiled for this host, a saved plan, or a run directory's "
        "plan) key by key. --set applies to both sides (so both must be specs): compare a spec with its override by "
        "saving one side first (unilab plan SPEC --set ... --out B.toml). Exit code: 0 when equal, 2 when "
        "they differ, 1 on error.",
    )
    sp.add_argument("a", type=path_arg, metavar="A", help="spec (.toml), saved plan, or run directory (its plan)")
    sp.add_argument("b", type=path_arg, metavar="B", help="spec (.toml), saved plan, or run directory (its plan)")
    _spec_opts(sp)
    sp.add_argument(
        "--json",
        action="store_true",
        help="machine-readable: {a: {path, plan_id}, b, equal, changes: [{kind, key, a, b}]} (same exit codes)",
    )
    sp.set_defaults(func=_cmd_diff)


def _add_info_parsers(sub: argparse._SubParsersAction) -> None:
    """The commands that show what plans are made from: the host facts, the schemas, the rules."""
    sp = sub.add_parser(
        "host",
        help="show the host facts plans are compiled against",
        description="Probe CPUs, NVIDIA driver and GPUs (NVML), CUDA_VISIBLE_DEVICES, registered MPS "
        "services and package versions. No NVIDIA driver is reported as a fact, not an error.",
    )
    sp.add_argument("--json", action="store_true", help="machine-readable facts (record for --host-facts)")
    sp.set_defaults(func=_cmd_host)

    sp = sub.add_parser(
        "schema",
        help="export the JSON schemas (spec, plan, host facts, manifest, profile, eval report)",
        description="Write the JSON Schemas (draft 2020-12) of unilab's documents, or check that the "
        "committed ones match the code.",
    )
    sp.add_argument("--out", type=path_arg, default=Path("schemas"), metavar="DIR", help="directory (default: schemas)")
    sp.add_argument("--check", action="store_true", help="fail (exit 1) if the files in DIR differ from the code")
    sp.set_defaults(func=_cmd_schema)

    sp = sub.add_parser(
        "rules",
        help="list the plan's fail-closed rules",
        description="List every plan rule with its stable id, spec key and requirement.",
    )
    sp.add_argument("--markdown", action="store_true", help="render docs/rules.md")
    sp.add_argument(
        "--json", action="store_true", help="machine-readable: {plan_rules: [{id, key, requires}], spec_checks}"
    )
    sp.set_defaults(func=_cmd_rules)

    sp = sub.add_parser(
        "plugins",
        help="list the tasks and algorithms installed packages register, and whether each loads",
        description="List the entry points of the groups unilab.tasks and unilab.algos: each plugin's name (the "
        "task.name or algo.name a spec gives), its package, and whether its record loads (ok), cannot be used "
        "(broken: why, and the fix) or is shadowed by a built-in of the same name. Exit 0 either way.",
    )
    sp.add_argument(
        "--json",
        action="store_true",
        help="machine-readable: {plugins: [{kind, name, package, value, status, detail}]}",
    )
    sp.set_defaults(func=_cmd_plugins)


class _OutputError(Exception):
    """Standard output cannot be written (a closed pipe, a full disk)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _GuardedStdout:
    """sys.stdout whose write errors are told apart from errors on the user's files."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        if self._inner is None:  # started with standard output closed (`unilab plan SPEC >&-`)
            raise _OutputError(OSError(errno.EBADF, "standard output is closed"))
        try:
            return self._inner.write(text)
        except OSError as exc:
            raise _OutputError(exc) from None

    def flush(self) -> None:
        if self._inner is None:
            return
        try:
            self._inner.flush()
        except OSError as exc:
            raise _OutputError(exc) from None

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def _reserve_standard_fds() -> None:
    """A standard descriptor the process was started without (`>&-`) is taken by /dev/null: else
    the next file opened (a run's events.jsonl, a checkpoint) would get its number, and a child
    process's output to it would land in that file."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                got = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if got != fd:  # the lowest free number is fd itself; make sure
                os.dup2(got, fd)
                os.close(got)


def _silence_stdout() -> None:
    """After a failed write, point fd 1 at /dev/null so the exit-time flush has nothing to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _output_failed(exc: _OutputError) -> int:
    _silence_stdout()
    if isinstance(exc.cause, BrokenPipeError):  # `unilab rules | head -1`: the reader has what it wanted
        return EXIT_ERROR
    why = exc.cause.strerror or str(exc.cause)
    print(f"error: cannot write to standard output: {why}", file=sys.stderr)
    return EXIT_ERROR


# After a collector is killed, Python's resource tracker (one per run, shared by its processes)
# unlinks the shared memory the collector left and warns about a "leak"; the run has already said
# what died. The tracker takes its warning filters from this interpreter's -W options.
_TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


def main(argv: list[str] | None = None) -> int:
    if _TRACKER_QUIET not in sys.warnoptions:
        sys.warnoptions.append(_TRACKER_QUIET)
    parser = build_parser()

    autocomplete(parser)  # the shell asking for completions (tab): answered here, and the process ends
    _reserve_standard_fds()
    real_stdout = sys.stdout
    sys.stdout = _GuardedStdout(real_stdout)
    try:
        habits.check(sys.argv[1:] if argv is None else list(argv), habits.value_options(parser))
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help (exit 0) and usage errors, already printed by argparse
            sys.stdout.flush()
            return EXIT_OK if not exc.code else EXIT_ERROR  # exit 2 is reserved for `unilab diff`: plans differ
        rc = int(args.func(args))
        sys.stdout.flush()
        return rc
    except _OutputError as exc:
        return _output_failed(exc)
    except UnilabError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (OSError, UnicodeDecodeError, RecursionError) as exc:  # a file the user named cannot be used
        if os.environ.get("UNILAB_DEBUG"):
            raise
        err = file_error(exc)
        print(err.render() if err else f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # a bug: say so in one paragraph, keep the traceback behind a flag
        if os.environ.get("UNILAB_DEBUG"):
            raise
        print(
            f"error: internal error in unilab {__version__}: {type(exc).__name__}: {exc}\n"
            "This is a bug. Re-run with UNILAB_DEBUG=1 for the traceback and report it.",
            file=sys.stderr,
        )
        return EXIT_ERROR
    finally:
        sys.stdout = real_stdout


if __name__ == "__main__":
    sys.exit(main())
