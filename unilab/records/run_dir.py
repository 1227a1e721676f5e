"""A run directory as one type, for every command that takes RUN_DIR (`apply --resume`, `eval`,
`export`, `diff`, `profile`, `manifest validate`): where each of its records lies (`RunLayout`,
named once at the bottom of the package so that the torch-free planner reads `run.init_from`
through it) and the reads those commands share: the run's plan, its manifest and the plans of its
sessions, whether an apply holds it or never started it, its checkpoints, the digests the run
recorded for them, and one of them loaded and verified as a `Checkpoint`."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.digests import list_checkpoints, recorded_digests
from unilab.errors import UnilabError
from unilab.manifest.models import Manifest
from unilab.plan.models import Plan
from unilab.plan.render import load_plan
from unilab.run_layout import RunLayout

if TYPE_CHECKING:
    from unilab.records.checkpoint import Checkpoint


def _unreadable(path: Path, exc: OSError) -> UnilabError:
    return UnilabError(
        f"cannot read {exc.filename or path}: {exc.strerror or exc}",
        fix="give this user read access to the run directory and its files, then retry",
    )


@dataclass(frozen=True)
class RunDir(RunLayout):
    """``RunDir(path)``: the run directory at ``path`` (it may not exist: the reads say so)."""

    # -- its record ---------------------------------------------------------------------------

    def read_plan(self, command: str = "export") -> Plan:
        """The run's plan, refused in one paragraph when there is none (``command``: the `unilab`
        command the fixes name)."""
        run_dir, plan_path = self.root, self.plan
        try:
            if run_dir.is_file():
                # A file of a run (manifest, checkpoint, tensorboard event file): name the run it is in.
                home = next((d for d in run_dir.parents[:2] if RunLayout(d).plan.is_file()), None)
                raise UnilabError(
                    f"{run_dir} is a file; {command} takes a run directory (RUN_DIR)",
                    fix=f"unilab {command} {home}"
                    if home
                    else "pass the directory `unilab apply` printed at the end of the run",
                )
            if not run_dir.is_dir():
                raise UnilabError(f"run directory {run_dir} does not exist", fix="pass a run directory (RUN_DIR)")
            if not plan_path.is_file():
                raise UnilabError(f"{run_dir} is not a unilab run directory (no plan.toml)", fix="pass a run directory")
            open(plan_path, "rb").close()  # a permission problem is named here, not as "not a plan"
            return load_plan(plan_path)
        except OSError as exc:
            raise _unreadable(plan_path, exc) from None
        except (UnicodeDecodeError, RecursionError):
            raise UnilabError(
                f"{plan_path} is not a unilab plan (not UTF-8 TOML)",
                fix=f"{command} a run directory written by `unilab apply`; its plan.toml must not be edited",
            ) from None

    def read_manifest(self) -> Manifest | None:
        """The run's manifest, or None when it is missing or does not validate (the commands that
        need one say so themselves; these reads only use what it records)."""
        try:
            return Manifest.model_validate(json.loads(self.manifest.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def plan_ids(self, plan_id: str, manifest: Manifest | None = None) -> set[str]:
        """The plan ids whose checkpoints the run may hold: `plan_id` (the run's plan now) and those
        of its earlier sessions, which differ only where a resume re-planned the run for another
        host (`--replan`) or extended its budget (`--set run.total_env_steps`), as the manifest
        records (``manifest``: the one the caller already read)."""
        manifest = manifest if manifest is not None else self.read_manifest()
        if manifest is None:
            return {plan_id}
        return {plan_id, manifest.plan_id, *(s.plan_id for s in manifest.sessions)}

    def held_by_an_apply(self) -> bool | None:
        """Whether some process holds the directory's lock now (unilab.run.run_lock takes it for as
        long as an apply runs); None when that cannot be read."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        finally:
            os.close(fd)  # releases the shared lock taken to look
        return False

    def never_started(self, *, locked_by_us: bool = False) -> UnilabError | None:
        """The refusal for a run directory whose `unilab apply` stopped (or was killed) before the
        run began: plan.toml, perhaps events.jsonl, but no manifest and no checkpoint. Every command
        that is given one names it so, instead of asking for a checkpoint or a manifest it never
        had. ``locked_by_us``: the caller holds the directory's lock (a resume), so a held lock
        means no start."""
        run_dir = self.root
        if not self.plan.is_file() or self.manifest.exists():
            return None
        if any(self.checkpoints.glob("*.pt")):
            return None  # it ran
        if not locked_by_us and self.held_by_an_apply():
            return None  # it is starting now
        return UnilabError(
            f"{run_dir} is a run that stopped before it started: it holds its plan"
            + (" and events.jsonl" if self.events.is_file() else "")
            + " but no manifest and no checkpoint, so nothing of it ran",
            detail="its apply was stopped or killed during start-up (events.jsonl, if any, says where)",
            fix=f"start it again with its plan: unilab apply {self.plan} (a new run directory); then remove {run_dir}",
        )

    # -- its checkpoints ----------------------------------------------------------------------

    def checkpoint_files(self) -> list[Path]:
        """The run's checkpoints, oldest first."""
        return list_checkpoints(self.checkpoints)

    def has_checkpoint(self) -> bool:
        return any(self.checkpoints.glob("ckpt-*.pt"))

    def recorded_digests(self) -> dict[str, str]:
        """Checkpoint name -> sha256 as the run recorded it (its manifest, and the digest files)."""
        return recorded_digests(self.root)

    def find_checkpoint(self, name: Path | None, command: str) -> Path:
        """The newest checkpoint, or the one ``name`` gives (a file name in RUN_DIR/checkpoints,
        or a path to one); ``command``: the `unilab` command the fixes name."""
        directory = self.checkpoints
        try:
            os.listdir(directory)  # glob() hides a permission error as "no checkpoint"
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _unreadable(directory, exc) from None
        ckpts = self.checkpoint_files()
        if name is None:
            if not ckpts:
                if (unstarted := self.never_started()) is not None:
                    raise unstarted
                raise UnilabError(f"{directory} holds no checkpoint", fix=f"{command} a run that wrote a checkpoint")
            return ckpts[-1]
        # By file name, or a path to one of them: only a checkpoint the run wrote (not its .sha256
        # file, not a file elsewhere that shares a name).
        if name.name == str(name):
            path = next((p for p in ckpts if p.name == name.name), None)
        else:
            path = next((p for p in ckpts if p.resolve() == name.resolve()), None)
        if path is None:
            raise UnilabError(
                f"--checkpoint {name} is not a checkpoint of {self.root}",
                detail=f"the run's checkpoints: {', '.join(p.name for p in ckpts) or 'none'}",
                fix="name one of them (or drop --checkpoint for the newest)",
            )
        return path

    def verified_checkpoint(self, plan: Plan, path: Path) -> tuple[Checkpoint, str]:
        """One of the run's checkpoints loaded (refused when corrupt or another plan's, or holding a
        non-finite tensor) and its bytes checked against the sha256 the run recorded; returns the
        checkpoint and that digest."""
        from unilab.records import checkpoint  # torch: `manifest validate` and `diff` read run directories without it

        blob = checkpoint.load_checkpoint(  # a corrupt file is named first
            path,
            plan_id=self.plan_ids(plan.plan_id),
            corrupt_fix=f"use another of the run's checkpoints (--checkpoint NAME; they are in {self.checkpoints})",
        )
        digest = checkpoint.check_recorded_digest(self.root, path)
        checkpoint.check_finite_weights(
            blob["state"], what=f"checkpoint {path}", fix="use an earlier checkpoint of the run (--checkpoint NAME)"
        )
        return blob, digest
