"""Shell completion (argcomplete): commands and options from the parser, spec keys after `--set`,
spec files and run directories where a command takes them.

`unilab completion bash` (or zsh, fish) prints the shell code that turns it on (docs/running.md).
The completers import the spec models only while completing, never on a normal command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from unilab.run_layout import RunLayout
from unilab.spec.doc import sub_sections
from unilab.spec.models import ALGO_MODELS, TASK_MODELS, RunSpec, SimSpec, TrainingSpec, WandbSpec

SHELLS = ("bash", "zsh", "fish")


def spec_keys() -> dict[str, list[str]]:
    """Every key a spec may set, as `section.key` paths, with the names a key takes where it takes
    one of a few (`algo.name`: sac, flashsac, ...)."""
    from pydantic import BaseModel

    keys: dict[str, set[str]] = {}

    def add(prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            choices = keys.setdefault(f"{prefix}.{name}", set())
            ann = field.annotation
            for arm in (ann, *get_args(ann)):
                if get_origin(arm) is Literal:
                    choices.update(str(a) for a in get_args(arm) if isinstance(a, str))

    add("run", RunSpec)
    add("run.wandb", WandbSpec)
    for model in TASK_MODELS.values():
        add("task", model)
        for key, sub in sub_sections(model):
            add(f"task.{key}", sub)
    add("sim", SimSpec)
    for model in ALGO_MODELS.values():
        add("algo", model)
    add("training", TrainingSpec)
    keys["task.name"] = set(TASK_MODELS)
    keys["algo.name"] = set(ALGO_MODELS)
    return {k: sorted(v) for k, v in sorted(keys.items())}


def complete_set(prefix: str, **_: Any) -> list[str]:
    """`--set` values: `key=` for a key path being typed, `key=name` where the key takes names."""
    keys = spec_keys()
    if "=" in prefix:
        key = prefix.split("=", 1)[0]
        return [f"{key}={c}" for c in keys.get(key, []) if f"{key}={c}".startswith(prefix)]
    return [f"{k}=" for k in keys if k.startswith(prefix)]


def _entries(prefix: str) -> list[tuple[Path, str]]:
    """The visible entries of the directory ``prefix`` is being typed in, with the text each
    completes to (relative as typed), that extend ``prefix``."""
    base = Path(prefix).parent if prefix and not prefix.endswith("/") else Path(prefix or ".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    shown = [(p, str(p) if str(base) != "." or prefix.startswith("./") else p.name) for p in entries]
    return [(p, text) for p, text in shown if text.startswith(prefix) and not p.name.startswith(".")]


def complete_run_dir(prefix: str, **_: Any) -> list[str]:
    """Run directories (a plan.toml inside), and the directories on the way to them."""
    return [text if RunLayout(p).plan.is_file() else text + "/" for p, text in _entries(prefix) if p.is_dir()]


def complete_spec(prefix: str, **_: Any) -> list[str]:
    """Spec and plan files (.toml), and directories to find them in."""
    return [text + "/" if p.is_dir() else text for p, text in _entries(prefix) if p.is_dir() or p.suffix == ".toml"]


def attach(parser: argparse.ArgumentParser) -> None:
    """Give each command's arguments their completer, by what they take."""
    run_dir_dests = {"run_dir", "resume"}
    spec_dests = {"spec", "target", "a", "b"}
    for action in _all_actions(parser):
        if action.dest == "set":
            action.completer = complete_set  # type: ignore[attr-defined]
        elif action.dest in run_dir_dests:
            action.completer = complete_run_dir  # type: ignore[attr-defined]
        elif action.dest in spec_dests:
            action.completer = complete_spec  # type: ignore[attr-defined]


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    out = []
    for action in parser._actions:
        out.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _all_actions(sub)
    return out


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, when this process is one (argcomplete sets
    _ARGCOMPLETE); return at once otherwise."""
    import os

    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    attach(parser)
    argcomplete.autocomplete(parser)


def cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode(["unilab"], shell=args.shell))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "completion",
        help="print the shell code for tab completion (commands, options, spec keys, run directories)",
        description="Print the code that turns on tab completion of unilab's commands, options, spec keys after "
        '--set and run directories. bash: eval "$(unilab completion bash)" in ~/.bashrc; zsh: the same in ~/.zshrc; '
        "fish: unilab completion fish > ~/.config/fish/completions/unilab.fish",
    )
    sp.add_argument("shell", choices=SHELLS, help="the shell to print code for")
    sp.set_defaults(func=cmd_completion)
