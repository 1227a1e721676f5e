"""unilab's optional features, each installed by one extra of the package (pyproject.toml).

The default install is the CPU runtime. A feature whose extra is missing is refused when it is
asked for, before any work, with the command that installs it: never an ImportError mid-run.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from unilab.errors import UnilabError

# extra -> (what it adds, the distributions it installs)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpu": ('sim.backend = "mjwarp" (MuJoCo Warp)', ("warp-lang", "mujoco-warp")),
    "video": ("`unilab eval --video` (MP4 encoding)", ("imageio-ffmpeg",)),
    "profile": ("`unilab profile`'s profile.png and tools/bench_learning.py's plots", ("matplotlib",)),
    "onnx": ("running an exported policy (onnxruntime)", ("onnxruntime",)),
    "wandb": ("`[run.wandb]` (a Weights & Biases mirror of the run)", ("wandb",)),
    "play": ("`unilab play` (the browser viewer)", ("viser", "trimesh")),
}


# The distribution's name. `unilab` on the public package index is another project with the same
# import name: no hint may say `pip install unilab...`, which would fetch it (docs/install.md).
DISTRIBUTION = "unilab-runtime"


def install_command(extra: str) -> str:
    """What installs ``extra`` into this unilab's environment, from the checkout it came from."""
    return f"bash tools/setup.sh {extra} in the unilab checkout (or pip install -e '.[{extra}]' there)"


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or refuse naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UnilabError(
            f"{feature} needs {' and '.join(EXTRAS[extra][1])}, which {'is' if len(EXTRAS[extra][1]) == 1 else 'are'} "
            f"not installed (the `{extra}` extra)",
            detail=f"import {module}: {type(exc).__name__}: {exc}",
            fix=f"install it with {install_command(extra)}",
        ) from None
