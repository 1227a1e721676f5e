"""Shared test helpers: recorded host facts and specs built from a base with dotted overrides."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unilab.host.facts import HostFacts

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SPECS = ROOT / "specs"
HOSTS = ("cpu_laptop", "cpu_amx", "cpu_zen4", "cpu_smt4", "one_h200", "node_8gpu_mps", "mig_gpu")

BASE_SPEC: dict[str, Any] = {
    "schema_version": 1,
    "run": {"name": "t", "total_env_steps": 100_000},
    "task": {"name": "g1_walk", "num_envs": 16},
    "algo": {"name": "sac"},
}


def run_unilab(
    *args: str, cwd: Path | None = None, env: dict[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m unilab ARGS` in a subprocess, output captured (a hang fails after 300 s). ``env``
    changes this process's environment for it: a value of None removes the variable."""
    full = None
    if env is not None:
        full = {k: v for k, v in os.environ.items() if k not in env}
        full.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run(
        [sys.executable, "-m", "unilab", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=full
    )


def host(name: str) -> HostFacts:
    return HostFacts.model_validate_json((FIXTURES / "hosts" / f"{name}.json").read_text())


def spec_data(**dotted: Any) -> dict[str, Any]:
    """BASE_SPEC with overrides given as keyword args, `__` for dots: training__devices=[0]."""
    data = copy.deepcopy(BASE_SPEC)
    for key, value in dotted.items():
        node = data
        parts = key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return data


def load_tool(name: str) -> Any:
    """tools/NAME.py imported as module NAME (the tools are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"tools/{name}.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def g1_smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A g1_walk run of the shipped spec at smoke length, shared by the tests that only read it."""
    out = tmp_path_factory.mktemp("g1_smoke")
    r = run_unilab("apply", str(SPECS / "g1.toml"), "--smoke", "--quiet", "--set", f'run.output_dir="{out}"')
    assert r.returncode == 0, r.stderr
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture
def facts():
    return host


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny networks: a second OpenMP thread only adds contention on a shared CPU."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_batch(seed: int, b: int, obs_dim: int, act_dim: int) -> Any:
    """A reproducible replay minibatch (about 10% terminal transitions)."""
    import torch

    from unilab.learn.replay import Batch

    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(b, obs_dim, generator=g),
        action=torch.rand(b, act_dim, generator=g) * 2 - 1,
        reward=torch.randn(b, generator=g),
        next_obs=torch.randn(b, obs_dim, generator=g),
        discount=torch.where(torch.rand(b, generator=g) < 0.1, 0.0, 0.99),
    )


_POSED: dict[tuple[str, str], Any] = {}


def posed(xml: str, layout: Any, spec: Any) -> Any:
    """`layout` where it stands in the pose `spec` asks for (`task.default_pose`), else the same
    model's layout in that pose (built once per pose)."""
    if layout.pose == spec.default_pose:
        return layout
    key = (xml, spec.default_pose)
    if key not in _POSED:
        from unilab.robot.model import RobotLayout, model_from_xml

        _POSED[key] = RobotLayout.from_model(model_from_xml(xml), spec.default_pose)
    return _POSED[key]
