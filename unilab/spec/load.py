"""Read a spec file, apply `--set key.path=VALUE` overrides, validate. Every failure is a
one-paragraph SpecError naming the file, the key path and what was expected."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from unilab.errors import Diagnostic, PlanRefused, SpecError
from unilab.spec.models import Spec

# Keys that only mean something to off-policy learners; a PPO spec that sets them is refused
# by name (rule algo.ppo-offpolicy-keys) instead of a generic "extra field" error.
OFF_POLICY_KEYS = (
    "batch_size", "buffer_size", "updates_per_step", "warmup_env_steps", "actor_lr", "critic_lr", "alpha_lr",
    "tau", "alpha_init", "actor_update_every", "num_atoms", "v_min", "v_max", "critic", "layer_norm",
    "target_entropy", "num_blocks", "expansion", "n_step", "target_action_std", "reward_scaling",
)  # fmt: skip


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
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        if raw.strip() and all(c.isalnum() or c in "_-.:/" for c in raw.strip()):
            value = raw.strip()
        else:
            raise SpecError(
                f"--set {key.strip()}: {raw.strip()!r} is not a TOML value",
                fix='quote strings and use TOML arrays, e.g. --set training.devices=["cpu","cpu"]',
            ) from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
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


_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
# Pydantic names the member of a plain union it tried in the error location: "constrained-int",
# "literal['auto']", "list[union[...]]", or a bare type name. Spec keys are snake_case
# identifiers, so anything else in a location is such a tag and means nothing to the user.
_BRANCH_TAGS = frozenset({"int", "float", "str", "bool", "list", "tuple", "dict", "none"})
_ALGO_TAGS = ("sac", "flashsac", "ppo")  # the discriminated [algo] union puts its tag in the location
_TABLE_ERRORS = ("model_type", "model_attributes_type", "dict_type")


def _loc(loc: tuple[Any, ...], unknown_key: bool = False) -> str:
    """`("training", "devices", "list[...]", 0, "constrained-int")` -> `training.devices[0]`."""
    out = ""
    for i, p in enumerate(loc):
        if isinstance(p, int):
            out += f"[{p}]"
        elif unknown_key and i == len(loc) - 1:
            out += f".{p}" if out else str(p)  # the user's own (unknown) key, spelled as written
        elif (i == 1 and loc[0] == "algo" and p in _ALGO_TAGS) or not _KEY.match(p) or p in _BRANCH_TAGS:
            continue
        else:
            out += f".{p}" if out else p
    return out or "(top level)"


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key (see docs/spec.md for the keys this section takes)"
    if err["type"] == "missing":
        return "required key is missing"
    if err["type"] in _TABLE_ERRORS:
        return "must be a table (a [section] or { key = value, ... })"
    return str(err["msg"]).replace(" after validation", "")


def _rank(err: Any) -> int:
    """0: the input had the right type but broke a constraint (the useful message); 1: it is not
    one of the listed literals; 2: it has the wrong type for this union member."""
    t = str(err["type"])
    if t == "literal_error":
        return 1
    if t.endswith(("_type", "_parsing")) or t in _TABLE_ERRORS:
        return 2
    return 0


def _one_line(errs: list[Any]) -> tuple[str, Any]:
    """One message for one key: a union reports every member it tried; a constraint the
    value's own type broke says most, else the members' expectations are listed together."""
    best = min(errs, key=_rank)
    if _rank(best) == 0 or len(errs) == 1:
        return _message(best), best
    wants: list[str] = []
    for e in errs:
        w = _message(e).removeprefix("Input should be ")
        if w not in wants:
            wants.append(w)
    text = ", ".join(wants[:-1]) + f" or {wants[-1]}" if len(wants) > 1 else wants[0]
    return f"Input should be {text}", best


def format_validation_error(exc: ValidationError, source: str) -> SpecError:
    by_key: dict[str, list[Any]] = {}
    for err in exc.errors(include_url=False):
        by_key.setdefault(_loc(tuple(err["loc"]), err["type"] == "extra_forbidden"), []).append(err)
    lines = []
    for where, errs in by_key.items():
        # An error inside a key explains the one on the key itself: `hidden_dims = [0]` also
        # reports "at least 1 item, not 0" (pydantic drops the failed item), which is false.
        if any(k.startswith((where + ".", where + "[")) for k in by_key if k != where):
            continue
        msg, err = _one_line(errs)
        given = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict) else f" (got {given!r})"
        lines.append(f"  {where}: {msg}{shown}")
    n = len(lines)
    return SpecError(
        f"{source}: {n} invalid value{'s' if n != 1 else ''}",
        detail="\n".join(lines),
        fix="correct the keys above; every key and its default is listed in docs/spec.md",
    )


def check_ppo_offpolicy_keys(data: dict[str, Any]) -> list[Diagnostic]:
    algo = data.get("algo")
    if not isinstance(algo, dict) or algo.get("name") != "ppo":
        return []
    return [
        Diagnostic(
            "algo.ppo-offpolicy-keys",
            f"algo.{k}",
            f"`{k}` is an off-policy (SAC/FlashSAC) setting; PPO does not use it",
            f'remove algo.{k}, or set algo.name = "sac" or "flashsac"',
        )
        for k in OFF_POLICY_KEYS
        if k in algo
    ]


def validate_spec_data(data: dict[str, Any], source: str) -> Spec:
    got = data.get("schema_version", "missing")
    # `type(...) is int`: True == 1 and bool is an int subclass, so `schema_version = true` passed.
    if type(got) is not int or got != 1:
        raise SpecError(
            f"{source}: schema_version must be 1 (got {got!r})",
            fix="add `schema_version = 1` at the top of the spec (this unilab reads spec format 1)",
        )
    diags = check_ppo_offpolicy_keys(data)
    if diags:
        raise PlanRefused(diags)
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(exc, source) from None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(
            f"spec file {path} does not exist", fix="check the path, e.g. `unilab plan specs/g1.toml`"
        ) from None
    except IsADirectoryError:
        raise SpecError(f"{path} is a directory, not a spec file", fix="pass a .toml spec file") from None
    except OSError as exc:
        raise SpecError(f"spec file {path} cannot be read: {exc.strerror}", fix="check its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path} is not UTF-8 text", fix="save the spec as UTF-8 TOML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path} is not valid TOML: {exc}", fix="fix the TOML syntax at the position shown") from None


def load_spec(path: Path, overrides: list[str] | None = None) -> LoadedSpec:
    data = apply_overrides(read_toml(path), overrides or [])
    spec = validate_spec_data(data, str(path))
    return LoadedSpec(spec=spec, path=path, spec_dir=path.resolve().parent)
