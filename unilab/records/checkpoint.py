"""Checkpoints: one torch file per save, written atomically, loaded with weights_only=True, tied
to the plan that produced them. A corrupt file or one from another plan is refused by name."""

from __future__ import annotations

import hashlib
import io
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict, cast

import torch

from unilab.atomic import write_atomic

# Re-exported: callers import the checkpoint helpers from here; the planner reads them torch-free.
from unilab.digests import digest_path, file_sha256, list_checkpoints, recorded_digests
from unilab.digests import env_steps_of as env_steps_of
from unilab.errors import UnilabError
from unilab.run_layout import RunLayout

CHECKPOINT_FORMAT = 1

# A checkpoint's state: what the rank loop saves (counters, observation and action sizes, the
# observation layout, the normalizer) and the learner's own state under its AlgoDef's state_key;
# tensors, numbers, strings and nested dicts only, so that weights_only loading reads it.
CheckpointState = dict[str, Any]


class Checkpoint(TypedDict):
    """A checkpoint file as `load_checkpoint` returns it."""

    format: int
    plan_id: str  # the plan that wrote it
    env_steps: int  # the run's env steps at the save, also in its name
    state: CheckpointState


def checkpoint_name(env_steps: int) -> str:
    return f"ckpt-{env_steps:013d}.pt"


def save_checkpoint(
    directory: Path, state: CheckpointState, *, plan_id: str, env_steps: int, keep: int
) -> tuple[Path, str]:
    """Write `state` (tensors, numbers, strings, nested dicts) and prune to the newest `keep`.
    Returns the path and the sha256 of the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    blob: Checkpoint = {"format": CHECKPOINT_FORMAT, "plan_id": plan_id, "env_steps": env_steps, "state": state}
    torch.save(blob, buf)
    data = buf.getvalue()
    path = directory / checkpoint_name(env_steps)
    digest = hashlib.sha256(data).hexdigest()
    # Beside it, its digest in sha256sum's format (`sha256sum -c` checks it): a resume or an export
    # verifies the file against it even when the manifest is gone. Written first, so that a run
    # killed in between leaves a digest without its checkpoint (harmless), never the reverse.
    side = digest_path(path)
    before = side.read_bytes() if side.is_file() else None  # a checkpoint of the same steps saved again
    write_atomic(side, lambda f: f.write(f"{digest}  {path.name}\n".encode()), "checkpoint digest")
    try:
        write_atomic(path, lambda f: f.write(data), "checkpoint")
    except BaseException:  # the checkpoint on disk is the previous one (or none): so is its digest
        try:
            if before is None:
                side.unlink(missing_ok=True)
            else:
                write_atomic(side, lambda f: f.write(before), "checkpoint digest")
        except (OSError, UnilabError):
            pass  # the first error is the one to report
        raise
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
        digest_path(old).unlink(missing_ok=True)
    return path, digest


def check_recorded_digest(run_dir: Path, path: Path) -> str:
    """Refuse a checkpoint whose bytes differ from the sha256 the run recorded for it (a file
    changed after the run may still load), or whose digest was not recorded anywhere that can be
    read: then nothing vouches for it. Returns the verified digest."""

    want = recorded_digests(run_dir).get(path.name)
    if want is None:
        raise UnilabError(
            f"checkpoint {path} cannot be verified: no digest file beside it ({digest_path(path).name}) and the "
            f"run's manifest does not record it (missing, unreadable or not listing it)",
            detail="a checkpoint is loaded only when the digest the run recorded for it matches its bytes",
            fix=f"remove it to resume from the previous checkpoint, or restore {RunLayout(run_dir).manifest}; or, if "
            f"you trust the file, record its digest: (cd {path.parent} && sha256sum {path.name} > "
            f"{digest_path(path).name})",
        )
    got = file_sha256(path)
    if got != want:
        raise UnilabError(
            f"checkpoint {path} does not have the sha256 the run recorded: it changed after it was saved",
            detail="the file was kept as it is",
            fix=f"restore the file, or remove it to use the previous checkpoint; `unilab manifest validate "
            f"{run_dir}` checks every checkpoint",
        )
    return got


def _first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of a library's message, or its first ``limit`` characters cut at a word."""
    end = text.find(". ")
    if 0 < end < limit:
        return text[: end + 1]
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit].rstrip(",;:") + " ..."


# The fix of a corrupt checkpoint for a run being resumed; eval and export, which read one of a
# run's checkpoints without continuing the run, pass their own.
RESUME_EARLIER_FIX = "resume from an earlier checkpoint (delete this file) or start a new run"


def load_checkpoint(path: Path, *, plan_id: str | set[str] | None, corrupt_fix: str = RESUME_EARLIER_FIX) -> Checkpoint:
    """Load with weights_only=True (no arbitrary code from the file). Refuses a corrupt file (with
    ``corrupt_fix``), an unknown format, and, when `plan_id` is given (one id or a run's ids), a
    checkpoint written by another plan."""
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
    except (  # torch's weights-only unpickler raises many kinds on bytes that are no checkpoint
        RuntimeError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
        EOFError,
        ValueError,
        OSError,
        KeyError,
        IndexError,
        AttributeError,
        TypeError,
    ) as exc:
        first = _first_sentence((str(exc).strip().splitlines() or [type(exc).__name__])[0])
        raise UnilabError(
            f"checkpoint {path} is corrupt or unreadable: {first}",
            fix=corrupt_fix,
        ) from None
    if not isinstance(blob, dict) or blob.get("format") != CHECKPOINT_FORMAT or "state" not in blob:
        raise UnilabError(
            f"{path} is not a unilab checkpoint (format {CHECKPOINT_FORMAT})",
            fix="resume from a run directory written by this unilab",
        )
    ids = {plan_id} if isinstance(plan_id, str) else plan_id
    if ids is not None and blob.get("plan_id") not in ids:
        raise UnilabError(
            f"checkpoint {path} belongs to plan {blob.get('plan_id')}, this run's plan is "
            + (plan_id if isinstance(plan_id, str) else " or ".join(sorted(ids))),
            detail="a resume continues exactly the same plan; a changed spec or host makes a new plan",
            fix="resume with the run's own plan (`unilab apply --resume RUN_DIR`) or start a new run",
        )
    # Its format and plan are checked; what its state holds is checked by the reader that needs it
    # (check_policy_state, check_policy_fits), each naming the missing key.
    return cast("Checkpoint", blob)


def check_finite_weights(state: Any, *, what: str, fix: str) -> None:
    """Refuse a checkpoint state holding a NaN or an infinity in any floating-point tensor (weights,
    optimizer moments, the temperature, the normalizer's statistics), naming the first such tensor.
    A run's own updates never write one (a non-finite step is skipped), so it comes from an edited
    or foreign file; loaded, it would export a policy that outputs NaN or fine-tune from NaN."""
    for where, tensor in _float_tensors(state, ""):
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            bad = int(finite.numel() - int(finite.sum()))
            raise UnilabError(
                f"{what}: tensor {where} holds {bad} non-finite value{'s' if bad != 1 else ''} "
                f"(NaN or infinite) of {tensor.numel()}",
                detail="a run's own updates never write one; the file was edited or written elsewhere",
                fix=fix,
            )


def _float_tensors(node: Any, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(node, torch.Tensor):
        if node.is_floating_point():
            yield where or "state", node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _float_tensors(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _float_tensors(value, f"{where}[{i}]")


def check_policy_fits(
    state: CheckpointState, obs_dim: int, act_dim: int, obs_terms: list[tuple[str, int]], *, what: str, fix: str
) -> None:
    """A checkpoint's policy takes this collector's observations (sizes, and the layout where the
    checkpoint recorded one) and gives its actions; refused in one paragraph otherwise, before a
    learner is loaded with it (torch would fail deep inside with a shape error). ``what`` names the
    checkpoint ("run.init_from", "the checkpoint to resume", ...)."""
    saved = (int(state["obs_dim"]), int(state["act_dim"]))
    terms = [(str(n), int(d)) for n, d in state.get("obs_terms") or []]
    ours = [(str(n), int(d)) for n, d in obs_terms]
    if saved != (obs_dim, act_dim):
        raise UnilabError(
            f"{what}: the checkpoint's policy takes {saved[0]} observations and gives {saved[1]} actions; "
            f"this collector has {obs_dim} and {act_dim}",
            detail=("the checkpoint's observations: " + _layout(terms) + "; this collector's: " + _layout(ours))
            if terms
            else None,
            fix=fix,
        )
    if terms and terms != ours:
        raise UnilabError(
            f"{what}: the checkpoint's policy read another observation layout: {_layout(terms)}",
            detail="this collector's: " + _layout(ours),
            fix=fix,
        )


RESUME_FIX = (
    "resume it with the unilab that wrote it (`unilab apply --resume` under the version and commit its "
    "manifest's provenance names), or start a new run"
)


def check_resume_fits(state: CheckpointState | None, hello: Any) -> None:
    """Before a resumed run records anything: its checkpoint's policy fits this collector (an
    upgraded unilab may build the task's observations differently)."""
    if state is not None:
        what = "the checkpoint to resume"
        check_policy_fits(state, hello.obs_dim, hello.act_dim, hello.obs_terms, what=what, fix=RESUME_FIX)


def _layout(terms: list[tuple[str, int]]) -> str:
    return ", ".join(f"{n}[{d}]" for n, d in terms)
