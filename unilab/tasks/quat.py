"""Batched quaternion helpers on torch tensors, (w, x, y, z) order as MuJoCo stores them."""

from __future__ import annotations

import torch


def quat_conj(q: torch.Tensor) -> torch.Tensor:
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b (broadcasting), in vector form: fewer, larger ops than per component."""
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - (av * bv).sum(dim=-1, keepdim=True)
    v = aw * bv + bw * av + torch.linalg.cross(av, bv, dim=-1)
    return torch.cat((w, v), dim=-1)


def quat_apply(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v [..., 3] by unit quaternions q [..., 4]."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * torch.linalg.cross(u, v, dim=-1)
    return v + w * t + torch.linalg.cross(u, t, dim=-1)


def quat_apply_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate world vectors v into the frame of q (apply q's inverse)."""
    w = q[..., :1]
    u = -q[..., 1:]
    t = 2.0 * torch.linalg.cross(u, v, dim=-1)
    return v + w * t + torch.linalg.cross(u, t, dim=-1)


def quat_error_angle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rotation angle (rad, in [0, pi]) between unit quaternions a and b."""
    dot = (a * b).sum(-1).abs().clamp(max=1.0)
    return 2.0 * torch.acos(dot)


def heading(q: torch.Tensor) -> torch.Tensor:
    """Yaw angle (rad) of the frame's x axis projected on the world's horizontal plane."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def yaw_quat(q: torch.Tensor) -> torch.Tensor:
    """The yaw-only part of q (rotation about world z by its heading)."""
    return quat_from_axis_angle_z(heading(q))


def rotate_z_quat_perm(q: torch.Tensor) -> torch.Tensor:
    """(-z, -y, x, w) of q: with r = (cos h, 0, 0, sin h), r * q = cos h * q + sin h * perm(q)."""
    w, x, y, z = q.unbind(-1)
    return torch.stack((-z, -y, x, w), dim=-1)


def quat_from_axis_angle_z(angle: torch.Tensor) -> torch.Tensor:
    half = 0.5 * angle
    zero = torch.zeros_like(half)
    return torch.stack((torch.cos(half), zero, zero, torch.sin(half)), dim=-1)


def quat_to_rot6d(q: torch.Tensor) -> torch.Tensor:
    """First two columns of the rotation matrix, flattened [..., 6] (a continuous orientation feature)."""
    w, x, y, z = q.unbind(-1)
    c0 = torch.stack((1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)), dim=-1)
    c1 = torch.stack((2 * (x * y - w * z), 1 - 2 * (x * x + z * z), 2 * (y * z + w * x)), dim=-1)
    return torch.cat((c0, c1), dim=-1)


def gravity_z(q: torch.Tensor) -> torch.Tensor:
    """z component of the unit gravity vector (0, 0, -1) seen in the frame of q."""
    x, y = q[..., 1], q[..., 2]
    return 2.0 * (x * x + y * y) - 1.0
