"""Building, validating and writing manifest.json. Every version is validated against the
manifest JSON schema before it is written (atomically) and emitted as a `manifest` event."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from unilab import __version__
from unilab.atomic import write_atomic, write_text_atomic
from unilab.errors import UnilabError
from unilab.host.facts import HostFacts
from unilab.inputfile import read_input
from unilab.manifest.consistency import ConsistencyReport, check_manifest
from unilab.manifest.models import MANIFEST_SCHEMA_VERSION, Manifest, Provenance
from unilab.records.events import EventLog
from unilab.records.run_dir import RunDir
from unilab.schema_document import schema_document


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def checkout_state(package: Path) -> tuple[str | None, bool | None]:
    """(commit, whether its unilab/ has uncommitted changes) of the unilab checkout whose package directory is
    ``package``; (None, None) for an installed copy, even one that sits inside some other git
    repository (a virtual environment in a project's tree): that repository's commit says nothing
    about unilab's code."""
    top = _git(["rev-parse", "--show-toplevel"], package)
    if top is None or Path(top).resolve() / "unilab" != package:
        return None, None
    commit = _git(["rev-parse", "HEAD"], package)
    status = _git(["status", "--porcelain", "--", "."], package)  # the package's files, new ones too
    return commit, (None if commit is None or status is None else status != "")


# A dirty checkout's patch is kept up to this size: enough for any edit to unilab's source, not
# for a data file someone dropped into the package.
CODE_DIFF_CAP = 1 << 20


def _git_bytes(args: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> bytes | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode in ok else None


def checkout_diff(package: Path) -> bytes | None:
    """The uncommitted changes of the checkout's ``package`` directory as one patch (``git apply``
    takes it on top of the recorded commit): its tracked files against HEAD, then its new files.
    None when git cannot say."""
    top = _git(["rev-parse", "--show-toplevel"], package)
    if top is None:
        return None
    tracked = _git_bytes(["diff", "HEAD", "--binary", "--", str(package)], Path(top))
    new = _git_bytes(["ls-files", "--others", "--exclude-standard", "--full-name", "-z", "--", "."], package)
    if tracked is None or new is None:
        return None
    parts = [tracked]
    for name in filter(None, new.decode("utf-8", "surrogateescape").split("\0")):
        # --no-index exits 1 when the files differ, which a new file always does.
        patch = _git_bytes(["diff", "--no-index", "--binary", "--", "/dev/null", name], Path(top), ok=(0, 1))
        if patch is None:
            return None
        parts.append(patch)
    return b"".join(parts)


def keep_code_diff(run_dir: Path, prov: Provenance, started_at: str) -> Provenance:
    """A dirty checkout's changes kept in the run directory (code/<session start>.patch, capped at
    CODE_DIFF_CAP), named in the provenance with their sha256: git_commit alone does not say what
    ran. A clean checkout, or an installed copy, keeps nothing."""
    import hashlib

    if not prov.git_dirty:
        return prov
    patch = checkout_diff(Path(__file__).resolve().parent.parent)
    if patch is None:
        return prov
    truncated = len(patch) > CODE_DIFF_CAP
    patch = patch[:CODE_DIFF_CAP]
    stamp = started_at.replace("-", "").replace(":", "").split(".")[0] + "Z"
    path = run_dir / "code" / f"{stamp}.patch"
    path.parent.mkdir(exist_ok=True)
    write_atomic(path, lambda f: f.write(patch), "code diff")
    return prov.model_copy(
        update={
            "git_diff": str(path.relative_to(run_dir)),
            "git_diff_sha256": "sha256:" + hashlib.sha256(patch).hexdigest(),
            "git_diff_truncated": truncated,
        }
    )


def provenance(facts: HostFacts) -> Provenance:
    import torch

    commit, dirty = checkout_state(Path(__file__).resolve().parent.parent)
    return Provenance(
        os=f"{facts.os.system} {facts.os.release} {facts.os.machine}",
        cpu=facts.cpu.model,
        python=platform.python_version(),
        unilab=__version__,
        git_commit=commit,
        git_dirty=dirty,
        torch=torch.__version__,
        cuda_runtime=torch.version.cuda,
        warp_lang=facts.packages.warp_lang,
        mujoco=facts.packages.mujoco,
        mujoco_warp=facts.packages.mujoco_warp,
        gpu_names=[g.name for g in facts.nvidia.gpus],
        driver_version=facts.nvidia.driver_version,
        working_dir=os.getcwd(),
    )


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:

    schema = schema_document(Manifest, "manifest", MANIFEST_SCHEMA_VERSION)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def validate_manifest_data(data: Any, source: str, fix: str = "") -> None:
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise UnilabError(
            f"{source} does not match schemas/manifest.v1.json: {where}: {e.message[:300]}",
            detail=f"{len(errors)} violation(s) in all",
            fix=fix,
        )


def write_manifest(path: Path, manifest: Manifest, events: EventLog | None) -> None:
    data = manifest.model_dump(mode="json")
    validate_manifest_data(data, "the manifest about to be written")
    write_text_atomic(path, json.dumps(data, indent=2) + "\n", "manifest")
    if events is not None:
        events.info("manifest", manifest=data)


def validate_manifest_file(path: Path) -> tuple[Manifest, ConsistencyReport]:
    """The manifest (``path`` is the file or its run directory), after its schema and its
    consistency (fields, and the run directory's plan and checkpoints when it is a run's
    manifest.json) are checked."""
    if path.is_dir():
        run = RunDir(path)
        if (unstarted := run.never_started()) is not None:
            raise unstarted
        if not run.manifest.is_file():
            raise UnilabError(
                f"{path} is a directory without manifest.json",
                fix="pass a run directory written by `unilab apply`, or its manifest.json",
            )
        path = run.manifest
    try:
        data = json.loads(read_input(path, "manifest").decode("utf-8"))
        json.dumps(data, ensure_ascii=False).encode("utf-8")  # "\ud800" parses, but is no character
    except FileNotFoundError:
        raise UnilabError(f"{path} does not exist", fix="pass RUN_DIR/manifest.json") from None
    except RecursionError:
        raise UnilabError(
            f"{path} is nested too deeply to read: not a manifest",
            fix="pass RUN_DIR or RUN_DIR/manifest.json as `unilab apply` wrote it",
        ) from None
    except UnicodeEncodeError:
        raise UnilabError(
            f"{path} holds text that is not valid Unicode (a lone surrogate escape such as \\ud800)",
            fix="only `unilab apply` writes manifests: this one was edited or made elsewhere",
        ) from None
    except (OSError, ValueError) as exc:
        raise UnilabError(
            f"{path} is not readable JSON: {exc}",
            fix="pass RUN_DIR or RUN_DIR/manifest.json as `unilab apply` wrote it",
        ) from None
    validate_manifest_data(
        data,
        str(path),
        fix="only `unilab apply` writes manifests: this one was edited or made elsewhere (every manifest "
        "a run wrote is also in its events.jsonl, as a `manifest` event)",
    )
    m = Manifest.model_validate(data)
    report = check_manifest(m, path)
    if report.problems:
        n = len(report.problems)
        raise UnilabError(
            f"{path} is inconsistent: {report.problems[0]}",
            detail=f"{n} problem{'s' if n != 1 else ''} in all" + "".join(f"\n  {p}" for p in report.problems[1:]),
            fix="only `unilab apply` writes manifests: this one, or its run directory, was edited after the run "
            "(every manifest a run wrote is also in its events.jsonl, as a `manifest` event)",
        )
    return m, report
