"""`unilab export RUN_DIR`: the deterministic actor with the observation normalizer folded in, for
deployment, as ONNX (`--format onnx`, the default) or TorchScript (`--format torchscript`, the
`policy.pt` Isaac Lab's play script writes, which libtorch and `torch.jit.load` run). Input `obs`
[batch, obs_dim] raw observations as the task produces them; output `action` [batch, act_dim] in
[-1, 1]: SAC and FlashSAC give tanh of the Gaussian mean, TD3 its deterministic actor; PPO gives
rsl-rl's Gaussian mean clipped to [-1, 1], as the runtime clipped its actions (unilab.run.vecenv).
Both carry the same deployment metadata: ONNX as model properties, TorchScript as the extra file
`unilab_metadata.json` (a JSON object of the same keys and string values)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import torch

from unilab.atomic import check_out_path, write_atomic
from unilab.errors import RobotModelError, UnilabError
from unilab.plan.inputs import applied_from, resolve_input_path
from unilab.plan.models import Plan
from unilab.records.policy import policy_from_state
from unilab.records.run_dir import RunDir
from unilab.robot import g1
from unilab.robot.inspect import mjcf_matches
from unilab.run_layout import CHECKPOINTS
from unilab.tasks.base import joint_action_scale
from unilab.tasks.registry import robot_spec, task_def


def observation_metadata(state: dict[str, Any], obs_dim: int, privileged: tuple[str, ...] = ()) -> dict[str, str]:
    """The observation layout the run's collector reported (term name -> [first, end) columns,
    in order), as ONNX metadata: the actor's terms alone, without the `privileged` ones only its
    critic saw. Checkpoints written before the layout was recorded lack it."""
    import json

    terms = [(n, d) for n, d in state.get("obs_terms") or [] if str(n) not in privileged]
    layout: dict[str, list[int]] = {}
    start = 0
    for name, dim in terms:
        layout[str(name)] = [start, start + int(dim)]
        start += int(dim)
    if not terms or start != obs_dim:
        return {"unilab.observation_layout": "not recorded: the checkpoint predates observation layouts"}
    return {"unilab.observation_layout": json.dumps(layout)}


# Each format: the default file name in RUN_DIR, and the extension a previous export of it has.
FORMATS = {"onnx": "policy.onnx", "torchscript": "policy.pt"}
TORCHSCRIPT_METADATA = "unilab_metadata.json"


def check_export_out(run_dir: Path, out: Path, fmt: str = "onnx") -> None:
    """Refuse an --out that cannot be written or would destroy something: a directory, a missing
    parent, or an existing file of the run directory other than a previous export (*.onnx, *.pt)."""
    default = FORMATS[fmt]
    check_out_path(out, default)
    previous_export = (
        out.suffix.lower() in {Path(f).suffix for f in FORMATS.values()} and out.parent.name != CHECKPOINTS
    )
    if out.exists() and not previous_export:
        try:
            inside = out.resolve().is_relative_to(run_dir.resolve())
        except OSError:
            inside = True
        if inside:
            raise UnilabError(
                f"--out {out} is a file of the run directory {run_dir}: exporting there would overwrite it",
                fix=f"choose a new file name ending in {Path(default).suffix} (default: RUN_DIR/{default})",
            )


def deployment_metadata(plan: Plan, applied_from: Path | None = None) -> dict[str, str]:
    """What a deployment needs beside the network, as the ONNX file's metadata (strings; lists as
    JSON): the plan, the control period, and for the G1 the joints in action order with the
    standing pose and action scale, so that joint targets = default_joint_pos + action_scale * action
    on the joints `unilab.action_joints` names (in the action's order), the default pose elsewhere."""
    import json

    task = plan.task
    meta = {"unilab.plan_id": plan.plan_id, "unilab.task": task.name, "unilab.control_dt": repr(task.control_dt)}
    robot = robot_spec(task)
    if robot is None:  # a task with its own model: no robot joints to describe
        return meta
    ref = task.reference_motion
    if ref is not None:  # the policy tracks this clip: a deployment must play the same one
        meta["unilab.reference_motion"] = json.dumps(
            {"source": ref.source, "sha256": ref.sha256, "num_frames": ref.num_frames, "fps": ref.fps}
        )
    from unilab.robot.model import RobotLayout, build_model_xml, model_from_xml

    mjcf = None
    if task.robot.source != "builtin":
        # The plan's path is relative to where the run was applied (the manifest records it), or to
        # here; the files may have changed since.
        for base in dict.fromkeys(b for b in (Path.cwd(), applied_from) if b is not None):
            candidate = resolve_input_path(task.robot.source, base)
            try:
                if task.robot.sha256 is not None and mjcf_matches(candidate, task.robot.sha256):
                    mjcf = candidate
                    break
            except (OSError, RobotModelError):
                continue
        if mjcf is None:
            meta["unilab.joints"] = f"not embedded: the run's robot MJCF {task.robot.source} is not here as it ran"
            return meta
    xml = build_model_xml(mjcf, plan.sim.timestep)  # composed once: compiled here, embedded for sim2sim
    model = model_from_xml(xml, mjcf)
    layout = RobotLayout.from_model(model, robot.default_pose)
    meta |= _physics_metadata(plan, xml, layout)
    # The joints' passive dynamics the policy was trained with (a deployment on another model
    # compares its own: sim2sim prints what differs).
    dofs = layout.qvel_adr
    meta["unilab.joint_armature"] = _json_list(model.dof_armature[dofs])
    meta["unilab.joint_damping"] = _json_list(model.dof_damping[dofs])
    meta["unilab.joint_frictionloss"] = _json_list(model.dof_frictionloss[dofs])
    meta["unilab.joint_names"] = json.dumps(list(layout.joint_names))
    meta["unilab.default_joint_pos"] = json.dumps([round(float(v), 6) for v in layout.default_joint_pos])
    scale = joint_action_scale(layout, robot.action_scale)
    meta["unilab.action_scale"] = json.dumps([round(float(v), 6) for v in scale])
    # The joints the action's entries drive, in order; a joint not named holds its default position
    # (g1_walk's `task.actions = "legs"`). Every joint where the policy drives all 29.
    joints = task_def(task).action_joints(task)
    meta["unilab.action_joints"] = json.dumps(list(joints if joints is not None else layout.joint_names))
    # The joint PD loop the policy was trained with, and the limits the simulator applied to it
    # (MuJoCo clamps each target to its actuator's control range, each torque to its force
    # range); JSON null where the model leaves a limit open.
    meta["unilab.joint_kp"] = _json_list(layout.kp)
    meta["unilab.joint_kd"] = _json_list(layout.kd)
    meta["unilab.effort_limit"] = _json_list(layout.effort_limit)
    meta["unilab.target_range"] = json.dumps([json.loads(_json_list(r)) for r in layout.ctrl_range])
    return meta


def _physics_metadata(plan: Plan, xml: str, layout: Any) -> dict[str, str]:
    """What a runner outside unilab needs to play the policy as training did: the model as the
    run composed it (MJCF text: unilab's G1 has no mesh files), the physics step, the base's
    standing height, and what the task adds (`TaskDef.deployment`: for a velocity policy how its
    episodes were drawn and ended; docs/deploy.md names every key)."""
    import json

    meta = {
        "unilab.mjcf": xml,
        "unilab.physics": json.dumps(
            {
                "timestep": plan.sim.timestep,
                "decimation": plan.sim.decimation,
                "base_body": g1.BASE_BODY,
                "standing_base_height": round(float(layout.default_qpos[layout.base_qpos_adr + 2]), 6),
            }
        ),
    }
    meta |= task_def(plan.task).deployment_metadata(plan.task)
    return meta


def _json_list(values: Any) -> str:
    import json
    import math

    return json.dumps([round(float(v), 6) if math.isfinite(float(v)) else None for v in values])


def _finish_model(model_bytes: bytes, obs_dim: int, act_dim: int, metadata: dict[str, str]) -> bytes:
    """The tracer leaves the action's feature dimension symbolic after a tanh; a deployment reads
    the shapes from the file, so both are stated: obs [batch, obs_dim], action [batch, act_dim].
    The deployment constants go in as metadata."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    for value, size in ((model.graph.input[0], obs_dim), (model.graph.output[0], act_dim)):
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_param = "batch"
        dims[1].dim_value = size  # replaces a symbolic name (a oneof in the proto)
    onnx.helper.set_model_props(model, metadata)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def export_policy(run_dir: Path, out: Path | None, checkpoint: Path | None = None, fmt: str = "onnx") -> Path:
    """The policy of the run's newest checkpoint (or ``checkpoint``: a file name in
    RUN_DIR/checkpoints or a path to one), with its observation normalizer, as ``fmt`` (FORMATS)."""
    if fmt not in FORMATS:
        raise UnilabError(f"export format {fmt!r} is not one of {', '.join(FORMATS)}", fix="use --format onnx")
    run = RunDir(run_dir)
    plan = run.read_plan()  # a missing or unreadable run directory is named first
    out = out or run_dir / FORMATS[fmt]
    try:
        check_export_out(run_dir, out, fmt)  # before building the model: refuse early
    except OSError as exc:
        raise UnilabError(
            f"cannot use --out {exc.filename or out}: {exc.strerror or exc}", fix="check the path and its permissions"
        ) from None
    state = run.verified_checkpoint(plan, run.find_checkpoint(checkpoint, "export"))[0]["state"]
    policy, obs_dim = policy_from_state(plan, state)
    example = torch.zeros(1, obs_dim)
    with torch.no_grad():
        act_dim = int(policy(example).shape[-1])

    privileged = tuple(getattr(plan.task, "privileged_observations", None) or ())
    meta = deployment_metadata(plan, applied_from(run_dir)) | observation_metadata(state, obs_dim, privileged)
    data = (_onnx_bytes if fmt == "onnx" else _torchscript_bytes)(policy, example, act_dim, meta)
    write_atomic(
        out,
        lambda f: f.write(data),
        "ONNX model" if fmt == "onnx" else "TorchScript module",
        fix=f"check that {out.parent} is writable and has free space, or choose another --out",
    )
    if "unilab.joints" in meta:
        print(
            f"warning: {out} lacks the joint names, standing pose and action scale: {meta['unilab.joints']} "
            "(export from the directory the run was applied in, with its robot files as they were)",
            file=sys.stderr,
        )
    return out


def _onnx_bytes(policy: torch.nn.Module, example: torch.Tensor, act_dim: int, meta: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    try:
        torch.onnx.export(
            policy,
            (example,),
            buf,
            input_names=["obs"],
            output_names=["action"],
            dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}},
            dynamo=False,
        )
    except Exception as exc:
        raise UnilabError(
            f"ONNX export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
            fix="report this with the run's plan.toml",
        ) from None
    return _finish_model(buf.getvalue(), int(example.shape[-1]), act_dim, meta)


def _torchscript_bytes(policy: torch.nn.Module, example: torch.Tensor, act_dim: int, meta: dict[str, str]) -> bytes:
    """The policy traced (its forward has no data-dependent branch) and frozen, the metadata as an
    extra file. torch 2.13 marks TorchScript deprecated in favour of torch.export; libtorch and
    `torch.jit.load` still run it, and deployments that expect `policy.pt` read this format."""
    import json
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            traced = torch.jit.trace(policy.eval(), example, check_trace=False)
            frozen = torch.jit.freeze(traced)
            torch.jit.save(frozen, buf, _extra_files={TORCHSCRIPT_METADATA: json.dumps(meta)})
        except Exception as exc:
            raise UnilabError(
                f"TorchScript export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                fix="export as ONNX (--format onnx), and report this with the run's plan.toml",
            ) from None
    return buf.getvalue()
