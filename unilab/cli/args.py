"""argparse types shared by the command-line entry points (standard library only: parsing the
command line must not wait for heavy imports)."""

from __future__ import annotations

import argparse
from pathlib import Path


def path_arg(text: str) -> Path:
    """A path argument; an empty one is refused, not read as the current directory (`--out ""`
    would write into it)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def add_run_dir_arg(sp: argparse.ArgumentParser) -> None:
    """The RUN_DIR positional of the commands that read a finished (or running) run."""
    sp.add_argument(
        "run_dir", type=path_arg, metavar="RUN_DIR", help="a run directory written by `unilab apply` (runs/NAME-TIME)"
    )


def add_checkpoint_arg(sp: argparse.ArgumentParser) -> None:
    """--checkpoint of the commands that read one of a run's checkpoints (eval, export)."""
    sp.add_argument(
        "--checkpoint",
        type=path_arg,
        metavar="FILE",
        help="a checkpoint of the run still on disk: a file name in RUN_DIR/checkpoints/, or a path to one there "
        "(default: the newest)",
    )
