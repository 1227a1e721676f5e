"""Checkpoints: one torch file per save, written atomically, loaded with weights_only=True, tied
to the plan that produced them. A corrupt file or one from another plan is refused by name."""

from __future__ import annotations

import hashlib
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from unilab.errors import UnilabError
from unilab.run.atomic import write_atomic

CHECKPOINT_FORMAT = 1


def checkpoint_name(env_steps: int) -> str:
    return f"ckpt-{env_steps:013d}.pt"


def save_checkpoint(
    directory: Path, state: dict[str, Any], *, plan_id: str, env_steps: int, keep: int
) -> tuple[Path, str]:
    """Write `state` (tensors, numbers, strings, nested dicts) and prune to the newest `keep`.
    Returns the path and the sha256 of the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, "plan_id": plan_id, "env_steps": env_steps, "state": state}, buf)
    data = buf.getvalue()
    path = directory / checkpoint_name(env_steps)
    write_atomic(path, lambda f: f.write(data), "checkpoint")
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path, hashlib.sha256(data).hexdigest()


def env_steps_of(path: Path) -> int | None:
    """The env steps in a checkpoint's name (`ckpt-0000000001600.pt` -> 1600); None for another name."""
    digits = path.stem.removeprefix("ckpt-")
    return int(digits) if path.stem.startswith("ckpt-") and digits.isdigit() else None


def check_recorded_digest(run_dir: Path, path: Path) -> None:
    """Refuse a checkpoint whose bytes differ from the sha256 the run's manifest recorded for it (a
    file changed after the run still loads if the change is in its padding). A checkpoint the
    manifest does not list, or a manifest that cannot be read, cannot be checked: it passes."""
    import json

    from unilab.digests import file_sha256

    try:
        records = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8")).get("checkpoints", [])
        recorded = {Path(c["path"]).name: c["sha256"] for c in records}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return
    want = recorded.get(path.name)
    if want is not None and file_sha256(path) != want:
        raise UnilabError(
            f"checkpoint {path} does not have the sha256 the run's manifest recorded: it changed after it was saved",
            detail="the file was kept as it is",
            fix=f"restore the file, or remove it to use the previous checkpoint; `unilab manifest validate "
            f"{run_dir / 'manifest.json'}` checks every checkpoint",
        )


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoints oldest first (the name sorts by env steps)."""
    return sorted(directory.glob("ckpt-*.pt"))


def load_checkpoint(path: Path, *, plan_id: str | None) -> dict[str, Any]:
    """Load with weights_only=True (no arbitrary code from the file). Refuses a corrupt file, an
    unknown format, and, when `plan_id` is given, a checkpoint written by another plan."""
    if not path.is_file():
        raise UnilabError(f"checkpoint {path} does not exist", fix="pass a run directory that holds checkpoints/")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except PermissionError as exc:  # an intact checkpoint may sit behind wrong permissions: never say delete it
        raise UnilabError(
            f"checkpoint {path} cannot be read: {exc.strerror or 'permission denied'}",
            detail="the file itself was not checked; it may well be intact",
            fix=f"give this user read access to {path} (and its directory), then retry",
        ) from None
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UnilabError(
            f"checkpoint {path} is corrupt or unreadable: {first}",
            fix="resume from an earlier checkpoint (delete this file) or start a new run",
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != CHECKPOINT_FORMAT or "state" not in blob:
        raise UnilabError(
            f"{path} is not a unilab checkpoint (format {CHECKPOINT_FORMAT})",
            fix="resume from a run directory written by this unilab",
        )
    if plan_id is not None and blob.get("plan_id") != plan_id:
        raise UnilabError(
            f"checkpoint {path} belongs to plan {blob.get('plan_id')}, this run's plan is {plan_id}",
            detail="a resume continues exactly the same plan; a changed spec or host makes a new plan",
            fix="resume with the run's own plan (`unilab apply --resume RUN_DIR`) or start a new run",
        )
    return blob
