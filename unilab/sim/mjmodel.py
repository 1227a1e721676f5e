"""Compile an MJCF for a physics backend and describe what the backends need to know about it.

Both backends advance a world the same way, so that the state they publish means the same thing:

* ``reset``: ``mj_resetData`` of the world, then qpos/qvel from the caller, ctrl = 0, ``mj_forward``.
* ``step``: ctrl, then ``decimation`` times (``mj_step2``; ``mj_step1``) -- the same arithmetic as
  ``mj_step`` (same trajectory, bitwise, on CPU), but the position and velocity stages of the *new*
  state are computed at the end of each substep instead of at the start of the next one. So
  kinematics, cvel and position/velocity sensors are those of the returned qpos/qvel at no extra
  cost. Then a short tail: ``mj_fwdActuation`` (actuator_force for the current state and ctrl) and,
  when the backend is built with ``acc_sensors`` (the default) and the model has acceleration-stage
  sensors (accelerometer, touch, force, ...), the acceleration stage (constraint solve) and those
  sensors. The tail never changes the trajectory (``qacc_warmstart`` is only written by the
  integrator). Without ``acc_sensors`` those sensors' ``sensordata`` columns hold what ``mj_step``
  leaves there: the readings of the last substep's state before it was integrated (one substep
  old). The collector asks for them only when its task reads them
  (`TaskDef.acc_sensors`, ``unilab.collect.build.reads_acceleration_sensors``); no built-in task does.

Measured (``tools/bench_physics.py --schemes``, one G1 world, decimation 4, per env step):
``mj_step`` x4 alone 157 us (not consistent), ``mj_step`` x4 + ``mj_forward`` 193 us, the split
loop + ``mj_fwdActuation`` 159 us, the split loop + acceleration tail 178 us (the G1 has an
accelerometer, so that is what a task reading it costs: about 10% more per env step).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from unilab.errors import UnilabError

if TYPE_CHECKING:
    import mujoco

    from unilab.sim.contract import ModelDims  # imports torch; worker processes must not


def load_mj_model(model_xml: str) -> mujoco.MjModel:
    """Compile ``model_xml``: MJCF text (starts with ``<``) or a path to an MJCF file."""
    import mujoco

    text = model_xml.lstrip()
    try:
        if text.startswith("<"):
            model = mujoco.MjModel.from_xml_string(model_xml)
        else:
            path = Path(model_xml)
            if not path.is_file():
                raise UnilabError(
                    f"the physics model file {model_xml!r} does not exist",
                    fix="pass MJCF text or the path of an existing MJCF file",
                )
            model = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as exc:  # MuJoCo's compiler errors
        raise UnilabError(
            "MuJoCo cannot compile the physics model",
            detail=str(exc),
            fix="fix the MJCF (the compiler message above names the element)",
        ) from exc
    check_supported(model)
    return model


def check_supported(model: mujoco.MjModel) -> None:
    """Refuse what the step1/step2 split cannot reproduce (MuJoCo's step2 has no RK4)."""
    import mujoco

    if model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4:
        raise UnilabError(
            "the physics model uses the RK4 integrator, which the backends do not support",
            detail="the backends advance with mj_step2/mj_step1 so that returned kinematics match the "
            "state; MuJoCo's mj_step2 integrates RK4 models with Euler, which would silently change the physics",
            fix='set <option integrator="implicitfast"/> (or "Euler") in the MJCF',
        )


def model_dims(model: mujoco.MjModel) -> ModelDims:
    from unilab.sim.contract import ModelDims

    return ModelDims(
        nq=int(model.nq),
        nv=int(model.nv),
        nu=int(model.nu),
        nbody=int(model.nbody),
        nsensordata=int(model.nsensordata),
    )


def has_acc_stage_sensors(model: mujoco.MjModel) -> bool:
    """Whether some sensor needs the acceleration stage (so the step tail must run it)."""
    import mujoco

    return bool((model.sensor_needstage == int(mujoco.mjtStage.mjSTAGE_ACC)).any())
