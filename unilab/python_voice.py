"""Refusals re-phrased for a Python caller.

Every refusal is written once, for the command line: its fixes say `--set algo.gamma=0.99` and
`unilab apply --resume RUN_DIR ...`. A caller of `unilab.plan` / `unilab.apply` passed
``overrides=[...]`` and ``resume=...`` instead, so the API re-phrases the fixes in those terms on
the way out: `--set X` becomes the override "X", a `unilab apply` command line becomes the
`unilab.apply(...)` call that does the same. What a refusal says about the spec is unchanged.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from functools import wraps
from typing import ParamSpec, TypeVar

from unilab.errors import PlanRefused, SpecError, UnilabError

# A whole `unilab apply ...` command inside a sentence: up to the punctuation that ends it.
_APPLY_COMMAND = re.compile(r"`?unilab apply((?: (?:'[^']*'|\"[^\"]*\"|[^\s;,()`'\"]+))+)`?")
# One --set and its value: quoted for the shell, or a key path with an optional `=value`.
_SET = r"--set (?:'(?P<q{n}>[^']*)'|(?P<p{n}>[A-Za-z_]\w*(?:\.\w+)+(?:=[^\s,;()`]*?)?))(?=:?[\s,;()`]|:?$)"
_SETS = re.compile(
    r"(?:(?P<det>your|that) )?`?"
    + _SET.format(n=0)
    + r"(?P<more>(?: "
    + _SET.format(n=1).replace("(?P<q1>", "(?:").replace("(?P<p1>", "(?:")
    + r")*)`?"
)


def _call(args: str) -> str:
    """`unilab apply` arguments -> the `unilab.apply(...)` call with the same meaning."""
    try:
        tokens = shlex.split(args)
    except ValueError:
        return "unilab.apply(...)"
    target, overrides, kwargs = None, [], []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "--set" and i + 1 < len(tokens):
            overrides.append(tokens[i + 1])
            i += 2
        elif t in ("--resume", "--checkpoint") and i + 1 < len(tokens):
            kwargs.append(f"{t[2:]}={tokens[i + 1]!r}")
            i += 2
        elif t == "--replan":
            kwargs.append("replan=True")
            i += 1
        else:
            target = t
            i += 1
    parts = [target if target == "SPEC" else repr(target)] if target else []
    if overrides:
        parts.append("overrides=[" + ", ".join(repr(o) for o in overrides) + "]")
    return f"unilab.apply({', '.join(parts + kwargs)})"


def _overrides(m: re.Match[str]) -> str:
    first = m.group("q0") if m.group("q0") is not None else m.group("p0")
    values = [first] + [q if q else p for q, p in re.findall(r"--set (?:'([^']*)'|(\S+))", m.group("more") or "")]
    det = m.group("det") or "the"
    if len(values) == 1:
        return f"{det} override {values[0]!r}"
    return f"{det} overrides " + ", ".join(repr(v) for v in values)


def phrase(text: str) -> str:
    """One sentence of a refusal in a Python caller's terms."""
    if not text:
        return text
    text = _APPLY_COMMAND.sub(lambda m: _call(m.group(1)), text)
    text = _SETS.sub(_overrides, text)
    text = text.replace("--set applies", "overrides apply")
    text = re.sub(r"--set(?=[\s,;)`]|$)", "override", text)
    return text


def for_python(exc: UnilabError) -> UnilabError:
    """``exc``, its summary, detail, fix and diagnostics re-phrased in place (the same object and
    type, so ``except unilab.PlanRefused`` still catches it)."""
    exc.summary, exc.detail, exc.fix = phrase(exc.summary), phrase(exc.detail), phrase(exc.fix)
    exc.args = (exc.summary,)
    if isinstance(exc, PlanRefused | SpecError):
        exc.diagnostics = [replace(d, condition=phrase(d.condition), fix=phrase(d.fix)) for d in exc.diagnostics]
    return exc


_P = ParamSpec("_P")
_R = TypeVar("_R")


def speaks_python(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """An API function whose refusals are phrased for its Python caller."""

    @wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except UnilabError as exc:
            for_python(exc)
            raise

    return call
