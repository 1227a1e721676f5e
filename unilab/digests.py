"""The one file digest unilab records and checks (plan inputs, motions, checkpoints)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from unilab.run_layout import RunLayout


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks (clips and checkpoints can be large)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# Checkpoints' digests and names, read without torch (the planner reads them for run.init_from).
def digest_path(path: Path) -> Path:
    """The sha256 file written beside a checkpoint."""
    return path.with_name(path.name + ".sha256")


def recorded_digests(run_dir: Path) -> dict[str, str]:
    """Checkpoint name -> sha256 as the run recorded it: the run manifest's list, overridden by the
    digest files beside the checkpoints. Unreadable sources are skipped."""
    import json

    out: dict[str, str] = {}
    try:
        records = json.loads(RunLayout(run_dir).manifest.read_text(encoding="utf-8")).get("checkpoints", [])
        out.update({Path(c["path"]).name: str(c["sha256"]) for c in records})
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        pass
    for side in RunLayout(run_dir).checkpoints.glob("ckpt-*.pt.sha256"):
        try:
            want, _, name = side.read_text(encoding="utf-8").strip().partition("  ")
        except (OSError, UnicodeDecodeError):
            continue
        if name == side.name.removesuffix(".sha256") and len(want) == 64:
            out[name] = want
    return out


def env_steps_of(path: Path) -> int | None:
    """The env steps in a checkpoint's name (`ckpt-0000000001600.pt` -> 1600); None for another name."""
    digits = path.stem.removeprefix("ckpt-")
    return int(digits) if path.stem.startswith("ckpt-") and digits.isdigit() else None


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoints oldest first (the name sorts by env steps)."""
    return sorted(directory.glob("ckpt-*.pt"))
