"""Spec validation errors as diagnostics: rule id, key path, what is wrong, and the fix.

Pydantic reports every broken key; this module turns each into one `Diagnostic` that names the key
as the user wrote it (no union-member tags), says what the value must be, and gives the edit or
`--set` that fixes it: the key's default when it has one, the nearest valid key for a misspelt one.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

import tomli_w
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from unilab.errors import Diagnostic, SpecError
from unilab.spec.models import FlashSacSpec, PpoSpec, SacSpec, Spec


@dataclass(frozen=True)
class SpecRule:
    id: str
    requires: str


# Stable ids of the spec's own checks (the plan's rules are in unilab.plan.rules).
SPEC_RULES: tuple[SpecRule, ...] = (
    SpecRule("spec.schema-version", "`schema_version = 1` at the top of the file (the spec format this unilab reads)."),
    SpecRule("spec.unknown-key", "Every key is one the section takes (docs/spec.md); a misspelt key is not ignored."),
    SpecRule(
        "spec.missing-key",
        "Required keys are present: the `[run]`, `[task]` and `[algo]` tables, `run.name`, `run.total_env_steps`, "
        "`task.name`, `task.num_envs`, `algo.name`.",
    ),
    SpecRule(
        "spec.type", 'A value has the key\'s type, taken as written (`16`, not `"16"` or `16.0`; `true`, not `1`).'
    ),
    SpecRule("spec.value", "A value is within the key's range, choices or format (e.g. `task.num_envs >= 1`)."),
    SpecRule("algo.ppo-offpolicy-keys", "A PPO `[algo]` section sets no off-policy key (e.g. `batch_size`)."),
)

_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
# Pydantic names the member of a plain union it tried in the error location: "constrained-int",
# "literal['auto']", "list[union[...]]", or a bare type name. Spec keys are snake_case
# identifiers, so anything else in a location is such a tag and means nothing to the user.
_BRANCH_TAGS = frozenset({"int", "float", "str", "bool", "list", "tuple", "dict", "none"})
_ALGO_MODELS: dict[str, type[BaseModel]] = {"sac": SacSpec, "flashsac": FlashSacSpec, "ppo": PpoSpec}
_TABLE_ERRORS = ("model_type", "model_attributes_type", "dict_type")
# Keys whose format a regex states badly: what the value must be, in words.
# The fix for a device that is not one: the spelling users reach for ("cuda:0") is not unilab's.
_DEVICES_FIX = (
    'set `training.devices = [0]` for the first visible GPU (a list: one rank per device), or "cpu"; '
    "`unilab host` lists the GPUs, their indices and UUIDs"
)
_FORMAT_WORDS = {
    "training.devices": '"cpu", a GPU index (0, 1, ...) or a GPU or MIG UUID ("GPU-...")',
    "run.name": "a name of letters, digits, '_', '.' and '-' that starts with a letter or digit",
}


def _loc(loc: tuple[Any, ...], unknown_key: bool = False) -> str:
    """`("training", "devices", "list[...]", 0, "constrained-int")` -> `training.devices[0]`."""
    out = ""
    for i, p in enumerate(loc):
        if isinstance(p, int):
            out += f"[{p}]"
        elif unknown_key and i == len(loc) - 1:
            out += f".{p}" if out else str(p)  # the user's own (unknown) key, spelled as written
        elif (i == 1 and loc[0] == "algo" and p in _ALGO_MODELS) or not _KEY.match(p) or p in _BRANCH_TAGS:
            continue
        else:
            out += f".{p}" if out else p
    return out or "(top level)"


def _rule(err: Any) -> str:
    t = str(err["type"])
    if t == "extra_forbidden":
        return "spec.unknown-key"
    if t == "missing":
        return "spec.missing-key"
    if t.endswith(("_type", "_parsing")) or t in _TABLE_ERRORS:
        return "spec.type"
    return "spec.value"


def _message(err: Any, where: str) -> str:
    t = str(err["type"])
    if t == "extra_forbidden":
        return "unknown key"
    if t == "missing":
        return "required key is missing"
    if t in _TABLE_ERRORS:
        return "must be a table (a [section] or { key = value, ... })"
    if t == "string_pattern_mismatch" and where.split("[")[0] in _FORMAT_WORDS:
        return "must be " + _FORMAT_WORDS[where.split("[")[0]]
    text = str(err["msg"]).replace(" after validation", "").removeprefix("Value error, ")
    return text.replace("Input should be ", "must be ", 1)


def _rank(err: Any) -> int:
    """0: the input had the right type but broke a constraint (the useful message); 1: it is not
    one of the listed literals; 2: it has the wrong type for this union member."""
    t = str(err["type"])
    if t == "literal_error":
        return 1
    if t.endswith(("_type", "_parsing")) or t in _TABLE_ERRORS:
        return 2
    return 0


def _one_line(errs: list[Any], where: str) -> tuple[str, Any]:
    """One message for one key: a union reports every member it tried; a constraint the
    value's own type broke says most, else the members' expectations are listed together."""
    best = min(errs, key=_rank)
    if _rank(best) == 0 or len(errs) == 1:
        return _message(best, where), best
    wants: list[str] = []
    for e in errs:
        w = _message(e, where).removeprefix("must be ")
        if w not in wants:
            wants.append(w)
    text = ", ".join(wants[:-1]) + f" or {wants[-1]}" if len(wants) > 1 else wants[0]
    return f"must be {text}", best


def _section(keys: list[str], data: dict[str, Any]) -> type[BaseModel] | None:
    """The model of the table that holds the key `keys[-1]` (None: not a spec table)."""
    model: type[BaseModel] = Spec
    for key in keys[:-1]:
        if model is Spec and key == "algo":
            name = data.get("algo", {}).get("name") if isinstance(data.get("algo"), dict) else None
            nxt = _ALGO_MODELS.get(name) if isinstance(name, str) else None
        else:
            field = model.model_fields.get(key)
            ann = field.annotation if field is not None else None
            nxt = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if nxt is None:
            return None
        model = nxt
    return model


def _toml(value: Any, compact: bool = False) -> str:
    """A default as one line of TOML (tomli-w would spread an array over several lines);
    `compact`: no spaces, so that it stays one shell word after --set."""
    if isinstance(value, list | tuple):
        return "[" + ("," if compact else ", ").join(_toml(v, compact) for v in value) + "]"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def _default(model: type[BaseModel] | None, key: str) -> tuple[bool, Any]:
    field = model.model_fields.get(key) if model is not None else None
    if field is None or field.is_required():
        return False, None
    value = field.default_factory() if field.default is PydanticUndefined else field.default  # type: ignore[misc]
    return not isinstance(value, BaseModel), value


def _table_name(keys: list[str]) -> str:
    return f"[{'.'.join(keys[:-1])}]" if len(keys) > 1 else "the top level"


def _fix(rule: str, where: str, msg: str, data: dict[str, Any], source: str, overridden: set[str]) -> str:
    keys = [k for k in re.split(r"\[\d+\]|\.", where) if k]
    model = _section(keys, data)
    via_set = keys and ".".join(keys) in overridden
    if rule == "spec.unknown-key":
        drop = f"drop `--set {where}=...`" if via_set else f"remove `{where}` from {source}"
        if model is None:
            return f"{drop} (see docs/spec.md for the keys each section takes)"
        valid = list(model.model_fields)
        near = difflib.get_close_matches(keys[-1], valid, n=1, cutoff=0.6)
        prefix = ".".join(keys[:-1])
        if near:
            return f"{drop}; did you mean `{prefix + '.' if prefix else ''}{near[0]}`?"
        return f"{drop}; {_table_name(keys)} takes: {', '.join(valid)}"
    has_default, value = _default(model, keys[-1]) if keys else (False, None)
    if keys[:2] == ["training", "devices"]:
        return _DEVICES_FIX
    if rule == "spec.missing-key":
        field = model.model_fields.get(keys[-1]) if model is not None else None
        ann = field.annotation if field is not None else None
        if (isinstance(ann, type) and issubclass(ann, BaseModel)) or (model is Spec and keys[-1] == "algo"):
            return f"add the [{'.'.join(keys)}] table to {source} (docs/spec.md lists its keys)"
        what = (field.description or "") if field is not None else ""
        return f"add `{keys[-1]} = ...` under {_table_name(keys)} in {source}" + (f" ({what})" if what else "")
    key = ".".join(keys)
    want = msg.split(" (got ", 1)[0].replace("must be", "is", 1)
    if via_set:
        if has_default and value is not None:
            return f"pass --set {key}={_toml(value, compact=True)} (the default), or drop that --set"
        return f"pass --set {key}=<a value that {want}>, or drop that --set"
    if has_default:
        if value is None:
            return f"remove `{key}` from {source} (unset is the default), or give it a value that {want}"
        return f"set `{key} = {_toml(value)}` (the default) in {source}, or remove the key"
    return f"set `{key}` in {source} to a value that {want}"


def format_validation_error(
    exc: ValidationError, source: str, data: dict[str, Any], overridden: set[str] | None = None
) -> SpecError:
    by_key: dict[str, list[Any]] = {}
    for err in exc.errors(include_url=False):
        by_key.setdefault(_loc(tuple(err["loc"]), err["type"] == "extra_forbidden"), []).append(err)
    diags = []
    for where, errs in by_key.items():
        # An error inside a key explains the one on the key itself: `hidden_dims = [0]` also
        # reports "at least 1 item, not 0" (pydantic drops the failed item), which is false.
        if any(k.startswith((where + ".", where + "[")) for k in by_key if k != where):
            continue
        msg, err = _one_line(errs, where)
        given = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict) else f" (got {given!r})"
        # A union whose members all refused the value's type (`workers = true`: not an int, not
        # "auto") is a type error even though the literal member reports it as a wrong choice.
        rule = "spec.type" if _rank(err) == 1 and any(_rank(e) == 2 for e in errs) else _rule(err)
        diags.append(Diagnostic(rule, where, msg + shown, _fix(rule, where, msg, data, source, overridden or set())))
    n = len(diags)
    return SpecError(f"{source}: {n} invalid value{'s' if n != 1 else ''}", diagnostics=diags)
