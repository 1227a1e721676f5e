"""`BackendDef`: what the planner and the runtime may ask of a physics backend, as data.

Torch-free (the planner imports it): rules, the plan's resolution, the collector, the recorder,
eval and profile ask these questions instead of comparing `sim.backend` names. unilab.sim.factory
builds the backend a record names, importing its module only then.
"""

from __future__ import annotations

from dataclasses import dataclass

from unilab.errors import UnilabError


@dataclass(frozen=True)
class BackendDef:
    name: str  # the spec's `sim.backend`
    title: str  # how messages name it ("CPU MuJoCo")
    # Steps the worlds in CPU worker processes (`sim.workers`), on the CPU only; otherwise every world
    # at once, in one process, on the rank's device.
    cpu_workers: bool
    # Its step can be captured as a CUDA graph (`training.physics_graph`, the collector's update-state
    # graph), and it runs on a CUDA rank's GPU: a CUDA context of its own that MPS can share.
    cuda: bool
    # Preallocates per-world constraint and contact rows (`sim.njmax`, `sim.nconmax`) and counts the
    # worlds that overflowed them.
    fixed_buffers: bool
    # Distribution names (as pip installs them) of what it needs beside torch; the `tested` ones are
    # pinned to the releases unilab is tested with (unilab.host.tested).
    packages: tuple[str, ...]
    tested: tuple[str, ...]
    # The unilab extra that installs what it needs beyond the base install (unilab.extras), if any.
    extra: str | None
    # "module:function" that builds it (unilab.sim.factory.make_backend calls it with the model, the
    # world count, the decimation and the options it checked), imported only when chosen.
    runtime: str


MUJOCO = BackendDef(
    name="mujoco",
    title="CPU MuJoCo",
    cpu_workers=True,
    cuda=False,
    fixed_buffers=False,
    packages=("mujoco",),
    tested=("mujoco",),
    extra=None,
    runtime="unilab.sim.mujoco_cpu:build",
)
MJWARP = BackendDef(
    name="mjwarp",
    title="MuJoCo Warp",
    cpu_workers=False,
    cuda=True,
    fixed_buffers=True,
    packages=("mujoco", "warp-lang", "mujoco-warp"),
    tested=("mujoco", "mujoco-warp"),
    extra="gpu",
    runtime="unilab.sim.mjwarp_backend:build",
)

BACKENDS: dict[str, BackendDef] = {b.name: b for b in (MUJOCO, MJWARP)}
# The names `sim.backend` takes, for the spec's and the manifest's models (a Literal of them).
BACKEND_NAMES = tuple(BACKENDS)
# How the spec and the manifest describe the choice: "CPU MuJoCo or MuJoCo Warp".
BACKEND_TITLES = " or ".join(b.title for b in BACKENDS.values())
# Where a run's policy is played whatever it trained on (eval, play, sim2sim): every host has it.
CPU_BACKEND = MUJOCO
# The backend that steps physics on a GPU and shares it (the fixes of CUDA-only options name it).
CUDA_BACKEND = MJWARP


def backend_def(sim: object) -> BackendDef:
    """The definition of a `[sim]` section (a spec or plan model) or of a backend's name."""
    name = sim if isinstance(sim, str) else getattr(sim, "backend", None)
    d = BACKENDS.get(name)  # type: ignore[arg-type]
    if d is None:
        raise UnilabError(
            f"unknown physics backend {name!r}", fix=f"set sim.backend to one of {', '.join(sorted(BACKENDS))}"
        )
    return d
