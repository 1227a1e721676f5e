"""Term declarations, importable without torch, warp or mujoco.

Each task package declares its term inventory with these (`TaskDef.terms`). The plan's
collector-graph preflight reads them to decide, before anything runs, whether a task's update
body may be captured as a CUDA graph. The runtime task builds its terms from the same names; a
test checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from unilab.sections import G1TaskSpec

TermKind = Literal["observation", "reward", "termination", "command", "event", "curriculum", "recorder"]


@dataclass(frozen=True)
class TermDecl:
    """One named term of a task and the properties that matter for graph capture."""

    name: str
    kind: TermKind
    # Adds noise to or corrupts a value (draws random numbers every step).
    noise: bool = False
    # An event that fires on a wall-clock or step interval rather than at reset.
    interval_event: bool = False
    # Draws random numbers through a host-side shortcut (python `random`, numpy) instead of a
    # device generator with a recorded draw version.
    rng_shortcut: bool = False
    # A curriculum that changes state outside a reset (not owned by the reset path).
    non_reset_curriculum: bool = False

    @property
    def graph_safe(self) -> bool:
        return not (
            self.noise
            or self.interval_event
            or self.rng_shortcut
            or self.non_reset_curriculum
            or self.kind == "recorder"
        )

    def graph_blockers(self) -> list[str]:
        """Reasons this term blocks an update-state graph, in a stable order."""
        out = []
        if self.noise:
            out.append("adds observation noise or corruption")
        if self.interval_event:
            out.append("is an interval event")
        if self.rng_shortcut:
            out.append("draws random numbers through a host-side shortcut")
        if self.non_reset_curriculum:
            out.append("is a curriculum not owned by the reset path")
        if self.kind == "recorder":
            out.append("is a recorder")
        return out


def g1_shared_tail(task: G1TaskSpec) -> tuple[list[TermDecl], list[TermDecl]]:
    """Observation noise and events that both G1 tasks honour the same way."""
    obs: list[TermDecl] = []
    if task.observation_noise:
        obs.append(TermDecl("observation_noise", "observation", noise=True))
    # Drawn at reset, on the device generator, for the worlds being reset: reset-owned.
    events = [TermDecl(RANDOMIZATION_EVENTS[key], "event") for key in randomization_keys(task)]
    if task.push_interval_s is not None:
        events.append(TermDecl("push_robot", "event", interval_event=True))
    return obs, events


# `task.domain_randomization`'s keys and the reset events that draw them, in the order both are
# listed (docs/tasks.md). All but the action delay are physics-model parameters.
RANDOMIZATION_EVENTS = {
    "floor_friction": "randomize_friction",
    "base_mass_kg": "randomize_base_mass",
    "base_com_m": "randomize_base_com",
    "link_mass_scale": "randomize_link_mass",
    "joint_armature_scale": "randomize_joint_armature",
    "joint_damping": "randomize_joint_damping",
    "joint_friction_scale": "randomize_joint_friction",
    "pd_gain_scale": "randomize_pd_gains",
    "action_delay_steps": "randomize_action_delay",
}
_NOT_MODEL_PARAMS = frozenset({"action_delay_steps"})


def randomization_keys(task: object) -> list[str]:
    """The `task.domain_randomization` terms a task spec switches on (none for a task without the key)."""
    dr = getattr(task, "randomization", None)
    return dr.on() if dr is not None else []


def needs_world_params(task: object) -> bool:
    """Whether the task randomizes physics-model parameters, which the backend must hold per world."""
    return any(k not in _NOT_MODEL_PARAMS for k in randomization_keys(task))
