"""The `unilab` command's entry point (console script and `python -m unilab`)."""

from __future__ import annotations

import sys
from typing import NoReturn

from unilab.exit_status import exit_with


def console() -> NoReturn:
    """Run the CLI and exit with its status. A Ctrl-C that comes while the CLI itself is still
    importing (the first tens of milliseconds) ends it as one later would: "interrupted", exit 130,
    not a traceback."""
    try:
        from unilab.cli.main import main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        exit_with(130)  # unilab.errors.EXIT_INTERRUPTED, not imported: it may be what was interrupted
    exit_with(main())
