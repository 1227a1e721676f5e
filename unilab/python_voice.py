"""The Python API's edge: arguments checked, refusals re-phrased for a Python caller.

Every refusal is written once, for the command line: its fixes say `--set algo.gamma=0.99` and
`unilab apply --resume RUN_DIR ...`. A caller of `unilab.plan` / `unilab.apply` passed
``overrides=[...]`` and ``resume=...`` instead, so the API re-phrases the fixes in those terms on
the way out: `--set X` becomes the override "X", a `unilab apply` command line becomes the
`unilab.apply(...)` call that does the same. What a refusal says about the spec is unchanged.
"""

from __future__ import annotations

import inspect
import multiprocessing.process
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from pydantic import ConfigDict, ValidationError, validate_call

from unilab.errors import EXIT_UNGUARDED_MAIN, UNGUARDED_MAIN_FIX, PlanRefused, SpecError, UnilabError

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
    text = re.sub(r"--checkpoint (NAME|FILE)\b", r"checkpoint=\1", text)
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


# What each argument of the API takes, in a caller's words (the annotations say it to a type checker).
_PATH = "a path (str or os.PathLike)"
EXPECTED = {
    "spec": "a spec file's path (str or os.PathLike), the spec's tables as a mapping, or a unilab.Plan",
    "overrides": "a list of 'KEY=VALUE' strings, e.g. ['task.num_envs=128']",
    "host_facts": "None (this host), the path of a `unilab host --json` file, or a HostFacts",
    "run_dir": f"a run directory: {_PATH}",
    "resume": f"a run directory: {_PATH}",
    "path": f"a run directory or its manifest.json: {_PATH}",
    "checkpoint": f"a checkpoint of the run: {_PATH}",
    "out": _PATH,
    "video": f"an .mp4 file: {_PATH}",
    "episodes": "an int",
    "seed": "an int",
    "workers": "an int",
    "video_episodes": "an int",
    "format": "'onnx' or 'torchscript'",
}
_CALL_ERRORS = (
    "unexpected_keyword_argument",
    "unexpected_positional_argument",
    "missing_argument",
    "missing_positional_only_argument",
    "missing_keyword_only_argument",
    "multiple_argument_values",
)


def _argument_error(fn: Callable[..., Any], exc: ValidationError, args: tuple, kwargs: dict) -> UnilabError:
    """The first argument of the wrong type, named as the caller wrote it."""
    sig = inspect.signature(fn)
    first = exc.errors(include_url=False)[0]
    where = first["loc"][0] if first["loc"] else None
    names = list(sig.parameters)
    name = names[where] if isinstance(where, int) and where < len(names) else str(where)
    help_ = f"help(unilab.{fn.__name__}) and docs/python.md describe its arguments"
    if first["type"] in _CALL_ERRORS:
        return UnilabError(f"unilab.{fn.__name__}: {first['msg'].lower()}: {name}", fix=help_)
    try:
        value = sig.bind_partial(*args, **kwargs).arguments.get(name, first.get("input"))
    except TypeError:
        value = first.get("input")
    param = sig.parameters[name]
    expected = EXPECTED.get(name) or (
        "True or False" if param.annotation in (bool, "bool") else f"of type {param.annotation}"
    )
    inner = "".join(f"[{p!r}]" for p in first["loc"][1:] if isinstance(p, int))
    what = f"{value!r} ({type(value).__name__})"
    if inner:
        what += f", whose item {inner} is {first.get('input')!r}"
    return UnilabError(f"unilab.{fn.__name__}: {name}={what}: {name} takes {expected}", fix=help_)


def _stop_if_importing_the_callers_script(name: str) -> None:
    """In a child process that `spawn` is starting, which imports the caller's script first: a call
    there means the script has no `__main__` guard. The child ends at once with EXIT_UNGUARDED_MAIN,
    which its parent turns into the refusal that names the guard (instead of a second run, or
    multiprocessing's page about freeze_support)."""
    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        sys.stderr.write(
            f"error: unilab.{name} was called while a child process imported the script\nfix: {UNGUARDED_MAIN_FIX}\n"
        )
        sys.stderr.flush()
        os._exit(EXIT_UNGUARDED_MAIN)


def python_api(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """A function of the Python API: its arguments are checked against its annotations (a wrong type
    is a UnilabError naming the argument, not a TypeError from inside the package), and its
    refusals are phrased for its Python caller."""
    check = validate_call(config=ConfigDict(arbitrary_types_allowed=True, strict=True))(wraps(fn)(lambda *a, **k: None))

    @wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        _stop_if_importing_the_callers_script(fn.__name__)
        try:
            check(*args, **kwargs)
        except ValidationError as exc:
            raise _argument_error(fn, exc, args, kwargs) from None
        except TypeError as exc:  # a missing or unexpected argument
            raise UnilabError(f"unilab.{fn.__name__}: {exc}", fix=f"see help(unilab.{fn.__name__})") from None
        try:
            return fn(*args, **kwargs)
        except UnilabError as exc:
            for_python(exc)
            raise

    return call
