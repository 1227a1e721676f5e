"""JSON Schema export (draft 2020-12) of unilab's documents: spec, plan, host facts, manifest,
profile, evaluation report. The committed copies under schemas/ are checked for drift in CI
(`unilab schema --check`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from unilab.atomic import write_text_atomic
from unilab.errors import UnilabError
from unilab.evaluate.models import EVAL_SCHEMA_VERSION, EvalReport
from unilab.host.facts import HOST_FACTS_SCHEMA_VERSION, HostFacts
from unilab.manifest.models import MANIFEST_SCHEMA_VERSION, Manifest
from unilab.plan.models import PLAN_SCHEMA_VERSION, Plan
from unilab.profile.models import PROFILE_SCHEMA_VERSION, Profile
from unilab.schema_document import schema_document
from unilab.spec.models import SPEC_SCHEMA_VERSION, Spec


def _documents() -> dict[str, tuple[type[BaseModel], int]]:

    return {
        "spec": (Spec, SPEC_SCHEMA_VERSION),
        "plan": (Plan, PLAN_SCHEMA_VERSION),
        "host_facts": (HostFacts, HOST_FACTS_SCHEMA_VERSION),
        "manifest": (Manifest, MANIFEST_SCHEMA_VERSION),
        "profile": (Profile, PROFILE_SCHEMA_VERSION),
        "eval": (EvalReport, EVAL_SCHEMA_VERSION),
    }


def schema_for(name: str) -> dict[str, Any]:
    model, version = _documents()[name]
    return schema_document(model, name, version)


def file_name(name: str) -> str:
    return f"{name}.v{_documents()[name][1]}.json"


def rendered() -> dict[str, str]:
    """File name -> canonical text of every schema."""
    return {file_name(n): json.dumps(schema_for(n), indent=2, sort_keys=True) + "\n" for n in _documents()}


def export(out_dir: Path) -> list[Path]:
    """Write every schema atomically (a reader never sees half a file)."""

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnilabError(
            f"cannot create schema directory {out_dir}: {exc.strerror or exc}",
            fix="pass a writable directory with --out",
        ) from None
    written = []
    for fname, text in rendered().items():
        p = out_dir / fname
        write_text_atomic(p, text, "schema", fix=f"check that {out_dir} is writable and has free space")
        written.append(p)
    return written


def drift(out_dir: Path) -> list[str]:
    """Names of committed schema files that are missing or differ from the code (bytes compared,
    so a binary or non-UTF-8 file simply differs)."""
    out = []
    for fname, text in rendered().items():
        p = out_dir / fname
        if not p.is_file() or p.read_bytes() != text.encode("utf-8"):
            out.append(fname)
    return out
