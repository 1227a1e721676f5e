"""Arms of a profile: `NAME:KEY=VALUE[,KEY=VALUE]` parsing and the host's default comparison."""

from __future__ import annotations

import re
from dataclasses import dataclass

from unilab.errors import UnilabError
from unilab.sim.backends import backend_def

# Keys the profile sets itself to place the warm-up and measured windows; an arm may not move them.
RESERVED_KEYS = ("run.total_env_steps", "run.checkpoint_every_env_steps", "run.output_dir", "run.name")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
# A new pair starts after a comma outside brackets, braces and strings, followed by KEY=: TOML
# values may hold commas (hidden_dims=[256,256], algo={name="ppo", num_steps_per_env=8}).
_KEY_AHEAD = re.compile(r"\s*[A-Za-z_][\w.]*\s*=")


def _split_pairs(text: str) -> list[str]:
    chunks, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0 and _KEY_AHEAD.match(text, i + 1):
            chunks.append(text[start:i])
            start = i + 1
    return [*chunks, text[start:]]


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: tuple[tuple[str, str], ...]

    def set_args(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.overrides]


def parse_arm(text: str) -> Arm:
    name, sep, rest = text.partition(":")
    if not sep or not _NAME.match(name.strip()):
        raise UnilabError(
            f"--arm {text!r}: expected NAME:KEY=VALUE[,KEY=VALUE]",
            fix="e.g. --arm one:sim.workers=1 --arm two:sim.workers=2 (NAME: letters, digits, _ . -)",
        )
    pairs: list[tuple[str, str]] = []
    for chunk in _split_pairs(rest) if rest.strip() else []:
        key, eq, value = chunk.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise UnilabError(
                f"--arm {text!r}: {chunk!r} is not KEY=VALUE", fix="write KEY=VALUE pairs, comma separated"
            )
        key = key.strip()
        if key in RESERVED_KEYS or key == "run":  # a [run] table would replace them all
            raise UnilabError(
                f"--arm {text!r}: {key} is set by the profile itself",
                detail="the profile places the warm-up and measured windows and each run's directory",
                fix="use --warmup / --window for the run length; drop the key from the arm",
            )
        pairs.append((key, value.strip()))
    return Arm(name.strip(), tuple(pairs))


def parse_arms(texts: list[str]) -> list[Arm]:
    arms = [parse_arm(t) for t in texts]
    names = [a.name for a in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UnilabError(f"arm names must be unique; repeated: {', '.join(dup)}", fix="give each --arm its own NAME")
    return arms


def default_arms(physics: str, cuda: bool) -> list[Arm]:
    """What this host can compare: with a CUDA backend on a CUDA host the physics graph off vs on;
    with CPU workers one vs two physics workers."""
    if cuda and backend_def(physics).cuda:
        off, on = ("training.physics_graph", '"off"'), ("training.physics_graph", '"on"')
        return [Arm("graph-off", (off,)), Arm("graph-on", (on,))]
    return [Arm("workers-1", (("sim.workers", "1"),)), Arm("workers-2", (("sim.workers", "2"),))]


def schedule(arms: list[Arm], repeats: int) -> list[tuple[Arm, int]]:
    """A B A B ...: every repeat runs each arm once, in the given order, so slow drift of the
    host (thermal, other load) reaches every arm alike."""
    return [(arm, r) for r in range(repeats) for arm in arms]
