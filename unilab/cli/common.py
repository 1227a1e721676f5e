"""Shared CLI plumbing: reading specs or saved plans, host facts, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from unilab.errors import UnilabError
from unilab.host.facts import HostFacts
from unilab.plan.models import Plan


def read_host_facts(path: Path | None) -> HostFacts:
    if path is None:
        from unilab.host.probe import probe_host

        return probe_host()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnilabError(
            f"host facts file {path} does not exist",
            fix="record one on the target host with `unilab host --json > node.json`",
        ) from None
    except (OSError, ValueError) as exc:
        raise UnilabError(
            f"host facts file {path} is not readable JSON: {exc}",
            fix="re-record it with `unilab host --json > node.json`",
        ) from None
    try:
        return HostFacts.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise UnilabError(
            f"host facts file {path} does not match schemas/host_facts.v1.json: "
            f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}",
            fix="re-record it with `unilab host --json > node.json` using this unilab version",
        ) from None


def plan_from_path(path: Path, overrides: list[str], host_facts: Path | None) -> Plan:
    """A spec is compiled against the host (or recorded facts); a saved plan is read back."""
    from unilab.plan.render import is_plan_file, load_plan

    if path.exists() and path.is_file() and is_plan_file(path):
        if overrides:
            raise UnilabError(
                f"{path} is a saved plan; --set applies to specs only", fix="put the override on the spec and re-plan"
            )
        return load_plan(path)
    from unilab.plan.compile import compile_plan
    from unilab.spec.load import load_spec

    loaded = load_spec(path, overrides)
    return compile_plan(loaded.spec, read_host_facts(host_facts), loaded.spec_dir)


def write_atomic(path: Path, text: str) -> None:
    """Never a half-written file: see unilab.run.atomic."""
    from unilab.run.atomic import write_text_atomic

    if not path.parent.is_dir():
        raise UnilabError(f"cannot write {path}: directory {path.parent} does not exist", fix="create it first")
    write_text_atomic(path, text, "plan")
