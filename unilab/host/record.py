"""Host facts recorded on a machine (`unilab host --json > node.json`), read back for planning
there from here; or this host's, probed."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from unilab.errors import UnilabError, first_validation_error
from unilab.host.facts import HostFacts
from unilab.inputfile import read_input


def read_host_facts(path: Path | None) -> HostFacts:
    if path is None:
        from unilab.host.probe import probe_host

        return probe_host()
    try:
        data = json.loads(read_input(path, "host facts file").decode("utf-8"))
    except FileNotFoundError:
        raise UnilabError(
            f"host facts file {path} does not exist",
            fix="record one on the target host with `unilab host --json > node.json`",
        ) from None
    except RecursionError:
        raise UnilabError(
            f"host facts file {path} is nested too deeply to read",
            fix="host facts nest a few levels at most: re-record them with `unilab host --json > node.json`",
        ) from None
    except (OSError, ValueError) as exc:
        raise UnilabError(
            f"host facts file {path} is not readable JSON: {exc}",
            fix="re-record it with `unilab host --json > node.json`",
        ) from None
    try:
        return HostFacts.model_validate(data)
    except ValidationError as exc:
        raise UnilabError(
            f"host facts file {path} does not match schemas/host_facts.v1.json: {first_validation_error(exc)}",
            fix="re-record it with `unilab host --json > node.json` using this unilab version",
        ) from None
