"""`unilab.plan(spec)` from Python (docs/python.md): a spec file or mapping, `--set` overrides and
host facts, compiled as `unilab plan` compiles them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unilab.host.facts import HostFacts
from unilab.host.record import read_host_facts
from unilab.inputfile import reading
from unilab.plan.compile import compile_plan
from unilab.plan.models import Plan
from unilab.python_voice import python_api
from unilab.spec.load import load_spec, spec_from_data

SpecSource = str | os.PathLike[str] | Mapping[str, Any]


@python_api
def plan(
    spec: SpecSource,
    overrides: Sequence[str] = (),
    host_facts: HostFacts | str | os.PathLike[str] | None = None,
    *,
    smoke: bool = False,
) -> Plan:
    """Compile a run spec into a plan: ``spec`` is a spec file's path or the spec as a mapping
    (the TOML's tables as dicts; relative input paths resolve against the working directory);
    ``overrides`` are KEY=VALUE strings, as `--set` takes them (``"task.num_envs=128"``); ``host_facts`` is this host
    (None), recorded facts (a `unilab host --json` file) or a HostFacts; ``smoke``: the plan of
    the spec's smoke run (`--smoke`). Raises PlanRefused with every violated rule."""
    if smoke:
        from unilab.plan.smoke import smoke_plan

        return smoke_plan(lambda o: plan(spec, o, host_facts), overrides, flag="smoke=True")

    if isinstance(spec, Mapping):
        loaded_spec, spec_dir = spec_from_data(_plain(spec), list(overrides), "<spec mapping>"), Path.cwd()
    else:
        path = Path(spec)
        with reading(path, "spec"):
            loaded = load_spec(path, list(overrides))
        loaded_spec, spec_dir = loaded.spec, loaded.spec_dir
    if isinstance(host_facts, HostFacts):
        facts = host_facts
    else:
        facts = read_host_facts(None if host_facts is None else Path(host_facts))
    return compile_plan(loaded_spec, facts, spec_dir)


def _plain(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of the mapping as dicts and lists (tuples become TOML arrays)."""
    return {
        str(k): _plain(v) if isinstance(v, Mapping) else list(v) if isinstance(v, tuple) else v for k, v in spec.items()
    }
