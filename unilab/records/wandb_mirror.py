"""A Weights & Biases mirror of a run (`[run.wandb]`): the scalars rank 0 writes to TensorBoard,
the plan as the W&B config, and the final manifest as a file of the W&B run.

The W&B run lives in the run directory (`RUN_DIR/wandb/`) under an id derived from the run
directory's path, so an online resume continues the same W&B run; offline, each session writes its
own `offline-run-*` directory under that id (`wandb sync` them in order). Scalars are plotted
against `env_steps`, a logged value rather than W&B's step, so a resume from an earlier checkpoint
logs its points instead of having them dropped as steps gone back. Offline, nothing touches the
network: the wandb SDK's own usage telemetry (an OpenTelemetry probe of W&B's server at the end of a
run, and its error reports) is off for the mirror's lifetime (OFFLINE_ENV). `auto` goes online only
when an API key is configured and the server (or the HTTPS proxy) answers within CONNECT_TIMEOUT_S,
and says which it chose. Ending the run waits at most
FINISH_TIMEOUT_S for W&B's uploads: the run's own record is complete by then.
"""

from __future__ import annotations

import hashlib
import netrc
import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from unilab.errors import UnilabError
from unilab.extras import require
from unilab.plan.models import Plan

CONNECT_TIMEOUT_S = 3.0
INIT_TIMEOUT_S = 30.0  # W&B's own start-up (its service process), online or not
FINISH_TIMEOUT_S = 60.0
DEFAULT_BASE_URL = "https://api.wandb.ai"
# The wandb SDK sends usage telemetry and error reports unless the process runs offline as a whole
# (WANDB_MODE, read when its process-wide settings are made) or error reporting is off: `mode =
# "offline"` on one run does not stop them. Set while an offline mirror lives, then restored.
OFFLINE_ENV = {"WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}
OFFLINE_FIX = 'set run.wandb.mode = "offline" and upload later with `wandb sync RUN_DIR/wandb/offline-run-*`'


def wandb_run_id(run_dir: Path) -> str:
    """A W&B run id for a unilab run directory, from its full path: two runs of one name started in
    the same second elsewhere (a sweep's nodes) do not share it; a resume of the directory does."""
    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]


def _server_answers(base_url: str) -> bool:
    """Whether W&B's server, or the HTTPS proxy W&B would go through, accepts a connection."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    try:
        url = urlparse(proxy or base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname or "", port), timeout=CONNECT_TIMEOUT_S):
            return True
    except (OSError, ValueError):  # ValueError: a malformed URL or port
        return False


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:  # ~/.netrc, as `wandb login` writes it
        host = urlparse(os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL)).hostname
        return netrc.netrc().authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def choose_mode(requested: str) -> tuple[str, str]:
    """(online or offline, why)."""
    if requested == "offline":
        return "offline", "run.wandb.mode = offline"
    base = os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL)
    key, answers = _has_api_key(), _server_answers(base)
    if key and answers:
        return "online", f"an API key is configured and {base} answers"
    why = "no W&B API key is configured (WANDB_API_KEY or `wandb login`)" if not key else f"{base} does not answer"
    if requested == "online":
        raise UnilabError(f"run.wandb.mode = online, but {why}", fix=f"log in (`wandb login`) or {OFFLINE_FIX}")
    return "offline", why


class WandbMirror:
    def __init__(self, plan: Plan, run_dir: Path, resumed: bool) -> None:
        spec = plan.run.wandb
        if spec is None:
            raise ValueError("WandbMirror needs [run.wandb]")
        wandb = require("wandb", "wandb", "[run.wandb]")
        self.mode, self.why = choose_mode(spec.mode)
        self.run_dir = run_dir
        self._saved_env: dict[str, str | None] = {}
        if self.mode == "offline":
            self._saved_env = {k: os.environ.get(k) for k in OFFLINE_ENV}
            os.environ.update(OFFLINE_ENV)
        try:
            self.run = wandb.init(
                project=spec.project,
                entity=spec.entity,
                name=run_dir.name,
                id=wandb_run_id(run_dir),
                resume="allow" if resumed else None,
                dir=str(run_dir),
                mode=self.mode,
                tags=list(spec.tags),
                config=plan.model_dump(mode="json", exclude_none=True),
                settings=wandb.Settings(init_timeout=INIT_TIMEOUT_S, silent=True, console="off"),
            )
        except Exception as exc:  # W&B raises its own error types (CommError, UsageError, ...)
            self._restore_env()
            raise UnilabError(
                f"the W&B mirror could not start ({self.mode}): {type(exc).__name__}: {exc}",
                fix=OFFLINE_FIX if self.mode == "online" else "check RUN_DIR/wandb/debug.log, or remove [run.wandb]",
            ) from None
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")

    @property
    def where(self) -> str:
        if self.mode == "online":
            return f"W&B run {self.run.url} ({self.why})"
        local = Path(self.run.dir).parent
        return f"W&B offline run in {local} ({self.why}); upload it with: wandb sync {local}"

    def log(self, scalars: dict[str, float], env_steps: int) -> None:
        self.run.log({**scalars, "env_steps": env_steps})

    def finish(self, manifest: Path | None, failed: bool) -> bool:
        """Attach the final manifest and end the W&B run, waiting at most FINISH_TIMEOUT_S (an
        upload on a failing network retries for long); False when it did not end in time."""

        errors: list[BaseException] = []

        def end() -> None:
            try:
                if manifest is not None and manifest.is_file():
                    self.run.save(str(manifest), base_path=str(self.run_dir), policy="now")
                self.run.finish(exit_code=1 if failed else 0)
            except Exception as exc:  # a full disk, a W&B error: said by the caller, not as a thread traceback
                errors.append(exc)

        worker = threading.Thread(target=end, name="wandb-finish", daemon=True)
        worker.start()
        worker.join(FINISH_TIMEOUT_S)
        self._restore_env()
        if errors:
            raise errors[0]
        return not worker.is_alive()

    def _restore_env(self) -> None:
        """The environment as it was before an offline mirror (the Python API runs rank 0 in the
        caller's process, whose later W&B use is its own)."""
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}
