"""Per-world model parameters for domain randomization: the floor's sliding friction and mass added
to the base body, resolved once from the MuJoCo model and applied the same way by both backends.

The floor has contact priority, so its friction is every floor contact's friction. Added base mass
scales the base's diagonal inertia with it and adds to the subtree mass of the base and its
ancestors (what MuJoCo's `mj_setConst` would give for those two fields); `body_invweight0` (only
the constraint solver's regularisation scale) keeps its nominal value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab.errors import UnilabError

FLOOR_GEOM = "floor"


@dataclass(frozen=True)
class WorldParamTargets:
    floor_geom: int
    floor_friction: float  # nominal sliding friction
    base_body: int
    chain: tuple[int, ...]  # the base and its ancestors (the world body included)
    base_mass: float
    base_inertia: tuple[float, float, float]
    subtree_mass: tuple[float, ...]  # nominal, per body in `chain`

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
        base = int(mjm.jnt_bodyid[free[0]])
        chain = [base]
        while chain[-1] != 0:
            chain.append(int(mjm.body_parentid[chain[-1]]))
        return WorldParamTargets(
            floor_geom=int(floor),
            floor_friction=float(mjm.geom_friction[floor, 0]),
            base_body=base,
            chain=tuple(chain),
            base_mass=float(mjm.body_mass[base]),
            base_inertia=tuple(float(x) for x in mjm.body_inertia[base]),  # type: ignore[arg-type]
            subtree_mass=tuple(float(mjm.body_subtreemass[b]) for b in chain),
        )

    def base_mass_and_ratio(self, offset: Any) -> tuple[Any, Any]:
        """Base mass with `offset` added, and its ratio to the nominal mass (the inertia's scale);
        floats for one world, tensors for many."""
        mass = self.base_mass + offset
        return mass, mass / self.base_mass

    def apply_to_model(self, mjm: Any, floor_friction: float | None, base_mass_offset: float | None) -> None:
        """One world's C MuJoCo model (the CPU backend keeps one per world once randomised)."""
        if floor_friction is not None:
            mjm.geom_friction[self.floor_geom, 0] = floor_friction
        if base_mass_offset is not None:
            mass, ratio = self.base_mass_and_ratio(base_mass_offset)
            mjm.body_mass[self.base_body] = mass
            mjm.body_inertia[self.base_body] = np.asarray(self.base_inertia) * ratio
            for b, nominal in zip(self.chain, self.subtree_mass, strict=True):
                mjm.body_subtreemass[b] = nominal + base_mass_offset


def not_built_with_world_params(backend: str) -> UnilabError:
    """A backend's refusal of ``set_world_params`` when it was built without them."""
    return UnilabError(
        f"this {backend} physics backend was built without per-world model parameters",
        fix="build it with world_params=True (the collector does when task.domain_randomization is on)",
    )
