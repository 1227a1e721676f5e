"""Build a physics backend by name; each backend module is imported only when chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from unilab.errors import UnilabError

if TYPE_CHECKING:
    from unilab.sim.contract import PhysicsBackend


def make_backend(
    backend: Literal["mujoco", "mjwarp"],
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
    """``mujoco``: C MuJoCo in ``workers`` processes (``device`` must be ``cpu``; ``physics_graph``
    must be false). ``mjwarp``: MuJoCo Warp on ``device`` (``cpu_ids``/``workers`` do not apply).
    ``world_params``: per-world floor friction and base mass (``set_world_params``, domain randomization).
    ``njmax`` / ``nconmax``: MuJoCo Warp's per-world constraint and contact capacities (None: defaults).
    ``acc_sensors``: acceleration-stage sensors of the returned state (False: skip that constraint
    solve; see ``unilab.sim.mjmodel``)."""
    if backend == "mujoco":
        if device != "cpu":
            raise UnilabError(
                f"the mujoco backend runs on the CPU, not on {device!r}",
                fix='use device "cpu" with backend "mujoco", or backend "mjwarp" for a GPU',
            )
        if physics_graph:
            raise UnilabError(
                "physics_graph is a MuJoCo Warp feature; the mujoco (CPU) backend has no physics graph",
                fix='set training.physics_graph = "off", or use backend "mjwarp" on a CUDA device',
            )
        from unilab.sim.mujoco_cpu import MujocoCpuBackend

        return MujocoCpuBackend(
            model_xml,
            num_envs,
            decimation,
            cpu_ids=cpu_ids,
            workers=workers,
            world_params=world_params,
            acc_sensors=acc_sensors,
        )
    if backend == "mjwarp":
        if workers != 1:
            raise UnilabError(
                f"workers = {workers} applies to the mujoco (CPU) backend; MuJoCo Warp steps all worlds at once",
                fix="set workers = 1 for backend mjwarp",
            )
        from unilab.sim.mjwarp_backend import MjwarpBackend

        return MjwarpBackend(
            model_xml,
            num_envs,
            decimation,
            device=device,
            physics_graph=physics_graph,
            world_params=world_params,
            njmax=njmax,
            nconmax=nconmax,
            acc_sensors=acc_sensors,
        )
    raise UnilabError(f"unknown physics backend {backend!r}", fix='use "mujoco" or "mjwarp"')
