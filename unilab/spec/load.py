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

# `algo.hidden_dims` is the shorthand for both networks' widths (unilab.spec.models): given by --set,
from unilab.sections import SPEC_CONTEXT, ReplayAlgoSpec
from unilab.spec.diagnose import CHOSEN_BY_NAME, format_validation_error, member_name, member_table_fix, spec_error
from unilab.spec.models import ALGO_MODELS, Spec

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


def _or_names(names: list[str]) -> str:
    quoted = [f'"{n}"' for n in names]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _other_members_keys(data: dict[str, Any], section: str, overridden: set[str]) -> list[tuple[str, list[str], str]]:
    """The keys of a `name`-chosen section (`[algo]`, `[task]`) that its member does not take but
    others do: (key, the members that take it, the fix)."""
    models, name = CHOSEN_BY_NAME[section], member_name(data, section)
    if name not in models:
        return []
    table = data[section]
    out = []
    for key in table:
        owners = [n for n, m in models.items() if key in m.model_fields]
        if not owners or key in models[name].model_fields:
            continue  # the member's own key, or no member's (spec.unknown-key names the nearest)
        if f"{section}.{key}" in overridden:
            fix = f"drop `--set {section}.{key}=...`"
        elif section in overridden:
            fix = f"drop {key} from your --set '{section}={{...}}'"
        elif f"{section}.name" in overridden:
            # `--set algo.name=ppo` on a SAC spec keeps the file's SAC keys; a table value replaces them all.
            fix = member_table_fix(section, name)
        else:
            fix = f"remove {section}.{key}, or set {section}.name = {_or_names(owners)}"
        out.append((key, owners, fix))
    return out


def check_ppo_offpolicy_keys(data: dict[str, Any], overridden: set[str] | None = None) -> list[Diagnostic]:
    """Replay keys (`batch_size`, `tau`, ...) under an on-policy algorithm (PPO), which has none."""
    model = ALGO_MODELS.get(member_name(data, "algo") or "")
    if model is None or issubclass(model, ReplayAlgoSpec):
        return []
    return [
        Diagnostic(
            "algo.ppo-offpolicy-keys",
            f"algo.{k}",
            f"`{k}` is an off-policy ({', '.join(owners)}) setting; PPO does not use it",
            fix,
        )
        for k, owners, fix in _other_members_keys(data, "algo", overridden or set())
    ]


def check_task_keys(data: dict[str, Any], overridden: set[str] | None = None) -> list[Diagnostic]:
    """Another task's keys in `[task]` (`commands` on cartpole), named by the tasks that take them."""
    name = member_name(data, "task")
    return [
        Diagnostic(
            "task.options", f"task.{k}", f"`{k}` is a setting of {', '.join(owners)}; {name} does not take it", fix
        )
        for k, owners, fix in _other_members_keys(data, "task", overridden or set())
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
    # Another member's keys in a `name`-chosen section (an off-policy key in a PPO section,
    # `commands` on cartpole) are named by their rule, and reported with every other invalid key
    # (pydantic sees the section without them, so it does not call them unknown).
    diags = check_ppo_offpolicy_keys(data, overridden) + check_task_keys(data, overridden)
    checked = data
    for d in diags:
        section, key = d.key_path.split(".", 1)
        checked = {**checked, section: {k: v for k, v in checked[section].items() if k != key}}
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
    merged = apply_overrides(data, overrides)
    # `--set task.name=g1_walk` on a g1_walk spec leaves the section's model as it was: the fixes of
    # its keys are the file's, not "replace the whole table".
    overridden -= {f"{s}.name" for s in CHOSEN_BY_NAME if _given_name(data, s) == _given_name(merged, s)}
    return validate_spec_data(merged, source, overridden)


def load_spec(path: Path, overrides: list[str] | None = None) -> LoadedSpec:
    spec = spec_from_data(read_toml(path), overrides or [], str(path))
    return LoadedSpec(spec=spec, path=path, spec_dir=path.resolve().parent)


def _given_name(data: dict[str, Any], section: str) -> object:
    """The section's `name` as given, valid or not (`member_name` keeps only a string)."""
    table = data.get(section)
    return table.get("name") if isinstance(table, dict) else None
