"""Ending a process with the status its command chose, also under `python -m`."""

from __future__ import annotations

import sys
from typing import NoReturn


def exit_with(code: int) -> NoReturn:
    """``sys.exit(code)``, with one CPython flag cleared first.

    When a KeyboardInterrupt leaves code that CPython runs from source text (``exec`` or ``eval``
    of a string: dataclasses and namedtuple build their methods that way while a module imports),
    the interpreter sets a flag, even if a caller catches the exception. Under ``python -m``,
    ``Py_RunMain`` reads that flag after the program has ended and replaces its exit status with
    death by SIGINT. A Ctrl-C or SIGTERM during an apply's imports, handled as exit 130 with a
    clean run directory, would then look like a process killed by a signal. Running source text
    once more resets the flag (the flag is cleared when such code starts)."""
    exec("")
    sys.exit(code)
