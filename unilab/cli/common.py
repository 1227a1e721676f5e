"""Shared CLI plumbing: reading specs or saved plans, host facts, atomic writes, and the
one-paragraph errors for files that cannot be read or written."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from unilab.errors import PlanRefused, UnilabError, first_validation_error
from unilab.host.facts import HostFacts
from unilab.inputfile import read_input
from unilab.plan.models import Plan


def read_host_facts(path: Path | None) -> HostFacts:
    if path is None:
        from unilab.host.probe import probe_host

        return probe_host()
    try:
        data = json.loads(read_input(path, "host facts file").decode("utf-8"))
    except FileNotFoundError:
        raise UnilabError(
            f"host facts file {path} does not exist",
            fix="record one on the target host with `unilab host --json > node.json`",
        ) from None
    except RecursionError:
        raise UnilabError(
            f"host facts file {path} is nested too deeply to read",
            fix="host facts nest a few levels at most: re-record them with `unilab host --json > node.json`",
        ) from None
    except (OSError, ValueError) as exc:
        raise UnilabError(
            f"host facts file {path} is not readable JSON: {exc}",
            fix="re-record it with `unilab host --json > node.json`",
        ) from None
    try:
        return HostFacts.model_validate(data)
    except ValidationError as exc:
        raise UnilabError(
            f"host facts file {path} does not match schemas/host_facts.v1.json: {first_validation_error(exc)}",
            fix="re-record it with `unilab host --json > node.json` using this unilab version",
        ) from None


_OS_FIX = {
    errno.EACCES: "give this user access to it (check the file's and its directories' permissions)",
    errno.EPERM: "give this user access to it (check the file's and its directories' permissions)",
    errno.ENOSPC: "free disk space, or write somewhere else",
    errno.EDQUOT: "free disk space (quota exceeded), or write somewhere else",
    errno.EROFS: "write to a writable file system",
    errno.EISDIR: "pass a file, not a directory",
    errno.ENOTDIR: "check the path: one of its parents is a file, not a directory",
    errno.ENOENT: "check the path",
    errno.EEXIST: "choose a path that does not exist yet, or remove the existing one",
}


def file_error(exc: BaseException, path: Path | str | None = None, what: str = "file") -> UnilabError | None:
    """The one-paragraph error for an OS error, a non-UTF-8 file or a too deeply nested document;
    None for any other exception. `path` is used when the exception does not name one."""
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else path
        why = exc.strerror or type(exc).__name__
        summary = f"cannot access {what} {where}: {why}" if where is not None else f"a file operation failed: {why}"
        return UnilabError(summary, fix=_OS_FIX.get(exc.errno or 0, "check the path and its permissions"))
    if isinstance(exc, UnicodeDecodeError):
        where = f" {path}" if path is not None else ""
        return UnilabError(
            f"{what}{where} is not UTF-8 text (byte {exc.start}: {exc.reason})",
            fix="pass a UTF-8 text file (a spec or a plan written by `unilab plan`), not a binary file",
        )
    if isinstance(exc, RecursionError):
        where = f" {path}" if path is not None else ""
        return UnilabError(
            f"{what}{where} is nested too deeply to read",
            fix=f"a unilab {what.removesuffix(' file')} nests a few levels at most: check the file for runaway [ or {{",
        )
    return None


@contextmanager
def reading(path: Path, what: str) -> Iterator[None]:
    """Turn OS, decoding and nesting errors while reading `path` into one clear paragraph."""
    try:
        yield
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        err = file_error(exc, path, what)
        if err is None:  # file_error covers every class caught above; never silence one it does not
            raise
        raise err from None


def plan_from_path(path: Path, overrides: list[str], host_facts: Path | None) -> Plan:
    """A spec is compiled against the host (or recorded facts); a saved plan is read back."""
    from unilab.plan.render import is_plan_file, load_plan

    with reading(path, "spec or plan"):
        if path.exists() and path.is_file() and is_plan_file(path):
            if overrides:
                raise UnilabError(
                    f"{path} is a saved plan; --set applies to specs only",
                    fix="put the override on the spec and re-plan",
                )
            if host_facts is not None:  # a saved plan holds the facts it was compiled against
                raise UnilabError(
                    f"{path} is a saved plan; --host-facts applies to specs only",
                    fix=f"compile the spec against those facts: unilab plan SPEC --host-facts {host_facts}",
                )
            return load_plan(path)
        from unilab.spec.load import load_spec

        loaded = load_spec(path, overrides)
    from unilab.plan.compile import compile_plan

    facts = read_host_facts(host_facts)
    try:
        return compile_plan(loaded.spec, facts, loaded.spec_dir)
    except PlanRefused as exc:
        if host_facts is None:
            raise
        raise PlanRefused(exc.diagnostics, against=str(host_facts)) from None


def same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def check_out_file(out: Path, inputs: list[Path], what: str) -> None:
    """Refuse an --out that is a directory, sits in a missing directory, or is one of the inputs."""
    from unilab.atomic import check_out_path

    check_out_path(out, f"{what}.toml")
    for src in inputs:
        if same_file(out, src):
            raise UnilabError(
                f"--out {out} is the input file {src}: writing there would overwrite it",
                fix="choose another --out file",
            )


def write_atomic(path: Path, text: str, what: str = "plan") -> None:
    """Never a half-written file (see unilab.atomic); the caller checked ``path`` with
    ``check_out_file`` before doing the work."""
    from unilab.atomic import write_text_atomic

    write_text_atomic(
        path, text, what, fix=f"check that {path.parent} is writable and has free space, or choose another --out"
    )
