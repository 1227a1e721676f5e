"""Overrides written the way other tools take them, answered with the `--set` form they meant.

Users arrive from Hydra (`task.num_envs=128`, `+key=value`), tyro (`--task.num_envs 128`) and from
their own muscle memory (`--set task.num_envs 128`). argparse would answer each with its top-level
usage; this reads the command line first and refuses it with the corrected command as the fix.
Standard library only: it runs before any command is imported.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from unilab.errors import UnilabError

# The commands that take --set.
COMMANDS_WITH_SET = ("plan", "diff", "apply")

# A spec key path: a section and at least one key (`task.num_envs`, `algo.v_min`).
_KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+"
_HYDRA = re.compile(rf"^\+{{0,2}}(?P<key>{_KEY})=(?P<value>.*)$", re.DOTALL)
_TYRO = re.compile(rf"^--(?P<key>{_KEY})(?:=(?P<value>.*))?$", re.DOTALL)


def _is_path(token: str) -> bool:
    """A token that names an existing file is an argument, whatever it looks like."""
    try:
        return Path(token).exists()
    except (OSError, ValueError):
        return False


def _value_follows(tokens: list[str], i: int) -> bool:
    return i + 1 < len(tokens) and not tokens[i + 1].startswith("-") and not _is_path(tokens[i + 1])


def check(argv: list[str], value_options: frozenset[str] = frozenset()) -> None:
    """Raise a UnilabError with the corrected command when argv holds an override in another
    tool's form; return quietly otherwise (argparse then parses argv as usual). ``value_options``:
    the command's options that take a value (`--out FILE`), whose value is never an override."""
    command = next((i for i, t in enumerate(argv) if not t.startswith("-")), None)
    if command is None or argv[command] not in COMMANDS_WITH_SET:
        return
    fixed, meant = list(argv[: command + 1]), []
    tokens = argv[command + 1 :]
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "--":  # what follows is positional by the user's own say
            fixed.extend(tokens[i:])
            break
        if t in value_options and t != "--set" and i + 1 < len(tokens):  # `--out a.b=c.toml` names a file
            fixed += [t, tokens[i + 1]]
            i += 2
            continue
        if t == "--set" and i + 1 < len(tokens):
            value = tokens[i + 1]
            if "=" not in value and _value_follows(tokens, i + 1):  # `--set task.num_envs 128`
                assign = f"{value}={tokens[i + 2]}"
                meant.append((shlex.join(["--set", value, tokens[i + 2]]), "a --set without its =", assign))
                fixed += ["--set", assign]
                i += 3
                continue
            fixed += [t, value]
            i += 2
            continue
        tyro = _TYRO.match(t)
        if tyro:  # `--task.num_envs 128` or `--task.num_envs=128`
            key, value = tyro.group("key"), tyro.group("value")
            if value is None and _value_follows(tokens, i):
                value, shown, i = tokens[i + 1], shlex.join([t, tokens[i + 1]]), i + 2
            else:
                shown, i = shlex.quote(t), i + 1
            assign = f"{key}={value if value is not None else '...'}"
            meant.append((shown, "a tyro-style option", assign))
            fixed += ["--set", assign]
            continue
        hydra = _HYDRA.match(t)
        if hydra and not t.startswith("-") and not _is_path(t):  # `task.num_envs=128`, `+task.x=1`
            assign = f"{hydra.group('key')}={hydra.group('value')}"
            meant.append((shlex.quote(t), "a Hydra-style override", assign))
            fixed += ["--set", assign]
            i += 1
            continue
        fixed.append(t)
        i += 1
    if not meant:
        return
    given = "; ".join(f"`{shown}` is {kind}" for shown, kind, _ in meant)
    raise UnilabError(
        f"{given}: unilab takes spec overrides as --set KEY=VALUE (TOML value syntax, one key per --set)",
        fix=shlex.join(["unilab", *fixed]),
    )


def value_options(parser: argparse.ArgumentParser) -> frozenset[str]:
    """Every option of ``parser``'s commands that takes a value."""
    out: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= value_options(sub)
        elif action.option_strings and action.nargs != 0:
            out.update(o for o in action.option_strings if o.startswith("--"))
    return frozenset(out)
