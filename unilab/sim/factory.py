"""Build the physics backend a `BackendDef` names; each backend module is imported only when chosen."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from unilab.errors import UnilabError
from unilab.sim.backends import backend_def

if TYPE_CHECKING:
    from unilab.sim.contract import PhysicsBackend


def make_backend(
    backend: str,
    model_xml: str,
    num_envs: int,
    decimation: int,
    device: str = "cpu",
    cpu_ids: list[int] | None = None,
    workers: int = 1,
    physics_graph: bool = False,
    world_params: bool = False,
    njmax: int | None = None,
    nconmax: int | None = None,
    acc_sensors: bool = True,
) -> PhysicsBackend:
    """``backend`` names a `BackendDef` (unilab.sim.backends), whose `runtime` builds it once the
    options fit it: a CPU backend (``mujoco``: C MuJoCo in ``workers`` processes) takes ``device``
    ``cpu`` and no ``physics_graph``; a backend that steps every world at once (``mjwarp``: MuJoCo
    Warp on ``device``) one worker (``cpu_ids`` do not apply).
    ``world_params``: per-world floor friction and base mass (``set_world_params``, domain randomization).
    ``njmax`` / ``nconmax``: MuJoCo Warp's per-world constraint and contact capacities (None: defaults).
    ``acc_sensors``: acceleration-stage sensors of the returned state (False: skip that constraint
    solve; see ``unilab.sim.mjmodel``)."""
    d = backend_def(backend)
    if not d.cuda and device != "cpu":
        raise UnilabError(
            f"the {d.name} backend runs on the CPU, not on {device!r}",
            fix=f'use device "cpu" with backend "{d.name}", or a CUDA backend for a GPU',
        )
    if not d.cuda and physics_graph:
        raise UnilabError(
            f"physics_graph captures a CUDA backend's step; the {d.name} ({d.title}) backend has no physics graph",
            fix='set training.physics_graph = "off", or use a CUDA backend on a CUDA device',
        )
    if not d.cpu_workers and workers != 1:
        raise UnilabError(
            f"workers = {workers} applies to CPU worker backends; {d.title} steps all worlds at once",
            fix=f"set workers = 1 for backend {d.name}",
        )
    module, _, function = d.runtime.partition(":")
    build = getattr(importlib.import_module(module), function)
    return build(  # type: ignore[no-any-return]
        model_xml,
        num_envs,
        decimation,
        device=device,
        cpu_ids=cpu_ids,
        workers=workers,
        physics_graph=physics_graph,
        world_params=world_params,
        njmax=njmax,
        nconmax=nconmax,
        acc_sensors=acc_sensors,
    )
