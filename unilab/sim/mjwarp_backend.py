"""MuJoCo Warp backend: all worlds in one ``mujoco_warp`` Data on Warp's CPU device or a GPU.

State tensors are zero-copy ``wp.to_torch`` views of the Warp arrays. Stepping follows the same
order as the CPU backend (``unilab.sim.mjmodel``): per substep ``step2`` then ``step1``, then
``fwd_actuation`` (plus the acceleration stage when the model has acceleration-stage sensors).

On CUDA, with ``physics_graph``, the decimation loop is captured once as a CUDA graph
(``wp.ScopedCapture``) and replayed with ``wp.capture_launch``; reset captures ``reset_data`` and
``forward`` likewise. All of the backend's GPU work -- Warp launches and the few torch ops
(ctrl copy, masked writes) -- runs on one dedicated stream that waits for the caller's current
torch stream on entry and that the caller's stream waits for on exit, so no host
synchronisation is needed and torch sees the results in order.

On Warp's CPU device ``physics_graph`` raises (the planner refuses it first). Warp 1.19 can in
fact record and replay launches on the CPU (APIC); the tests use that to check the capture and
replay plumbing bitwise against eager launches, and on the 2-core development machine it ran the
G1 5x faster than eager launches at 16 worlds and 1.9x at 64 (Python launch overhead dominates).
Offering it to users is a planner decision.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from unilab.errors import UnilabError
from unilab.sim.contract import ModelDims, PhysicsState
from unilab.sim.mjmodel import has_acc_stage_sensors, load_mj_model, model_dims
from unilab.sim.world_params import WorldParamTargets, check_param_names, not_built_with_world_params

if TYPE_CHECKING:
    from warp import Device

# Model fields domain randomization writes, batched per world when it is on.
# Constraint rows allocated per world when the spec does not say (sim.njmax): mjlab's figure for its
# G1 tasks. MuJoCo Warp's own estimate for the G1 (64) is below what a falling G1 needs (77-110
# rows measured with CPU MuJoCo); rows past the capacity are dropped, so it errs high.
DEFAULT_NJMAX = 300

_WORLD_FIELDS = (
    "geom_friction",
    "body_mass",
    "body_inertia",
    "body_subtreemass",
    "body_ipos",
    "dof_armature",
    "dof_damping",
    "dof_frictionloss",
    "actuator_gainprm",
    "actuator_biasprm",
)

# Fields that reset recomputes with forward (for all worlds) and restores for unmasked worlds.
_DERIVED = ("xpos", "xquat", "cvel", "actuator_force", "sensordata")


# Warp's native start-up prints this (to fd 2) on any host without an NVIDIA driver, though a
# backend on Warp's CPU device does not use CUDA: noise, at the start of every CPU run.
_NO_DRIVER_LINE = "Could not find or load the NVIDIA CUDA driver"


@contextlib.contextmanager
def _native_line_dropped(text: str, when: bool) -> Iterator[None]:
    """Inside the block, lines containing ``text`` written to file descriptor 2 (also by native
    code) are dropped; every other line is passed on afterwards, in order. UNILAB_DEBUG keeps all."""
    if not when or os.environ.get("UNILAB_DEBUG"):
        yield
        return
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().splitlines(keepends=True):
                if text.encode() not in line:
                    os.write(2, line)


def _warp_device(device: str) -> Device:
    """Warp's device for ``device``, or a UnilabError that says Warp does not see it."""
    import warp as wp

    try:
        return wp.get_device(device)
    except (RuntimeError, ValueError) as exc:
        raise UnilabError(
            f"Warp has no device {device!r}",
            detail=str(exc),
            fix='use device "cpu", or "cuda:N" on a host where Warp sees that GPU',
        ) from exc


def _refuse_unsupported_graph(wp_device: Device, device: str, physics_graph: bool) -> None:
    """A requested physics graph needs a CUDA device with Warp's memory pool on."""
    import warp as wp

    if physics_graph and not wp_device.is_cuda:
        raise UnilabError(
            f"physics_graph was requested on Warp device {device!r}; physics graphs need a CUDA device",
            fix='set training.physics_graph = "off" for the CPU device (the plan should already have refused this)',
        )
    if physics_graph and not wp.is_mempool_enabled(wp_device):
        raise UnilabError(
            f"physics_graph was requested but Warp's CUDA memory pool is disabled on {device}",
            detail="capturing MuJoCo Warp's step allocates inside the capture, which needs the mempool",
            fix='enable it (wp.set_mempool_enabled) or set training.physics_graph = "off" and re-plan',
        )


class MjwarpBackend:
    """``PhysicsBackend`` over MuJoCo Warp (``mujoco_warp``)."""

    def __init__(
        self,
        model_xml: str,
        num_envs: int,
        decimation: int,
        device: str = "cpu",
        physics_graph: bool = False,
        *,
        nconmax: int | None = None,
        njmax: int | None = None,
        world_params: bool = False,
        acc_sensors: bool = True,
    ) -> None:
        if num_envs < 1 or decimation < 1:
            raise UnilabError(f"the MJWarp backend needs num_envs and decimation >= 1 (got {num_envs}, {decimation})")
        import warp as wp

        # Warp's start-up banner and per-module "load ... took" lines are not the user's business
        # (UNILAB_DEBUG=1 keeps them); warnings still show. Set before anything initialises Warp.
        if not os.environ.get("UNILAB_DEBUG"):
            wp.config.log_level = wp.LOG_WARNING
        with _native_line_dropped(_NO_DRIVER_LINE, when=device == "cpu"):
            import mujoco_warp as mjw

            wp.init()

        self._wp = wp
        self._mjw = mjw
        mjm = load_mj_model(model_xml)
        self.num_envs = num_envs
        self.decimation = decimation
        self.dims: ModelDims = model_dims(mjm)
        self.acc_sensors = acc_sensors
        self._acc_tail = acc_sensors and has_acc_stage_sensors(mjm)

        self._wp_device = _warp_device(device)
        self.device = torch.device(wp.device_to_torch(self._wp_device))
        is_cuda = self._wp_device.is_cuda

        self._graph_requested = physics_graph
        _refuse_unsupported_graph(self._wp_device, device, physics_graph)

        # Domain randomization: the fields it writes get one row per world (MuJoCo Warp indexes
        # batched model fields by world), allocated before any graph captures their addresses.
        self._targets = WorldParamTargets.from_model(mjm) if world_params else None
        # The staged parameters and the nominal values, uploaded once: a host-to-device copy per
        # reset would synchronise the host.
        self._params: dict[str, torch.Tensor] = {}
        self._nominal: dict[str, torch.Tensor] = {}
        if self._targets is not None:
            tg = self._targets
            self._params = {k: torch.from_numpy(v).to(self.device) for k, v in tg.identity_params(num_envs).items()}
            self._nominal = {
                k: torch.tensor(getattr(tg, k), device=self.device, dtype=torch.float32)
                for k in ("body_inertia", "base_ipos", "dof_armature", "dof_damping", "dof_frictionloss", "kp", "kd")
            }
        batch = {f: num_envs for f in _WORLD_FIELDS} if world_params else None
        with wp.ScopedDevice(self._wp_device):
            self._m = mjw.put_model(mjm, batch_sizes=batch)
            self.njmax = njmax if njmax is not None else DEFAULT_NJMAX
            self._d = mjw.make_data(mjm, nworld=num_envs, nconmax=nconmax, njmax=self.njmax)
            self.nconmax = int(self._d.naconmax) // num_envs
            self._reset_mask_wp = wp.zeros(num_envs, dtype=bool)

        if is_cuda:
            wp.synchronize_device(self._wp_device)  # model/data uploads ran on Warp's default stream
            self._wp_stream: Any = wp.Stream(self._wp_device)
            self._torch_stream: Any = wp.stream_to_torch(self._wp_stream)
        else:
            self._wp_stream = None
            self._torch_stream = None

        self._view_state()

        self._graph_enabled = False
        self._graph_disable_reason = "" if physics_graph else "physics_graph not requested"
        self._graph_replays = 0
        self._step_graph: Any = None
        self._reset_graph: Any = None
        self._forward_graph: Any = None
        self._closed = False

        with self._on_stream():
            if physics_graph:
                self._capture_graphs()
            else:
                self._run(lambda: mjw.forward(self._m, self._d))

    def _view_state(self) -> None:
        """The torch views of the Data the backend hands out and reads: zero-copy, so they stay current."""
        d = self._d
        to_t = self._wp.to_torch
        self.state = PhysicsState(
            qpos=to_t(d.qpos),
            qvel=to_t(d.qvel),
            ctrl=to_t(d.ctrl),
            xpos=to_t(d.xpos),
            xquat=to_t(d.xquat),
            cvel=to_t(d.cvel),
            actuator_force=to_t(d.actuator_force),
            sensordata=to_t(d.sensordata),
        )
        self._reset_mask_t = to_t(self._reset_mask_wp)
        # MuJoCo Warp clears a world's overflow flags when it resets; folded in after every step (one
        # small device op, no host sync) so that a read every few syncs misses none.
        self._overflow_t = to_t(d.overflow)
        self._overflow_seen = torch.zeros_like(self._overflow_t)
        self._snapshot = {f: torch.empty_like(getattr(self.state, f)) for f in _DERIVED}

    # ------------------------------------------------------------------ warp plumbing

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        """Run torch and Warp work of this backend on its own stream, ordered after the caller's."""
        if self._torch_stream is None:
            yield
            return
        caller = torch.cuda.current_stream(self.device)
        self._torch_stream.wait_stream(caller)
        with torch.cuda.stream(self._torch_stream):
            yield
        caller.wait_stream(self._torch_stream)

    @contextlib.contextmanager
    def _warp_scope(self) -> Iterator[None]:
        """Warp's current device, and on CUDA its current stream, set to this backend's."""
        wp = self._wp
        with wp.ScopedDevice(self._wp_device):
            if self._wp_stream is None:
                yield
            else:
                # Ordering against the caller is done in _on_stream; no extra event here.
                with wp.ScopedStream(self._wp_stream, sync_enter=False):
                    yield

    def _run(self, body: Callable[[], None]) -> None:
        with self._warp_scope():
            body()

    def _launch(self, graph: Any, eager: Callable[[], None]) -> None:
        if graph is None:
            self._run(eager)
        else:
            self._wp.capture_launch(graph, stream=self._wp_stream)
            self._graph_replays += 1

    def _capture(self, body: Callable[[], None]) -> Any:
        # Capture on the current stream (ours): launches inside body go to it, so all are recorded.
        with self._warp_scope(), self._wp.ScopedCapture() as cap:
            body()
        return cap.graph

    def _capture_graphs(self) -> None:
        """Capture step, reset and forward; leaves every world at the model's initial state."""
        mjw, m, d = self._mjw, self._m, self._d
        try:
            # No module may load during a capture: run every captured body once eagerly (this
            # compiles its kernels), then put all worlds back to the model's initial state.
            self._run(self._step_body)
            self._reset_mask_t.fill_(True)
            self._run(lambda: mjw.reset_data(m, d, reset=self._reset_mask_wp))
            self._reset_mask_t.fill_(False)
            self._run(lambda: mjw.forward(m, d))
            self._step_graph = self._capture(self._step_body)
            self._reset_graph = self._capture(lambda: mjw.reset_data(m, d, reset=self._reset_mask_wp))
            self._forward_graph = self._capture(lambda: mjw.forward(m, d))
        except Exception as exc:  # fail closed: the plan said the graph is on
            raise UnilabError(
                "capturing the MuJoCo Warp physics graph failed",
                detail=f"{type(exc).__name__}: {exc}",
                fix='set training.physics_graph = "off" in the spec and re-plan, or report the failure',
            ) from exc
        self._graph_enabled = True
        self._graph_disable_reason = ""

    def _step_body(self) -> None:
        mjw, m, d = self._mjw, self._m, self._d
        for _ in range(self.decimation):
            mjw.step2(m, d)
            mjw.step1(m, d)
        mjw.fwd_actuation(m, d)
        if self._acc_tail:
            mjw.fwd_acceleration(m, d)
            mjw.solve(m, d)
            mjw.sensor_acc(m, d)  # runs rne_postconstraint itself when a sensor needs it

    # ------------------------------------------------------------------ contract

    def _check_open(self) -> None:
        if self._closed:
            raise UnilabError("the MJWarp physics backend is closed", fix="build a new backend")

    def step(self, ctrl: torch.Tensor) -> PhysicsState:
        self._check_open()
        s = self.state
        if ctrl is not s.ctrl and ctrl.shape != s.ctrl.shape:
            raise UnilabError(
                f"ctrl has shape {tuple(ctrl.shape)}, the MJWarp physics backend expects {tuple(s.ctrl.shape)}"
            )
        with self._on_stream():
            if ctrl is not s.ctrl:
                s.ctrl.copy_(ctrl)
                if ctrl.is_cuda:  # read on our stream: keep the caller's allocator from reusing it early
                    ctrl.record_stream(self._torch_stream)
            self._launch(self._step_graph, self._step_body)
            self._overflow_seen.bitwise_or_(self._overflow_t)
        return s

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> PhysicsState:
        self._check_open()
        s = self.state
        if mask.shape != (self.num_envs,) or qpos.shape != s.qpos.shape or qvel.shape != s.qvel.shape:
            raise UnilabError(
                f"reset got mask {tuple(mask.shape)}, qpos {tuple(qpos.shape)}, qvel {tuple(qvel.shape)}; "
                f"expected {(self.num_envs,)}, {tuple(s.qpos.shape)}, {tuple(s.qvel.shape)}"
            )
        if self.device.type != "cuda" and not bool(mask.any()):
            return s  # on CPU the check is free; on CUDA it would be a host sync
        mjw, m, d = self._mjw, self._m, self._d
        with self._on_stream():
            keep = ~self._reset_mask_t.copy_(mask.to(self.device, torch.bool))
            keep_rows = keep.unsqueeze(1)
            for f in _DERIVED:
                self._snapshot[f].copy_(getattr(s, f))
            # mj_resetData semantics for the masked worlds (time, act, warmstart, ctrl = 0, ...).
            self._launch(self._reset_graph, lambda: mjw.reset_data(m, d, reset=self._reset_mask_wp))
            torch.where(keep_rows, s.qpos, qpos.to(self.device, torch.float32), out=s.qpos)
            torch.where(keep_rows, s.qvel, qvel.to(self.device, torch.float32), out=s.qvel)
            # forward runs for every world; unmasked worlds get their derived fields back bitwise.
            self._launch(self._forward_graph, lambda: mjw.forward(m, d))
            for f in _DERIVED:
                view = getattr(s, f)
                cond = keep.view(-1, *([1] * (view.dim() - 1)))
                torch.where(cond, self._snapshot[f], view, out=view)
        return s

    @property
    def world_params_enabled(self) -> bool:
        return self._targets is not None

    def set_world_params(self, mask: torch.Tensor, **values: torch.Tensor) -> None:
        """Domain randomization hook (``unilab.tasks.events.ModelParamsBackend``): the named per-world
        parameters (``unilab.sim.world_params.WORLD_PARAMS``) of the worlds in ``mask``; device-side
        writes of the batched model fields, no host sync."""
        self._check_open()
        tg = self._targets
        if tg is None:
            raise not_built_with_world_params("MJWarp")
        check_param_names(values)
        to_t, m, p, nom = self._wp.to_torch, self._m, self._params, self._nominal
        with self._on_stream():
            mask = mask.to(self.device, torch.bool)
            for name, v in values.items():
                rows = mask.view(-1, *([1] * (p[name].dim() - 1)))
                p[name].copy_(torch.where(rows, v.to(self.device, torch.float32), p[name]))
            col, cols = mask.unsqueeze(1), mask.view(-1, 1, 1)

            def put(field: torch.Tensor, value: torch.Tensor, where: torch.Tensor) -> None:
                field.copy_(torch.where(where, value, field))

            # Only the model fields the given parameters derive: a reset sets them one event at a time.
            if "floor_friction" in values:
                put(to_t(m.geom_friction)[:, tg.floor_geom, 0], p["floor_friction"], mask)
            if "base_mass_offset" in values or "link_mass_scale" in values:
                mass, ratio = tg.masses(p["base_mass_offset"], p["link_mass_scale"])
                put(to_t(m.body_mass), mass, col)
                put(to_t(m.body_inertia), nom["body_inertia"] * ratio.unsqueeze(2), cols)
                put(to_t(m.body_subtreemass), tg.subtree_masses(mass), col)
            if "base_com_offset" in values:
                put(to_t(m.body_ipos)[:, tg.base_body], nom["base_ipos"] + p["base_com_offset"], col)
            if "armature_scale" in values:
                put(to_t(m.dof_armature), nom["dof_armature"] * p["armature_scale"], col)
            if "damping_offset" in values:
                put(to_t(m.dof_damping), nom["dof_damping"] + p["damping_offset"], col)
            if "frictionloss_scale" in values:
                put(to_t(m.dof_frictionloss), nom["dof_frictionloss"] * p["frictionloss_scale"], col)
            if "kp_scale" in values:
                kp = nom["kp"] * p["kp_scale"]
                put(to_t(m.actuator_gainprm)[:, :, 0], kp, col)
                put(to_t(m.actuator_biasprm)[:, :, 1], -kp, col)
            if "kd_scale" in values:
                put(to_t(m.actuator_biasprm)[:, :, 2], -nom["kd"] * p["kd_scale"], col)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._wp_device.is_cuda:
            self._wp.synchronize_device(self._wp_device)
        self._step_graph = self._reset_graph = self._forward_graph = None
        # Free the device arrays the state tensors do not view (those live as long as the tensors).
        self._d = self._m = None

    def __enter__(self) -> MjwarpBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------ introspection

    def diagnostics(self) -> dict[str, Any]:
        """Graph counters and overflow flags (reading the flags synchronises with the device)."""
        import numpy as np

        self._check_open()

        with self._on_stream():  # copy on this backend's stream, after its pending work
            overflow = self._overflow_seen.cpu().numpy()
        flags = int(np.bitwise_or.reduce(overflow)) if overflow.size else 0
        names = [
            f.name for f in self._mjw.OverflowType if f.value and not (f.value & (f.value - 1)) and flags & f.value
        ]
        return {
            "backend": "mjwarp",
            "device": str(self._wp_device),
            "graph_requested": self._graph_requested,
            "graph_enabled": self._graph_enabled,
            "graph_disable_reason": self._graph_disable_reason,
            "graph_replays": self._graph_replays,
            "overflow_worlds": int((overflow != 0).sum()),
            "overflow_kinds": names,
            "njmax": self.njmax,
            "nconmax": self.nconmax,
        }


def build(
    model_xml: str,
    num_envs: int,
    decimation: int,
    *,
    device: str,
    physics_graph: bool,
    world_params: bool,
    njmax: int | None,
    nconmax: int | None,
    acc_sensors: bool,
    **_cpu_options: Any,  # cpu_ids, workers: one process steps every world (make_backend checked workers)
) -> MjwarpBackend:
    """The backend `unilab.sim.backends.MJWARP` names (unilab.sim.factory.make_backend)."""
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
