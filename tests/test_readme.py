"""The README's command table is the CLI's: every subcommand `unilab --help` lists has a row, and
every option of a subcommand appears in its row."""

from __future__ import annotations

import argparse
import re

from tests.conftest import ROOT
from unilab.cli.main import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices.items())


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        if m := re.match(r"\| `unilab (\w+)", line):
            rows[m.group(1)] = rows.get(m.group(1), "") + line.split(" | ")[0]
    return rows


def _options(parser: argparse.ArgumentParser) -> set[str]:
    out = {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    for a in parser._actions:  # `unilab manifest validate`, `unilab mps start|...`: their options too
        if isinstance(a, argparse._SubParsersAction):
            for child in a.choices.values():
                out |= _options(child)
    return out


def test_every_subcommand_has_a_row_with_its_options() -> None:
    rows, commands = _rows(), _subcommands()
    assert set(rows) == set(commands), f"README rows {sorted(rows)} != unilab --help {sorted(commands)}"
    missing = {name: sorted(o for o in _options(p) if o not in rows[name]) for name, p in commands.items()}
    assert not any(missing.values()), (
        f"options missing from the README's rows: { {k: v for k, v in missing.items() if v} }"
    )
