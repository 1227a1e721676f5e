"""The physics engines' releases this unilab is tested with.

A new MuJoCo release can change contact handling, solver defaults or the model compiler, and so the
physics under a plan; a plan on an untested release is refused (rule `sim.tested-versions`) rather
than trained on physics no test has seen. pyproject.toml bounds the same releases (a test keeps the
two together); uv.lock fixes the exact versions tools/setup.sh installs.
"""

from __future__ import annotations

import re

# distribution -> the (major, minor) releases the suite passes with
TESTED_RELEASES: dict[str, tuple[tuple[int, int], ...]] = {
    "mujoco": ((4, 0),),
    "mujoco-warp": ((4, 0),),
}


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as 4.0.1 or 4.0.0.dev3; None when it has no such form."""
    m = re.match(r"^(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_tested(dist: str, version: str) -> bool:
    return release(version) in TESTED_RELEASES[dist]


def tested_range(dist: str) -> str:
    """The pip requirement that installs a tested release, e.g. ``mujoco>=4.0,<4.1``."""
    (lo_major, lo_minor), *_ = sorted(TESTED_RELEASES[dist])
    hi_major, hi_minor = max(TESTED_RELEASES[dist])
    return f"{dist}>={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"
