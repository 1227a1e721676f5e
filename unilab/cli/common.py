"""Shared CLI plumbing: reading specs or saved plans against host facts, and atomic writes
(the one-paragraph errors for files that cannot be read are unilab.inputfile's)."""

from __future__ import annotations

from pathlib import Path

from unilab.atomic import check_out_path, write_text_atomic
from unilab.errors import PlanRefused, UnilabError
from unilab.host.record import read_host_facts
from unilab.inputfile import reading
from unilab.plan.compile import compile_plan
from unilab.plan.models import Plan
from unilab.plan.render import is_plan_file, load_plan


def plan_from_path(path: Path, overrides: list[str], host_facts: Path | None) -> Plan:
    """A spec is compiled against the host (or recorded facts); a saved plan is read back."""

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

    write_text_atomic(
        path, text, what, fix=f"check that {path.parent} is writable and has free space, or choose another --out"
    )
