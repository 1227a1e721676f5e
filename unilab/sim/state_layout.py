"""Byte layout of the CPU backend's state block, shared by the parent and its worker processes.

One buffer holds every ``PhysicsState`` field for all worlds ([N, ...], float32, C order) plus the
reset mask, per-world MuJoCo warning counters and staged per-world model parameters. The parent
wraps it as torch tensors, each worker as numpy views of its own rows. Fields start on 64-byte
boundaries (cache lines), so no two fields share a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from unilab.sim.world_params import WORLD_PARAMS, param_shape

if TYPE_CHECKING:
    import numpy as np

    from unilab.sim.contract import ModelDims  # not at run time: workers must not import torch

# The PhysicsState fields, in contract order.
STATE_FIELDS: tuple[str, ...] = ("qpos", "qvel", "ctrl", "xpos", "xquat", "cvel", "actuator_force", "sensordata")
NUM_WARNINGS = 7  # mjNWARNING in MuJoCo 4.0; checked when a stepper starts
_ALIGN = 64


@dataclass(frozen=True)
class FieldSpec:
    name: str
    dtype: str  # numpy dtype name
    shape: tuple[int, ...]  # including the leading world dimension
    offset: int  # bytes from the start of the block

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * _itemsize(self.dtype)


def _itemsize(dtype: str) -> int:
    return {"float32": 4, "uint8": 1, "int64": 8}[dtype]


@dataclass(frozen=True)
class StateLayout:
    num_envs: int
    fields: tuple[FieldSpec, ...]
    total_bytes: int

    @staticmethod
    def build(num_envs: int, dims: ModelDims) -> StateLayout:
        n = num_envs
        shapes: list[tuple[str, str, tuple[int, ...]]] = [
            ("qpos", "float32", (n, dims.nq)),
            ("qvel", "float32", (n, dims.nv)),
            ("ctrl", "float32", (n, dims.nu)),
            ("xpos", "float32", (n, dims.nbody, 3)),
            ("xquat", "float32", (n, dims.nbody, 4)),
            ("cvel", "float32", (n, dims.nbody, 6)),
            ("actuator_force", "float32", (n, dims.nu)),
            ("sensordata", "float32", (n, dims.nsensordata)),
            ("reset_mask", "uint8", (n,)),
            ("warnings", "int64", (n, NUM_WARNINGS)),
            # Domain randomization (unilab.sim.world_params): staged by the parent, applied by the
            # stepper of each world at its next command, flagged until then.
            *((name, "float32", param_shape(name, n, dims.nbody, dims.nv, dims.nu)) for name in WORLD_PARAMS),
            ("params_dirty", "uint8", (n,)),
        ]
        fields = []
        offset = 0
        for name, dtype, shape in shapes:
            spec = FieldSpec(name, dtype, shape, offset)
            fields.append(spec)
            offset += -(-spec.nbytes // _ALIGN) * _ALIGN
        return StateLayout(num_envs=n, fields=tuple(fields), total_bytes=max(offset, _ALIGN))

    def arrays(self, buffer: memoryview | bytearray) -> dict[str, np.ndarray]:
        """numpy views of every field over ``buffer`` (no copy)."""
        import numpy as np

        return {
            f.name: np.ndarray(f.shape, dtype=np.dtype(f.dtype), buffer=buffer, offset=f.offset) for f in self.fields
        }
