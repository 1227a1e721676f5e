"""The physics backend contract shared by the CPU MuJoCo and MuJoCo Warp backends.

Tasks only ever see this contract: fixed-shape torch tensors that are allocated once when the
backend is built and updated in place by ``step`` and ``reset``. No per-step allocation, no
pickling, no copies back and forth between processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class ModelDims:
    """Sizes of the compiled MuJoCo model, identical for every world."""

    nq: int
    nv: int
    nu: int
    nbody: int  # including the world body (index 0)
    nsensordata: int


@dataclass
class PhysicsState:
    """Per-world physics state, shape [num_envs, ...], updated in place.

    All quantities are consistent with ``qpos``/``qvel`` after ``step`` or ``reset`` returns
    (kinematics and sensors computed for the current state, not the previous substep). One
    exception, on request: a backend built with ``acc_sensors=False`` leaves the acceleration-stage
    sensors (accelerometer, touch, force) of a ``step`` one substep old, as ``mj_step`` does, and
    saves a constraint solve per step (``unilab.sim.mjmodel``).
    """

    qpos: torch.Tensor  # [N, nq] float32
    qvel: torch.Tensor  # [N, nv] float32
    ctrl: torch.Tensor  # [N, nu] float32, the last control applied
    xpos: torch.Tensor  # [N, nbody, 3] body positions in world frame
    xquat: torch.Tensor  # [N, nbody, 4] body orientations (w, x, y, z)
    cvel: torch.Tensor  # [N, nbody, 6] body com-based velocities (rot, lin), MuJoCo's cvel
    actuator_force: torch.Tensor  # [N, nu]
    sensordata: torch.Tensor  # [N, nsensordata]


class PhysicsBackend(Protocol):
    """What a collector needs from a physics engine; both backends implement it."""

    num_envs: int
    dims: ModelDims
    device: torch.device
    state: PhysicsState

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> PhysicsState:
        """Set the state of the worlds where ``mask`` [N] bool is true to ``qpos`` [N, nq] and
        ``qvel`` [N, nv] (rows of unmasked worlds are ignored), zero their controls, recompute
        derived quantities. Unmasked worlds are left exactly as they were."""
        ...

    def step(self, ctrl: torch.Tensor) -> PhysicsState:
        """Apply ``ctrl`` [N, nu] and advance every world by ``decimation`` physics substeps."""
        ...

    def close(self) -> None:
        """Release workers, shared memory and device resources. Idempotent."""
        ...

    def diagnostics(self) -> dict[str, Any]:
        """What the manifest records about the backend: e.g. workers and MuJoCo warning counts
        (mujoco), graph_requested/graph_enabled/graph_disable_reason/graph_replays (mjwarp).
        May synchronise with the device or the workers: call it at interval boundaries."""
        ...


def physics_warnings(diag: dict[str, Any]) -> dict[str, int]:
    """The warning counts in a backend's diagnostics, only kinds seen: MuJoCo's own warnings summed
    over worlds (CPU; e.g. `bad_qacc`, a world MuJoCo reset itself), or for MuJoCo Warp the worlds
    whose contact or constraint buffers overflowed (physics silently dropped contacts there)."""
    if "mujoco_warnings" in diag:
        return {k: int(v) for k, v in diag["mujoco_warnings"].items() if v}
    kinds = diag.get("overflow_kinds") or []
    return {f"overflow_{k.lower()}_worlds": int(diag.get("overflow_worlds", 0)) for k in kinds}


# MuJoCo Warp's buffer overflows that a spec key sizes (the others: the model or the solver).
_OVERFLOW_FIXES = {
    "overflow_nefc_worlds": "sim.njmax",
    "overflow_njmax_nnz_worlds": "sim.njmax",
    "overflow_broadphase_worlds": "sim.nconmax",
    "overflow_narrowphase_worlds": "sim.nconmax",
    "overflow_ccd_worlds": "sim.nconmax",
}


def physics_warning_fix(kind: str, njmax: int | None = None, nconmax: int | None = None) -> str | None:
    """What to change for a physics warning, when a spec key can: dropped constraint rows or contacts."""
    key = _OVERFLOW_FIXES.get(kind)
    if key is None:
        return None
    now = njmax if key == "sim.njmax" else nconmax
    return f"raise {key}" + (f" (this run: {now} per world)" if now else "") + " and re-plan"
