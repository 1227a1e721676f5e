"""The host facts a plan depends on, and the stale-plan comparison `unilab apply` uses."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from unilab.host.facts import HostFacts
from unilab.plan.context import Context


def _v(x: Any) -> Any:
    return "absent" if x is None else x


def fingerprint_facts(ctx: Context, mps_services: list[str]) -> dict[str, Any]:
    """Key path -> value for every fact the plan's decisions were derived from. A change in any
    of them makes a saved plan stale."""
    f = ctx.facts
    out: dict[str, Any] = {
        "os.system": f.os.system,
        "cpu.affinity": list(f.cpu.affinity),
        "packages.unilab": _v(f.packages.unilab),
        "packages.torch": _v(f.packages.torch),
        "packages.warp_lang": _v(f.packages.warp_lang),
        "packages.mujoco": _v(f.packages.mujoco),
        "packages.mujoco_warp": _v(f.packages.mujoco_warp),
    }
    if not ctx.on_cuda:
        # A CPU learner's precision and thread budget are read from these (unilab.plan.rules.learner).
        out["cpu.features"] = _v(f.cpu.features)
        out["cpu.cores"] = _v(f.cpu.cores)
    if ctx.on_cuda:
        out["nvidia.driver_version"] = _v(f.nvidia.driver_version)
        out["nvidia.cuda_driver_version"] = _v(f.nvidia.cuda_driver_version)
        out["cuda_visible_devices.uuids"] = list(f.cuda_visible_devices.uuids)
        for d in ctx.devices or ():
            if d.gpu is not None:
                g = d.gpu
                out[f"gpu[{g.uuid}].name"] = g.name
                out[f"gpu[{g.uuid}].compute_mode"] = g.compute_mode
                out[f"gpu[{g.uuid}].mig_mode"] = g.mig_mode
        for s in f.mps.services:
            if s.name in mps_services:
                out[f"mps[{s.name}].gpu_uuid"] = s.gpu_uuid
                out[f"mps[{s.name}].pipe_directory"] = s.pipe_directory
                out[f"mps[{s.name}].control_socket_exists"] = s.control_socket_exists
                out[f"mps[{s.name}].daemon_pid"] = _v(s.daemon_pid)
        for k, v in f.nccl_env.items():
            out[f"nccl_env.{k}"] = v
    return out


def digest(facts: dict[str, Any]) -> str:
    body = json.dumps(facts, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class FactChange:
    key: str
    planned: Any
    current: Any

    def render(self) -> str:
        return f"{self.key}: planned {self.planned!r}, now {self.current!r}"


def current_values(planned: dict[str, Any], facts: HostFacts) -> dict[str, Any]:
    """Read the same key paths from freshly probed facts."""
    out: dict[str, Any] = {}
    gpus = {g.uuid: g for g in facts.nvidia.gpus}
    services = {s.name: s for s in facts.mps.services}
    for key in planned:
        if key.startswith("gpu["):
            uuid, attr = key[4:].split("].", 1)
            g = gpus.get(uuid)
            out[key] = getattr(g, attr) if g else "absent"
        elif key.startswith("mps["):
            name, attr = key[4:].split("].", 1)
            s = services.get(name)
            out[key] = _v(getattr(s, attr)) if s else "absent"
        elif key.startswith("nccl_env."):
            out[key] = facts.nccl_env.get(key.split(".", 1)[1], "absent")
        else:
            node: Any = facts
            for part in key.split("."):
                node = getattr(node, part)
            out[key] = _v(list(node) if isinstance(node, list) else node)
    return out


def compare_fingerprint(planned: dict[str, Any], facts: HostFacts) -> list[FactChange]:
    """Every planned fact that differs now, in the plan's key order (the first is the one to name).
    New NCCL variables in the environment also count: the ranks would inherit them."""
    now = current_values(planned, facts)
    changes = [FactChange(k, v, now[k]) for k, v in planned.items() if now[k] != v]
    if any(k.startswith("nvidia.") for k in planned):
        for k, v in facts.nccl_env.items():
            if f"nccl_env.{k}" not in planned:
                changes.append(FactChange(f"nccl_env.{k}", "absent", v))
    return changes
