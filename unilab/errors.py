"""Errors a user sees. Every refusal names what failed, the first unmet condition and a fix.

The CLI turns these into one paragraph and a non-zero exit; a Python traceback reaching the
user is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Diagnostic:
    """One violated plan rule: stable id, spec key path, first unmet condition, fixing command."""

    rule_id: str
    key_path: str
    condition: str
    fix: str

    def render(self) -> str:
        return f"[{self.rule_id}] {self.key_path}: {self.condition}\n    fix: {self.fix}"


def render_diagnostics(diagnostics: Sequence[Diagnostic]) -> list[str]:
    """The diagnostics' lines, those that share a fix grouped under it so it is printed once
    (`--set algo.name=ppo` leaves eight SAC keys behind, all with the same fix)."""
    groups: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault(d.fix, []).append(d)
    lines = []
    for fix, group in groups.items():
        lines += [f"[{d.rule_id}] {d.key_path}: {d.condition}" for d in group]
        lines.append(f"    fix: {fix}" if len(group) == 1 else f"    fix (the {len(group)} above): {fix}")
    return lines


def first_validation_error(exc: Any) -> str:
    """`key.path: message` of a pydantic ValidationError's first error, as refusals name it."""
    first = exc.errors(include_url=False)[0]
    loc = list(first["loc"])
    if len(loc) >= 2 and loc[0] in _CHOSEN_BY_NAME:
        del loc[1]  # pydantic names the member it tried (`task.cartpole.x`); the user's key is `task.x`
    return f"{'.'.join(str(p) for p in loc)}: {first['msg']}"


# Sections of specs and plans whose model their `name` key chooses.
_CHOSEN_BY_NAME = ("algo", "task")


class UnilabError(Exception):
    """A clear, user-facing failure: what went wrong and how to fix it."""

    exit_code = 1

    def __init__(self, summary: str, *, detail: str = "", fix: str = "") -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail
        self.fix = fix

    def render(self) -> str:
        parts = [f"error: {self.summary}"]
        if self.detail:
            parts.append(self.detail)
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return "\n".join(parts)


# Exit codes of a run (unilab apply, each rank).
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130

# The exit status of a child process that found itself re-running the user's script: `spawn`
# starts each child by importing the script that called unilab.apply, and a call outside an
# `if __name__ == "__main__":` guard runs again there (unilab.python_voice stops it).
EXIT_UNGUARDED_MAIN = 86
UNGUARDED_MAIN_FIX = (
    'call unilab.apply (and evaluate) under `if __name__ == "__main__":` in a script: each of the run\'s '
    "processes starts by importing the script, as torch's DataLoader workers do (docs/python.md, Processes)"
)

# The fix of a run's failure once it has a run directory (unilab.collect.collector_client.RunFailed);
# here, in a module without torch, so that handling a failure never imports anything.
RUN_FAILED_FIX = "read events.jsonl and the manifest in the run directory; resume with --resume RUN_DIR"


class SpecError(UnilabError):
    """The spec file cannot be read or does not validate (then one diagnostic per broken key)."""

    def __init__(
        self, summary: str, *, detail: str = "", fix: str = "", diagnostics: Sequence[Diagnostic] = ()
    ) -> None:
        super().__init__(summary, detail=detail, fix=fix)
        self.diagnostics = list(diagnostics)

    def render(self) -> str:
        if not self.diagnostics:
            return super().render()
        return "\n".join([f"error: {self.summary}", *render_diagnostics(self.diagnostics)])


class PlanRefused(UnilabError):
    """One or more plan rules are violated; every violation is listed."""

    def __init__(self, diagnostics: list[Diagnostic], against: str = "") -> None:
        self.diagnostics = list(diagnostics)
        n = len(self.diagnostics)
        # `against`: where the host facts came from when they are not this machine's (--host-facts).
        where = f" for the host facts in {against}" if against else ""
        super().__init__(f"the plan is refused{where}: {n} rule{'s' if n != 1 else ''} not met")

    def render(self) -> str:
        return "\n".join([f"error: {self.summary}", *render_diagnostics(self.diagnostics)])


class RobotModelError(UnilabError):
    """A robot MJCF is missing, malformed, or does not match the G1's 29 joints."""


class MotionFileError(UnilabError):
    """A reference motion file is missing, malformed or does not match the robot."""


class RunDiverged(UnilabError):
    """Training went non-finite: resuming the same plan would repeat it, so no resume is offered."""
