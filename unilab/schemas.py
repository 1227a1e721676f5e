"""JSON Schema export (draft 2020-12) of unilab's documents: spec, plan, host facts, manifest.
The committed copies under schemas/ are checked for drift in CI (`unilab schema --check`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _documents() -> dict[str, tuple[type[BaseModel], int]]:
    from unilab.host.facts import HOST_FACTS_SCHEMA_VERSION, HostFacts
    from unilab.manifest.models import MANIFEST_SCHEMA_VERSION, Manifest
    from unilab.plan.models import PLAN_SCHEMA_VERSION, Plan
    from unilab.profile.models import PROFILE_SCHEMA_VERSION, Profile
    from unilab.spec.models import SPEC_SCHEMA_VERSION, Spec

    return {
        "spec": (Spec, SPEC_SCHEMA_VERSION),
        "plan": (Plan, PLAN_SCHEMA_VERSION),
        "host_facts": (HostFacts, HOST_FACTS_SCHEMA_VERSION),
        "manifest": (Manifest, MANIFEST_SCHEMA_VERSION),
        "profile": (Profile, PROFILE_SCHEMA_VERSION),
    }


def schema_for(name: str) -> dict[str, Any]:
    model, version = _documents()[name]
    body = model.model_json_schema(mode="validation")
    return {"$schema": DRAFT, "$id": f"urn:unilab:schema:{name}:v{version}", "version": version, **body}


def file_name(name: str) -> str:
    return f"{name}.v{_documents()[name][1]}.json"


def rendered() -> dict[str, str]:
    """File name -> canonical text of every schema."""
    return {file_name(n): json.dumps(schema_for(n), indent=2, sort_keys=True) + "\n" for n in _documents()}


def export(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in rendered().items():
        p = out_dir / fname
        p.write_text(text, encoding="utf-8")
        written.append(p)
    return written


def drift(out_dir: Path) -> list[str]:
    """Names of committed schema files that are missing or differ from the code."""
    out = []
    for fname, text in rendered().items():
        p = out_dir / fname
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            out.append(fname)
    return out
