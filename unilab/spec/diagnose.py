"""Spec validation errors as diagnostics: rule id, key path, what is wrong, and the fix.

Pydantic reports every broken key; this module turns each into one `Diagnostic` that names the key
as the user wrote it (no union-member tags), says what the value must be, and gives the edit or
`--set` that fixes it: the key's default when it has one, the nearest valid key for a misspelt one
(the nearest name for a misspelt `algo.name` or `task.name`). Pydantic's own type names (tuple, dict, model) are
never shown: a TOML spec has lists and tables.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import tomli_w
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from unilab.errors import Diagnostic, SpecError
from unilab.plugins import PluginError
from unilab.spec.models import ALGO_MODELS, TASK_MODELS, Spec, plugin_algo_model, plugin_task_model


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
        "`task.name`, `task.num_envs`, `task.motion` (g1_motion_tracking), `algo.name`.",
    ),
    SpecRule(
        "spec.type", 'A value has the key\'s type, taken as written (`16`, not `"16"` or `16.0`; `true`, not `1`).'
    ),
    SpecRule("spec.value", "A value is within the key's range, choices or format (e.g. `task.num_envs >= 1`)."),
    SpecRule("algo.ppo-offpolicy-keys", "A PPO `[algo]` section sets no off-policy key (e.g. `batch_size`)."),
    SpecRule(
        "task.options",
        "A `[task]` section sets no key of another task: velocity commands and the gait clock are g1_walk's, "
        "the reference motion g1_motion_tracking's; the cartpole check task takes no robot, noise, "
        "randomization, pushes or joint action scale.",
    ),
)

_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
# Pydantic names the member of a plain union it tried in the error location: "constrained-int",
# "literal['auto']", "list[union[...]]", or a bare type name. Spec keys are snake_case
# identifiers, so anything else in a location is such a tag and means nothing to the user.
_BRANCH_TAGS = frozenset({"int", "float", "str", "bool", "list", "tuple", "dict", "none"})
# Tables whose keys the user names (`[task.reward_weights]`): a key there is never a branch tag.
_USER_KEY_TABLES = frozenset({"reward_weights"})
# The sections whose model is chosen by their `name` key, and their models by name.
CHOSEN_BY_NAME: dict[str, dict[str, type[BaseModel]]] = {"algo": dict(ALGO_MODELS), "task": dict(TASK_MODELS)}
_PLUGIN_MODELS: dict[str, Callable[[str], type[BaseModel] | None]] = {
    "algo": plugin_algo_model,
    "task": plugin_task_model,
}


def chosen_model(section: str, name: str | None) -> type[BaseModel] | None:
    """The `[algo]` or `[task]` model a `name` chooses: a built-in one or an installed plugin's."""
    if name is None:
        return None
    model = CHOSEN_BY_NAME[section].get(name)
    if model is None:
        try:
            model = _PLUGIN_MODELS[section](name)
        except PluginError:  # validation reports it; here it only has no keys to show
            return None
    return model


_TABLE_ERRORS = ("model_type", "model_attributes_type", "dict_type")
# Pydantic's sequence types; a TOML spec only has lists (arrays), whatever the model holds.
_LIST_ERRORS = ("list_type", "tuple_type", "set_type", "frozen_set_type")
_LIST_ORIGINS = (list, tuple, set, frozenset)
# A discriminated union (`[algo]` chosen by `name`) that cannot pick its member.
_TAG_ERRORS = ("union_tag_invalid", "union_tag_not_found")
_ITEM_WORDS: dict[Any, str] = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}
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
        elif i > 0 and loc[i - 1] in _USER_KEY_TABLES:
            out += f".{p}"  # a key of the user's own table (a reward term's name), whatever it spells
        elif unknown_key and i == len(loc) - 1:
            out += f".{p}" if out else str(p)  # the user's own (unknown) key, spelled as written
        elif (i == 1 and p in CHOSEN_BY_NAME.get(loc[0], {})) or not _KEY.match(p) or p in _BRANCH_TAGS:
            continue
        else:
            out += f".{p}" if out else p
    return out or "(top level)"


def member_name(data: dict[str, Any], section: str) -> str | None:
    """The `name` a spec's `[algo]` or `[task]` table gives (None: no table, or no string name)."""
    table = data.get(section)
    name = table.get("name") if isinstance(table, dict) else None
    return name if isinstance(name, str) else None


def _discriminator(err: Any) -> str | None:
    """The key a discriminated union is chosen by (`name`); pydantic gives it repr'd: "'name'"."""
    m = re.fullmatch(r"'([a-z_][a-z0-9_]*)'", str((err.get("ctx") or {}).get("discriminator", "")))
    return m.group(1) if m else None


def _missing_item(err: Any) -> bool:
    """A fixed-length list (`lin_vel_x = [1.0]`) that is short: pydantic says the item is missing."""
    loc = tuple(err["loc"])
    return err["type"] == "missing" and bool(loc) and isinstance(loc[-1], int)


def _key(err: Any) -> str:
    """The key path an error is about, as the user writes it."""
    loc = tuple(err["loc"])
    if err["type"] in _TAG_ERRORS and (disc := _discriminator(err)):
        where = _loc(loc)
        return disc if where == "(top level)" else f"{where}.{disc}"  # `algo.name`, not `algo`
    if _missing_item(err):
        return _loc(loc[:-1])
    return _loc(loc, err["type"] == "extra_forbidden")


def _strip(ann: Any) -> Any:
    while get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    return ann


def _members(ann: Any) -> tuple[Any, ...]:
    ann = _strip(ann)
    return tuple(_strip(a) for a in get_args(ann)) if get_origin(ann) in (Union, types.UnionType) else (ann,)


def _items(ann: Any) -> tuple[Any, int | None] | None:
    """The item type of a list-like annotation and its fixed length (None: any length)."""
    ann = _strip(ann)
    args = get_args(ann)
    if get_origin(ann) is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0], None
        if args and all(_strip(a) == _strip(args[0]) for a in args):
            return args[0], len(args)
        return None
    if get_origin(ann) in _LIST_ORIGINS and len(args) == 1:
        return args[0], None
    return None


def _plural(ann: Any) -> str | None:
    """`int` -> "integers", `list[int]` -> "lists of integers"; None: no plain words for it."""
    ann = _strip(ann)
    if ann in _ITEM_WORDS:
        return _ITEM_WORDS[ann]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "tables"
    items = _items(ann)
    if items is None or items[1] is not None or (words := _plural(items[0])) is None:
        return None
    return f"lists of {words}"


def _field_type(where: str, data: dict[str, Any]) -> Any:
    """The annotation of the value at `where` (`training.collector_cpu_ids[0]`: an item of the
    key's list); None where the path leaves the spec's models."""
    keys = [k for k in re.split(r"\[\d+\]|\.", where) if k]
    model = _section(keys, data) if keys else None
    field = model.model_fields.get(keys[-1]) if model is not None else None
    if field is None:
        return None
    ann: Any = field.annotation
    for _ in re.findall(r"\[\d+\]", where.rsplit(".", 1)[-1]):
        items = _list_items(ann)
        if items is None:
            return None
        ann = items[0]
    return ann


def _list_items(ann: Any) -> tuple[Any, int | None] | None:
    """`_items` of the one list-like member of a (possibly union) annotation; None: not one."""
    found = [i for m in _members(ann) if (i := _items(m)) is not None]
    return found[0] if len(found) == 1 else None


def _list_words(err: Any, where: str, data: dict[str, Any]) -> str:
    """What a list-typed value must be: "a list of integers", "a list of 2 numbers", "a list"."""
    items = _list_items(_field_type(where, data))
    words = _plural(items[0]) if items is not None else None
    if items is None or words is None:
        # Pydantic's own words are right for a list; a tuple or set is its name, not TOML's.
        return "a valid list" if err["type"] == "list_type" else "a list"
    return f"a list of {items[1]} {words}" if items[1] is not None else f"a list of {words}"


def _tags(where: str, data: dict[str, Any]) -> list[Any]:
    """The values the discriminator key takes, read from the union's members (their `Literal` tags)."""
    disc = where.rsplit(".", 1)[-1]
    out: list[Any] = []
    for member in _members(_field_type(where.rpartition(".")[0], data)) if "." in where else ():
        field = member.model_fields.get(disc) if isinstance(member, type) and issubclass(member, BaseModel) else None
        if field is not None and get_origin(_strip(field.annotation)) is Literal:
            out += [t for t in get_args(_strip(field.annotation)) if t not in out]
    return out


def _one_of(tags: list[Any]) -> str:
    shown = ", ".join(_toml(t) for t in tags)
    return f"one of {shown}" if len(tags) > 1 else shown


def _near(word: str, choices: list[str]) -> str | None:
    """The choice a misspelling meant: the same word in another case, else the closest one."""
    by_lower = {c.lower(): c for c in choices}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    near = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[near[0]] if near else None


def _rule(err: Any) -> str:
    t = str(err["type"])
    if t == "extra_forbidden":
        return "spec.unknown-key"
    if _missing_item(err):
        return "spec.value"
    if t in ("missing", "union_tag_not_found"):
        return "spec.missing-key"
    if t.endswith(("_type", "_parsing")) or t in _TABLE_ERRORS:
        return "spec.type"
    return "spec.value"


def _message(err: Any, where: str, data: dict[str, Any]) -> str:
    t = str(err["type"])
    if t == "extra_forbidden":
        return "unknown key"
    if _missing_item(err) or t in _LIST_ERRORS:
        return "must be " + _list_words(err, where, data)
    if t in ("missing", "union_tag_not_found"):
        return "required key is missing"
    if t == "union_tag_invalid":
        tags = _tags(where, data)
        return f"must be {_one_of(tags)}" if tags else "is not one of the names this key takes"
    if t in _TABLE_ERRORS:
        return "must be a table (a [section] or { key = value, ... })"
    if t in ("too_short", "too_long"):  # "Tuple should have at least 1 item": the list, in TOML
        return re.sub(r"^(Tuple|Set|Frozenset) ", "List ", str(err["msg"]).replace(" after validation", ""))
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


def _one_line(errs: list[Any], where: str, data: dict[str, Any]) -> tuple[str, Any]:
    """One message for one key: a union reports every member it tried; a constraint the
    value's own type broke says most, else the members' expectations are listed together."""
    best = min(errs, key=_rank)
    if _rank(best) == 0 or len(errs) == 1:
        return _message(best, where, data), best
    wants: list[str] = []
    for e in errs:
        w = _message(e, where, data).removeprefix("must be ")
        if w not in wants:
            wants.append(w)
    text = ", ".join(wants[:-1]) + f" or {wants[-1]}" if len(wants) > 1 else wants[0]
    return f"must be {text}", best


def _section(keys: list[str], data: dict[str, Any]) -> type[BaseModel] | None:
    """The model of the table that holds the key `keys[-1]` (None: not a spec table)."""
    model: type[BaseModel] = Spec
    for key in keys[:-1]:
        if model is Spec and key in CHOSEN_BY_NAME:
            name = member_name(data, key)
            nxt = chosen_model(key, name)
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


def _tag_fix(err: Any, where: str, data: dict[str, Any], source: str, overridden: set[str]) -> str:
    """The fix of a discriminator (`algo.name`) that names no member: the nearest name, as an
    edit of the file or as the --set that set it."""
    tags = _tags(where, data)
    if err["type"] == "union_tag_not_found":
        table, _, disc = where.rpartition(".")
        tables = table.split(".")
        if table and tags and any(".".join(tables[: i + 1]) in overridden for i in range(len(tables))):
            # The table came from a --set (`algo={}`): the name goes in that --set, beside its keys.
            if data.get(table):
                return f"add {disc}=... inside your --set '{table}={{...}}' ({_one_of(tags)})"
            return f"name it in that --set: --set '{table}={{{disc}={_toml(tags[0])}}}' ({_one_of(tags)})"
        under = f"[{table}]" if table else "the top level"
        return f"add `{disc} = ...` under {under} in {source}" + (f" ({_one_of(tags)})" if tags else "")
    given = err.get("input", {}).get(where.rsplit(".", 1)[-1]) if isinstance(err.get("input"), dict) else None
    near = _near(given, [t for t in tags if isinstance(t, str)]) if isinstance(given, str) else None
    keys = where.split(".")
    if any(".".join(keys[: i + 1]) in overridden for i in range(len(keys))):
        if near is not None:
            return f"did you mean {_toml(near)}? pass --set {where}={_toml(near, compact=True)}, or drop that --set"
        return f"pass --set {where}=<{_one_of(tags)}>, or drop that --set"
    if near is not None:
        return f"did you mean {_toml(near)}? set `{where} = {_toml(near)}` in {source}"
    fix = f"set `{where}` in {source} to {_one_of(tags) if tags else 'the name of one of its variants'}"
    if where in _PLUGIN_NAMED:
        # A name no built-in has may be a plugin's whose package is not installed here.
        named = _toml(given) if isinstance(given, str) else "it"
        fix += f", or install the package that registers {named} (`unilab plugins` lists the installed ones)"
    return fix


# The keys whose name an installed package may supply (unilab.plugins).
_PLUGIN_NAMED = ("task.name", "algo.name")


def _meant_choice(where: str, data: dict[str, Any]) -> str | None:
    """For a key that takes one of a few names (a Literal), the name a misspelt value meant."""
    ann = _strip(_field_type(where, data))
    if get_origin(ann) is not Literal:
        return None
    choices = [c for c in get_args(ann) if isinstance(c, str)]
    node: Any = data
    for k in where.split("."):
        node = node.get(k) if isinstance(node, dict) else None
    return _near(node, choices) if isinstance(node, str) and node not in choices else None


def _set_member_name(keys: list[str], data: dict[str, Any], overridden: set[str]) -> str | None:
    """The member `--set algo.name=...` (or `task.name`) chose, for a key of that section from the
    file: `name` picks the section's model only in those sections (run.name does not)."""
    section = keys[0] if keys else ""
    if len(keys) < 2 or section not in CHOSEN_BY_NAME or keys[1] == "name" or f"{section}.name" not in overridden:
        return None
    return member_name(data, section)


def member_table_fix(section: str, name: str) -> str:
    """The fix for keys `--set algo.name=...` (`task.name`) left behind: the file's keys are another
    member's, so the whole table goes in the --set, with the member's required keys."""
    model = chosen_model(section, name)
    if model is None:
        raise KeyError(name)
    required = [k for k, f in model.model_fields.items() if f.is_required() and k != "name"]
    braces = ", ".join([f"name={_toml(name)}", *(f"{k}=..." for k in required)])
    return (
        f"pass --set '{section}={{{braces}}}' instead of --set {section}.name=...: a table replaces the whole "
        f"[{section}] section ({name}'s defaults; add its keys inside the braces)"
    )


def _fix(rule: str, where: str, msg: str, data: dict[str, Any], source: str, overridden: set[str]) -> str:
    keys = [k for k in re.split(r"\[\d+\]|\.", where) if k]
    model = _section(keys, data)
    via_set = keys and ".".join(keys) in overridden
    # A table given whole by --set (`--set 'algo={...}'`) holds this key: the fix goes in that --set.
    table_set = next(
        (".".join(keys[:i]) for i in range(len(keys) - 1, 0, -1) if ".".join(keys[:i]) in overridden), None
    )
    in_table = f"in your --set '{table_set}={{...}}'" if table_set else ""
    member = _set_member_name(keys, data, overridden)
    if member and rule == "spec.missing-key" and not table_set:
        # `--set task.name=g1_motion_tracking` on a g1_walk spec: the file's keys stay good, one is missing.
        field = model.model_fields.get(keys[-1]) if model is not None else None
        what = f": {field.description}" if field is not None and field.description else ""
        return f"add --set {where}=... ({member} requires it){what}"
    if member and not via_set and not table_set:
        # `--set algo.name=flashsac` on a SAC spec keeps the file's SAC keys: replace the table instead.
        return member_table_fix(keys[0], member)
    if rule == "spec.unknown-key":
        # `--set zz.yy=1` makes an unknown table `zz`: the key came from that --set.
        given = next((o for o in sorted(overridden) if o == where or o.startswith(where + ".")), None)
        if given:
            drop = f"drop `--set {given}=...`"
        elif table_set:
            drop = f"drop {where.removeprefix(table_set + '.')} from your --set '{table_set}={{...}}'"
        else:
            drop = f"remove `{where}` from {source}"
        if model is None:
            return f"{drop} (see docs/spec.md for the keys each section takes)"
        valid = list(model.model_fields)
        near = _near(keys[-1], valid)
        prefix = ".".join(keys[:-1])
        if near:
            return f"{drop}; did you mean `{prefix + '.' if prefix else ''}{near}`?"
        return f"{drop}; {_table_name(keys)} takes: {', '.join(valid)}"
    has_default, value = _default(model, keys[-1]) if keys else (False, None)
    if keys[:2] == ["training", "devices"]:
        return _DEVICES_FIX
    if rule == "spec.missing-key":
        field = model.model_fields.get(keys[-1]) if model is not None else None
        ann = field.annotation if field is not None else None
        if (isinstance(ann, type) and issubclass(ann, BaseModel)) or (model is Spec and keys[-1] in CHOSEN_BY_NAME):
            return f"add the [{'.'.join(keys)}] table to {source} (docs/spec.md lists its keys)"
        what = (field.description or "") if field is not None else ""
        if table_set:  # the --set table replaced the file's, keys and all
            return f"add {keys[-1]} = ... {in_table} (it replaces the whole [{table_set}] table)" + (
                f" ({what})" if what else ""
            )
        return f"add `{keys[-1]} = ...` under {_table_name(keys)} in {source}" + (f" ({what})" if what else "")
    key = ".".join(keys)
    meant = _meant_choice(where, data) if where == key else None
    if meant is not None:  # `sim.backend = "warp"`: the closest of the names the key takes
        if via_set:
            return f"did you mean {_toml(meant)}? pass --set {key}={_toml(meant, compact=True)}, or drop that --set"
        if table_set:
            return f"did you mean {_toml(meant)}? {in_table}, set {key.removeprefix(table_set + '.')} = {_toml(meant)}"
        return f"did you mean {_toml(meant)}? set `{key} = {_toml(meant)}` in {source}"
    want = re.sub(r"^List should have (.*?)(, not \d+)?$", r"has \1", msg.split(" (got ", 1)[0])
    want = want.replace("must be", "is", 1)
    # pydantic's "String should have at least 1 character", "Input should be ...": a value that has / is.
    want = re.sub(r"^\w+ should (have|be)\b", lambda m: "has" if m.group(1) == "have" else "is", want)
    # An item of the key's list (`training.collector_cpu_ids[0]`) is not the key's whole value.
    that = f"that {want}" if where == key else f"whose item {where.removeprefix(key)} {want}"
    if via_set:
        if has_default and value is not None:
            return f"pass --set {key}={_toml(value, compact=True)} (the default), or drop that --set"
        return f"pass --set {key}=<a value {that}>, or drop that --set"
    if table_set:
        inner = key.removeprefix(table_set + ".")
        if has_default and value is not None:
            return f"{in_table}, set {inner} = {_toml(value, compact=True)} (the default) or leave it out"
        return f"{in_table}, give {inner} a value {that}"
    if has_default:
        if value is None:
            return f"remove `{key}` from {source} (unset is the default), or give it a value {that}"
        return f"set `{key} = {_toml(value)}` (the default) in {source}, or remove the key"
    return f"set `{key}` in {source} to a value {that}"


def format_validation_error(
    exc: ValidationError, source: str, data: dict[str, Any], overridden: set[str] | None = None
) -> SpecError:
    by_key: dict[str, list[Any]] = {}
    for err in exc.errors(include_url=False):
        by_key.setdefault(_key(err), []).append(err)
    diags = []
    for where, errs in by_key.items():
        # An error inside a key explains the one on the key itself: `hidden_dims = [0]` also
        # reports "at least 1 item, not 0" (pydantic drops the failed item), which is false.
        if any(k.startswith((where + ".", where + "[")) for k in by_key if k != where):
            continue
        msg, err = _one_line(errs, where, data)
        given = err.get("input")
        if err["type"] == "union_tag_invalid" and isinstance(given, dict):
            given = given.get(where.rsplit(".", 1)[-1])  # the name, not the whole table
        shown = (
            ""
            if (err["type"] in ("missing", "extra_forbidden", "union_tag_not_found") and not _missing_item(err))
            or isinstance(given, dict)
            else f" (got {given!r})"
        )
        # A union whose members all refused the value's type (`workers = true`: not an int, not
        # "auto") is a type error even though the literal member reports it as a wrong choice.
        rule = "spec.type" if _rank(err) == 1 and any(_rank(e) == 2 for e in errs) else _rule(err)
        if err["type"] in _TAG_ERRORS and _discriminator(err):
            fix = _tag_fix(err, where, data, source, overridden or set())
        else:
            fix = _fix(rule, where, msg, data, source, overridden or set())
        diags.append(Diagnostic(rule, where, msg + shown, fix))
    return spec_error(source, diags)


def spec_error(source: str, diags: list[Diagnostic]) -> SpecError:
    """One error for every broken key of a spec."""
    n = len(diags)
    return SpecError(f"{source}: {n} invalid value{'s' if n != 1 else ''}", diagnostics=diags)
