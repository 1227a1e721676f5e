"""One exported JSON Schema document: the model's validation schema under its draft, id and
version. `unilab schema` writes every document (unilab.schemas); a reader of one file type (the
manifest) builds only its own."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema_document(model: type[BaseModel], name: str, version: int) -> dict[str, Any]:
    body = model.model_json_schema(mode="validation")
    return {"$schema": DRAFT, "$id": f"urn:unilab:schema:{name}:v{version}", "version": version, **body}
