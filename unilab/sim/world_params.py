"""Per-world model parameters for domain randomization, resolved once from the MuJoCo model and
applied the same way by both backends.

A world's parameters are a few named arrays (``WORLD_PARAMS``), each an offset or a scale of the
model's nominal value, so that the identity (``identity_params``) is the model as built:

- ``floor_friction`` [N]: the floor's sliding friction (the floor has contact priority, so it is
  every floor contact's friction), absolute.
- ``base_mass_offset`` [N]: kg added to the floating base; ``link_mass_scale`` [N, nbody]: every
  body's mass times this. A body's inertia scales with its mass; the subtree masses follow
  (what MuJoCo's ``mj_setConst`` would give for them). ``body_invweight0`` and ``dof_invweight0``
  (only the constraint solver's regularisation scale) keep their nominal values.
- ``base_com_offset`` [N, 3]: metres added to the base body's centre of mass, in its frame.
- ``armature_scale``, ``frictionloss_scale`` [N, nv]: the joints' armature (the motors' reflected
  inertia) and dry friction times these; ``damping_offset`` [N, nv]: N m s / rad added to their
  passive damping (the G1 models have none of their own to scale).
- ``kp_scale``, ``kd_scale`` [N, nu]: the position servos' gains times these (motor strength).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.errors import UnilabError

FLOOR_GEOM = "floor"

# Name -> the model dimension of its trailing axis ("" for one value per world, or a fixed size).
WORLD_PARAMS: dict[str, str | int] = {
    "floor_friction": "",
    "base_mass_offset": "",
    "base_com_offset": 3,
    "link_mass_scale": "nbody",
    "armature_scale": "nv",
    "damping_offset": "nv",
    "frictionloss_scale": "nv",
    "kp_scale": "nu",
    "kd_scale": "nu",
}


def param_shape(name: str, num_envs: int, nbody: int, nv: int, nu: int) -> tuple[int, ...]:
    tail = WORLD_PARAMS[name]
    if tail == "":
        return (num_envs,)
    size = tail if isinstance(tail, int) else {"nbody": nbody, "nv": nv, "nu": nu}[tail]
    return (num_envs, size)


def check_param_names(names: Any) -> None:
    unknown = sorted(set(names) - set(WORLD_PARAMS))
    if unknown:
        raise UnilabError(
            f"internal: unknown per-world model parameters {unknown}",
            fix=f"name one of {sorted(WORLD_PARAMS)} (unilab.sim.world_params)",
        )


@dataclass(frozen=True)
class WorldParamTargets:
    """The model's nominal values of every field a world's parameters change."""

    floor_geom: int
    floor_friction: float  # nominal sliding friction
    base_body: int
    parent: tuple[int, ...]  # body_parentid
    body_mass: np.ndarray  # [nbody]
    body_inertia: np.ndarray  # [nbody, 3]
    base_ipos: np.ndarray  # [3]
    dof_armature: np.ndarray  # [nv]
    dof_damping: np.ndarray  # [nv]
    dof_frictionloss: np.ndarray  # [nv]
    kp: np.ndarray  # [nu]: gainprm[:, 0] (biasprm[:, 1] is -kp)
    kd: np.ndarray  # [nu]: -biasprm[:, 2]

    @staticmethod
    def from_model(mjm: Any) -> WorldParamTargets:
        import mujoco

        floor = mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_GEOM, FLOOR_GEOM)
        if floor < 0:
            raise UnilabError(
                f"domain randomization sets the friction of the geom named {FLOOR_GEOM!r}, which this model lacks",
                fix=f"name the ground geom {FLOOR_GEOM!r}, or set task.domain_randomization = false",
            )
        free = [j for j in range(mjm.njnt) if mjm.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if not free:
            raise UnilabError(
                "domain randomization adds mass to the floating base, and this model has no free joint",
                fix="set task.domain_randomization = false",
            )
        # A position servo: force = kp * (ctrl - q) - kd * qdot, i.e. gain kp and bias (0, -kp, -kd).
        servo = np.isclose(mjm.actuator_biasprm[:, 1], -mjm.actuator_gainprm[:, 0])
        if mjm.nu and not servo.all():
            raise UnilabError(
                "domain randomization scales position-servo gains, and this model has actuators that are not "
                "position servos",
                fix="set task.domain_randomization = { pd_gain_scale = false } or use position actuators",
            )
        base = int(mjm.jnt_bodyid[free[0]])
        return WorldParamTargets(
            floor_geom=int(floor),
            floor_friction=float(mjm.geom_friction[floor, 0]),
            base_body=base,
            parent=tuple(int(p) for p in mjm.body_parentid),
            body_mass=np.array(mjm.body_mass, dtype=np.float64),
            body_inertia=np.array(mjm.body_inertia, dtype=np.float64),
            base_ipos=np.array(mjm.body_ipos[base], dtype=np.float64),
            dof_armature=np.array(mjm.dof_armature, dtype=np.float64),
            dof_damping=np.array(mjm.dof_damping, dtype=np.float64),
            dof_frictionloss=np.array(mjm.dof_frictionloss, dtype=np.float64),
            kp=np.array(mjm.actuator_gainprm[:, 0], dtype=np.float64),
            kd=np.array(-mjm.actuator_biasprm[:, 2], dtype=np.float64),
        )

    @property
    def base_mass(self) -> float:
        return float(self.body_mass[self.base_body])

    def identity_params(self, num_envs: int) -> dict[str, np.ndarray]:
        """Every parameter at the nominal model's value, float32, [num_envs, ...]."""
        nbody, nv, nu = len(self.body_mass), len(self.dof_armature), len(self.kp)
        out = {}
        for name in WORLD_PARAMS:
            shape = param_shape(name, num_envs, nbody, nv, nu)
            fill = 1.0 if name.endswith("_scale") else 0.0
            out[name] = np.full(shape, fill, dtype=np.float32)
        out["floor_friction"][:] = self.floor_friction
        return out

    def masses(self, base_mass_offset: Any, link_mass_scale: Any) -> tuple[Any, Any]:
        """Body masses [..., nbody] and their ratio to the nominal (the inertias' scale); numpy
        arrays for one world, tensors (with a leading world axis) for many."""
        mass = link_mass_scale * _like(link_mass_scale, self.body_mass)
        mass[..., self.base_body] = mass[..., self.base_body] + base_mass_offset
        nominal = _like(mass, np.where(self.body_mass > 0, self.body_mass, 1.0))
        return mass, mass / nominal

    def subtree_masses(self, mass: Any) -> Any:
        """Each body's subtree mass from the body masses [..., nbody] (bodies follow their parents)."""
        sub = mass.clone() if hasattr(mass, "clone") else mass.copy()
        for b in range(len(self.parent) - 1, 0, -1):
            p = self.parent[b]
            sub[..., p] = sub[..., p] + sub[..., b]
        return sub

    def apply_to_model(self, mjm: Any, p: dict[str, np.ndarray]) -> None:
        """One world's C MuJoCo model (the CPU backend keeps one per world once randomised), from
        that world's row of every parameter."""
        mjm.geom_friction[self.floor_geom, 0] = float(p["floor_friction"])
        mass, ratio = self.masses(float(p["base_mass_offset"]), np.asarray(p["link_mass_scale"], dtype=np.float64))
        mjm.body_mass[:] = mass
        mjm.body_inertia[:] = self.body_inertia * ratio[:, None]
        mjm.body_subtreemass[:] = self.subtree_masses(mass)
        mjm.body_ipos[self.base_body] = self.base_ipos + p["base_com_offset"]
        mjm.dof_armature[:] = self.dof_armature * p["armature_scale"]
        mjm.dof_damping[:] = self.dof_damping + p["damping_offset"]
        mjm.dof_frictionloss[:] = self.dof_frictionloss * p["frictionloss_scale"]
        kp = self.kp * p["kp_scale"]
        mjm.actuator_gainprm[:, 0] = kp
        mjm.actuator_biasprm[:, 1] = -kp
        mjm.actuator_biasprm[:, 2] = -self.kd * p["kd_scale"]


def _like(ref: Any, values: np.ndarray) -> Any:
    """``values`` as ``ref``'s kind: a tensor on its device and dtype, or a numpy array."""
    if hasattr(ref, "new_tensor"):
        return ref.new_tensor(values)
    return np.asarray(values, dtype=np.float64)


def not_built_with_world_params(backend: str) -> UnilabError:
    """A backend's refusal of ``set_world_params`` when it was built without them."""
    return UnilabError(
        f"this {backend} physics backend was built without per-world model parameters",
        fix="build it with world_params=True (the collector does when task.domain_randomization is on)",
    )
