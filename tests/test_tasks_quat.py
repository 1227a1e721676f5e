"""The tasks' batched quaternion helpers agree with MuJoCo's own quaternion arithmetic."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import torch

from unilab.tasks import quat as Q


def _random_quats(n: int, seed: int) -> np.ndarray:
    q = np.random.default_rng(seed).normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_product_rotation_and_angles_match_mujoco() -> None:
    a, b = _random_quats(32, 0), _random_quats(32, 1)
    v = np.random.default_rng(2).normal(size=(32, 3))
    ta, tb, tv = (torch.tensor(x, dtype=torch.float64) for x in (a, b, v))
    prod, rot, inv = Q.quat_mul(ta, tb), Q.quat_apply(ta, tv), Q.quat_apply_inverse(ta, tv)
    for i in range(32):
        want = np.zeros(4)
        mujoco.mju_mulQuat(want, a[i], b[i])
        np.testing.assert_allclose(prod[i].numpy(), want, atol=1e-12)
        r = np.zeros(3)
        mujoco.mju_rotVecQuat(r, v[i], a[i])
        np.testing.assert_allclose(rot[i].numpy(), r, atol=1e-12)
        neg = np.zeros(4)
        mujoco.mju_negQuat(neg, a[i])
        mujoco.mju_rotVecQuat(r, v[i], neg)
        np.testing.assert_allclose(inv[i].numpy(), r, atol=1e-12)
        diff = np.zeros(3)
        mujoco.mju_subQuat(diff, a[i], b[i])
        assert math.isclose(float(Q.quat_error_angle(ta[i], tb[i])), np.linalg.norm(diff), abs_tol=1e-9)
    g = Q.quat_apply_inverse(ta, torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64).expand(32, 3))
    torch.testing.assert_close(Q.gravity_z(ta), g[:, 2])


def test_yaw_part_and_rot6d() -> None:
    yaw = torch.tensor([0.3, -2.0, 3.0], dtype=torch.float64)
    qz = Q.quat_from_axis_angle_z(yaw)
    tilt = torch.tensor([math.cos(0.1), math.sin(0.1), 0.0, 0.0], dtype=torch.float64).expand(3, 4)
    # A small roll after the heading does not change the heading.
    torch.testing.assert_close(Q.yaw_quat(Q.quat_mul(qz, tilt)), qz)
    mat = np.zeros(9)
    q = _random_quats(1, 3)[0]
    mujoco.mju_quat2Mat(mat, q)
    cols = mat.reshape(3, 3)[:, :2].T.reshape(6)
    np.testing.assert_allclose(Q.quat_to_rot6d(torch.tensor(q)).numpy(), cols, atol=1e-12)
