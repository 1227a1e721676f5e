"""unilab: a declarative training runtime for humanoid reinforcement learning.

The Python API (docs/python.md): ``unilab.plan``, ``unilab.apply``, ``unilab.evaluate``,
``unilab.export``, ``unilab.load_manifest``.
They load on first use, so ``python -m unilab`` and the CLI start without them.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "EvalReport",
    "Manifest",
    "Plan",
    "PlanRefused",
    "Run",
    "UnilabError",
    "__version__",
    "apply",
    "evaluate",
    "export",
    "load_manifest",
    "plan",
]

# `unilab.plan` and `unilab.evaluate` are packages made callable as the API's functions
# (unilab/plan/__init__.py, unilab/evaluate/__init__.py): importing a submodule sets the attribute.
_PACKAGES = ("plan", "evaluate")
_API = {
    "apply": "unilab.api",
    "load_manifest": "unilab.api",
    "export": "unilab.api",
    "EvalReport": "unilab.evaluate.models",
    "Run": "unilab.api",
    "Plan": "unilab.plan.models",
    "Manifest": "unilab.manifest.models",
    "UnilabError": "unilab.errors",
    "PlanRefused": "unilab.errors",
}


def __getattr__(name: str) -> Any:
    if name not in _API and name not in _PACKAGES:
        raise AttributeError(f"module 'unilab' has no attribute {name!r}")
    import importlib

    if name in _PACKAGES:
        return importlib.import_module(f"unilab.{name}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value
