"""Read a spec file, apply `--set key.path=VALUE` overrides, validate. Every failure is a
one-paragraph SpecError naming the file, the key path and what was expected."""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from unilab.errors import Diagnostic, SpecError
from unilab.inputfile import read_input
from unilab.spec.diagnose import format_validation_error, spec_error
from unilab.spec.models import ALGO_MODELS, SPEC_CONTEXT, PpoSpec, Spec

# Keys that only mean something to off-policy learners; a PPO spec that sets them is refused
# by name (rule algo.ppo-offpolicy-keys) instead of a generic "extra field" error.
OFF_POLICY_KEYS = tuple(
    dict.fromkeys(
        k
        for m in ALGO_MODELS.values()
        if m is not PpoSpec
        for k in m.model_fields
        if k not in PpoSpec.model_fields and k != "name"
    )
)
# `algo.hidden_dims` is the shorthand for both networks' widths (unilab.spec.models): given by --set,
# it replaces the file's per-network widths, as any later --set wins over the file.
WIDTHS_SHORTHAND, WIDTHS_KEYS = "hidden_dims", ("actor_hidden_dims", "critic_hidden_dims")


@dataclass(frozen=True)
class LoadedSpec:
    spec: Spec
    path: Path
    spec_dir: Path  # relative inputs (motion, robot_mjcf) resolve against this

    @property
    def digest(self) -> str:
        return spec_digest(self.spec)


def spec_digest(spec: Spec) -> str:
    """sha256 of the validated spec's canonical JSON: comments and key order do not count."""
    body = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def parse_override(text: str) -> tuple[list[str], Any]:
    """`training.devices=["cpu","cpu"]` -> (["training", "devices"], ["cpu", "cpu"]). The value is
    TOML value syntax; a bare word that is not valid TOML is taken as a string for convenience."""
    if "=" not in text:
        raise SpecError(
            f"--set {text!r} is not KEY=VALUE",
            fix="write it as --set key.path=VALUE, e.g. --set task.num_envs=128 "
            'or --set training.devices=["cpu","cpu"]',
        )
    key, raw = text.split("=", 1)
    path = [p.strip() for p in key.strip().split(".")]
    if not all(p and p.replace("_", "").isalnum() for p in path):
        raise SpecError(f"--set key {key.strip()!r} is not a dotted key path", fix="use e.g. --set algo.batch_size=512")
    try:
        parsed = tomllib.loads(f"v = {raw.strip()}")
        if set(parsed) != {"v"}:  # a newline in the value smuggled in another key
            raise SpecError(
                f"--set {key.strip()}: the value {raw.strip()!r} holds more than one TOML value (a line break?)",
                fix="give each key its own --set",
            )
        value = parsed["v"]
    except tomllib.TOMLDecodeError:
        if raw.strip() and all(c.isalnum() or c in "_-.:/" for c in raw.strip()):
            value = raw.strip()
        else:
            raise SpecError(
                f"--set {key.strip()}: {raw.strip()!r} is not a TOML value",
                fix="quote the whole --set for the shell and strings for TOML, e.g. "
                '--set \'training.devices=["cpu","cpu"]\' or --set \'run.name="my-run"\'',
            ) from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    done: list[list[str]] = []
    for text in overrides:
        path, value = parse_override(text)
        # A later --set that replaces a table would silently drop an earlier --set inside it.
        lost = next((p for p in done if len(p) > len(path) and p[: len(path)] == path), None)
        if lost is not None:
            raise SpecError(
                f"--set {'.'.join(path)}=... replaces the whole {'.'.join(path)} table, dropping the earlier "
                f"--set {'.'.join(lost)}",
                fix=f"put {lost[-1]} inside the table value, or give --set {'.'.join(lost)} after it",
            )
        done.append(path)
        if path == ["algo", WIDTHS_SHORTHAND] and isinstance(out.get("algo"), dict):
            out["algo"] = {k: v for k, v in out["algo"].items() if k not in WIDTHS_KEYS}
        node = out
        for i, part in enumerate(path[:-1]):
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise SpecError(
                    f"--set {'.'.join(path)}: {'.'.join(path[: i + 1])} is a value, not a table",
                    fix="check the key path against docs/spec.md",
                )
            node = nxt
        node[path[-1]] = value
    return out


def check_ppo_offpolicy_keys(data: dict[str, Any], overridden: set[str] | None = None) -> list[Diagnostic]:
    algo = data.get("algo")
    if not isinstance(algo, dict) or algo.get("name") != "ppo":
        return []
    # `--set algo.name=ppo` on a SAC spec keeps the file's SAC keys; a table value replaces them all.
    overridden = overridden or set()
    table_fix = (
        """pass --set 'algo={name="ppo"}' instead: a table replaces the whole [algo] section (PPO's """
        "defaults; add PPO keys inside the braces)"
    )

    off = [n for n, m in ALGO_MODELS.items() if m is not PpoSpec]
    others = ", ".join(f'"{n}"' for n in off[:-1]) + f' or "{off[-1]}"'

    def fix(k: str) -> str:
        if f"algo.{k}" in overridden:
            return f"drop `--set algo.{k}=...`"
        if "algo.name" in overridden:
            return table_fix
        return f"remove algo.{k}, or set algo.name = {others}"

    return [
        Diagnostic(
            "algo.ppo-offpolicy-keys",
            f"algo.{k}",
            f"`{k}` is an off-policy ({', '.join(off)}) setting; PPO does not use it",
            fix(k),
        )
        for k in OFF_POLICY_KEYS
        if k in algo
    ]


def validate_spec_data(data: dict[str, Any], source: str, overridden: set[str] | None = None) -> Spec:
    """The validated spec; `overridden` holds the key paths set by --set (their fix differs)."""
    got = data.get("schema_version", "missing")
    # `type(...) is int`: True == 1 and bool is an int subclass, so `schema_version = true` passed.
    if type(got) is not int or got != 1:
        raise SpecError(
            f"{source}: schema_version must be 1 (got {got!r})",
            diagnostics=[
                Diagnostic(
                    "spec.schema-version",
                    "schema_version",
                    f"must be 1 (got {got!r})",
                    ("set `schema_version = 1`" if got != "missing" else "add `schema_version = 1` at the top")
                    + f" in {source} (this unilab reads spec format 1)",
                )
            ],
        )
    # Off-policy keys in a PPO section are named by their rule, and reported with every other
    # invalid key (pydantic sees the section without them, so it does not call them unknown).
    diags = check_ppo_offpolicy_keys(data, overridden)
    checked = data
    if diags:
        checked = {**data, "algo": {k: v for k, v in data["algo"].items() if k not in OFF_POLICY_KEYS}}
    try:
        spec = Spec.model_validate(checked, context=SPEC_CONTEXT)
    except ValidationError as exc:
        diags += format_validation_error(exc, source, checked, overridden).diagnostics
    if diags:
        raise spec_error(source, diags)
    return spec


def read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = read_input(path, "spec file")
    except FileNotFoundError:
        raise SpecError(
            f"spec file {path} does not exist", fix="check the path, e.g. `unilab plan specs/g1.toml`"
        ) from None
    except IsADirectoryError:
        raise SpecError(f"{path} is a directory, not a spec file", fix="pass a .toml spec file") from None
    except OSError as exc:
        raise SpecError(f"spec file {path} cannot be read: {exc.strerror}", fix="check its permissions") from None
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte order mark is not part of the TOML
    except UnicodeDecodeError:
        raise SpecError(f"{path} is not UTF-8 text", fix="save the spec as UTF-8 TOML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path} is not valid TOML: {exc}", fix="fix the TOML syntax at the position shown") from None


def spec_from_data(data: dict[str, Any], overrides: list[str], source: str) -> Spec:
    """A spec's tables (as TOML reads them) with `--set` overrides applied, validated."""
    overridden = {".".join(parse_override(o)[0]) for o in overrides}
    return validate_spec_data(apply_overrides(data, overrides), source, overridden)


def load_spec(path: Path, overrides: list[str] | None = None) -> LoadedSpec:
    spec = spec_from_data(read_toml(path), overrides or [], str(path))
    return LoadedSpec(spec=spec, path=path, spec_dir=path.resolve().parent)
