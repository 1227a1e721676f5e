"""Steps a contiguous slice of worlds with C MuJoCo, one ``MjData`` per world.

Used in the parent process (``workers=1`` without ``cpu_ids``) and inside each worker process. It only reads and
writes numpy views of the state block (rows of its own worlds), so it never imports torch.
The stepping order is documented in ``unilab.sim.mjmodel``.
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np

from unilab.sim.mjmodel import has_acc_stage_sensors
from unilab.sim.state_layout import NUM_WARNINGS
from unilab.sim.world_params import WORLD_PARAMS, WorldParamTargets


def _counted_only(text: str) -> None:
    """MuJoCo's warnings are counted per world (``MjData.warning``, reported in the diagnostics and
    the manifest); without a handler MuJoCo would also append each one's text to MUJOCO_LOG.TXT in
    the user's working directory."""


class WorldStepper:
    def __init__(
        self, model: mujoco.MjModel, views: dict[str, np.ndarray], decimation: int, *, acc_sensors: bool = True
    ) -> None:
        """``views``: the state block's numpy arrays restricted to this slice's rows. ``acc_sensors``:
        see ``unilab.sim.mjmodel`` (False skips the acceleration tail)."""
        mujoco.set_mju_user_warning(_counted_only)
        self._m = model
        self._v = views
        self._decimation = decimation
        self._acc_tail = acc_sensors and has_acc_stage_sensors(model)
        self._datas = [mujoco.MjData(model) for _ in range(views["qpos"].shape[0])]
        if self._datas and len(self._datas[0].warning) != NUM_WARNINGS:
            raise RuntimeError(f"MuJoCo has {len(self._datas[0].warning)} warning kinds, the layout {NUM_WARNINGS}")
        # Warning counts of earlier episodes (mj_resetData clears MjData's counters).
        self._warn_base = np.zeros((len(self._datas), NUM_WARNINGS), dtype=np.int64)
        for i, d in enumerate(self._datas):
            mujoco.mj_forward(model, d)
            self._publish(i, d)
        # Per-world models, made on the first staged domain-randomization values (until then every
        # world shares the one model).
        self._models: list[mujoco.MjModel] | None = None
        self._targets: WorldParamTargets | None = None

    def _model(self, i: int) -> mujoco.MjModel:
        return self._m if self._models is None else self._models[i]

    def _apply_staged_params(self) -> None:
        """Apply the per-world model parameters the parent staged (``params_dirty``) since the last command."""
        v = self._v
        dirty = np.flatnonzero(v["params_dirty"])
        if dirty.size == 0:
            return
        targets, models = self._targets, self._models
        if targets is None or models is None:
            targets = self._targets = WorldParamTargets.from_model(self._m)
            models = self._models = [copy.copy(self._m) for _ in self._datas]
        for i in dirty:
            targets.apply_to_model(models[i], {name: v[name][i] for name in WORLD_PARAMS})
        v["params_dirty"][dirty] = 0

    def _publish(self, i: int, d: mujoco.MjData) -> None:
        v = self._v
        v["qpos"][i] = d.qpos
        v["qvel"][i] = d.qvel
        v["xpos"][i] = d.xpos
        v["xquat"][i] = d.xquat
        v["cvel"][i] = d.cvel
        v["actuator_force"][i] = d.actuator_force
        v["sensordata"][i] = d.sensordata

    def step(self) -> None:
        self._apply_staged_params()
        m, ctrl, dec = self._m, self._v["ctrl"], self._decimation
        models = self._models
        step1, step2 = mujoco.mj_step1, mujoco.mj_step2
        # All substeps of one world back to back: its MjData stays in cache.
        for i, d in enumerate(self._datas):
            if models is not None:
                m = models[i]
            d.ctrl[:] = ctrl[i]
            for _ in range(dec):
                step2(m, d)
                step1(m, d)
            self._tail(m, d)
            self._publish(i, d)

    def _tail(self, m: mujoco.MjModel, d: mujoco.MjData) -> None:
        mujoco.mj_fwdActuation(m, d)
        if self._acc_tail:
            mujoco.mj_fwdAcceleration(m, d)
            mujoco.mj_fwdConstraint(m, d)
            # mj_sensorAcc would reuse step2's cacc of the previous state (d.flg_rnepost): redo it.
            mujoco.mj_rnePostConstraint(m, d)
            mujoco.mj_sensorAcc(m, d)

    def reset(self) -> None:
        """Reset the worlds whose ``reset_mask`` is set to the qpos/qvel rows already in the views."""
        self._apply_staged_params()
        v = self._v
        for i in np.flatnonzero(v["reset_mask"]):
            m, d = self._model(i), self._datas[i]
            self._warn_base[i] += d.warning.number  # the array view: iterating the list costs ~150 us
            mujoco.mj_resetData(m, d)
            d.qpos[:] = v["qpos"][i]
            d.qvel[:] = v["qvel"][i]
            d.ctrl[:] = 0.0
            mujoco.mj_forward(m, d)
            self._publish(int(i), d)

    def write_warnings(self) -> None:
        """Copy MuJoCo's per-world warning counters (e.g. auto-resets on bad qacc) into the views."""
        out = self._v["warnings"]
        for i, d in enumerate(self._datas):
            out[i] = self._warn_base[i] + d.warning.number
