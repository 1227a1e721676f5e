"""Every plan rule, with a failing and a passing case, against recorded host facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT, host, spec_data
from unilab.errors import PlanRefused
from unilab.host.facts import HostFacts
from unilab.plan.compile import compile_plan
from unilab.plan.context import build_context
from unilab.plan.rules import RULES
from unilab.spec.load import validate_spec_data

MJWARP_GPU = {"sim__backend": "mjwarp", "training__devices": [0], "algo": {"name": "flashsac"}}
# g1_walk with one command per episode (its default draws a new one every 10 s, inside the update body).
ONE_COMMAND = {"task__commands__resample_s": 0.0}
MPS_NODE = {**MJWARP_GPU, "training__devices": [0, 1], "training__cuda_process_sharing": "mps"}


def _facts_with(name: str, **update: Any) -> HostFacts:
    """A recorded host with some facts replaced (nested updates as dicts)."""
    data = host(name).model_dump()
    for key, value in update.items():
        node = data
        parts = key.split("__")
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[parts[-1]] = value
    return HostFacts.model_validate(data)


@dataclass
class Case:
    rule: str
    host: str | HostFacts
    spec: dict[str, Any]
    violated: bool
    says: str = ""  # substring of the condition (violations) or the fix
    fix: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def facts(self) -> HostFacts:
        return host(self.host) if isinstance(self.host, str) else self.host

    def __str__(self) -> str:
        return f"{self.rule}-{'fail' if self.violated else 'pass'}-{self.says[:24]}"


CASES = [
    Case("devices.exist", "cpu_laptop", {"training__devices": [0]}, True, "has no NVIDIA driver"),
    Case("devices.exist", "one_h200", {"training__devices": [1]}, True, "not among the visible GPUs"),
    Case("devices.exist", "one_h200", {"training__devices": ["GPU-deadbeef"]}, True, "not among the visible GPUs"),
    Case(
        "devices.exist",
        _facts_with(
            "one_h200",
            cuda_visible_devices__error="entry '7' matches no GPU",
            cuda_visible_devices__raw="7",
            cuda_visible_devices__uuids=[],
        ),
        {"training__devices": [0]},
        True,
        "CUDA_VISIBLE_DEVICES='7' cannot be mapped",
    ),
    Case(
        "devices.exist",
        _facts_with("one_h200", cuda_visible_devices={"raw": "GPU-zzzz", "uuids": ["GPU-zzzz"]}),
        {"training__devices": [0]},
        True,
        "visible GPU 0 is GPU-zzzz (CUDA_VISIBLE_DEVICES), which is not a GPU of the host",
    ),
    Case("devices.exist", "one_h200", {"training__devices": [0]}, False),
    Case("devices.unique", "node_8gpu_mps", {"training__devices": [0, 0]}, True, "are the same GPU"),
    Case(
        "devices.unique",
        "node_8gpu_mps",
        {"training__devices": [1, host("node_8gpu_mps").nvidia.gpus[1].uuid]},
        True,
        "are the same GPU",
    ),
    Case("devices.unique", "node_8gpu_mps", {"training__devices": [0, 1]}, False),
    Case("devices.no-mixing", "one_h200", {"training__devices": ["cpu", 0]}, True, "mix CPU and GPU"),
    Case("devices.no-mixing", "cpu_laptop", {"training__devices": ["cpu", "cpu"]}, False),
    Case("devices.mig", "mig_gpu", {"training__devices": [0]}, True, "has MIG enabled", fix="-mig 0"),
    Case("devices.mig", "mig_gpu", {"training__devices": [1]}, False),
    Case(
        "devices.compute-mode",
        _facts_with("one_h200", nvidia__gpus__0__compute_mode="prohibited"),
        {"training__devices": [0]},
        True,
        "compute mode prohibited",
        fix="nvidia-smi -i 0 -c DEFAULT",
    ),
    Case(
        "devices.compute-mode",
        _facts_with("one_h200", nvidia__gpus__0__compute_mode="exclusive_process"),
        MJWARP_GPU,
        True,
        "admits one CUDA process",
        fix="unilab mps start --gpus 0",
    ),
    Case(  # PPO cannot share through MPS (rule mps.algo): the fix does not offer it
        "devices.compute-mode",
        _facts_with("one_h200", nvidia__gpus__0__compute_mode="exclusive_process"),
        {**MJWARP_GPU, "algo": {"name": "ppo"}},
        True,
        "admits one CUDA process",
        fix='-c DEFAULT, or use sim.backend = "mujoco"',
    ),
    Case(  # one GPU unreadable: an index could name another GPU, a UUID cannot
        "devices.exist",
        _facts_with("node_8gpu_mps", nvidia__nvml_error="GPU 1 could not be read: GPU is lost"),
        {"training__devices": [2]},
        True,
        "GPU index 2 cannot be trusted",
        fix="by its UUID",
    ),
    # One CUDA process per rank (the collector steps CPU MuJoCo): an exclusive GPU is fine.
    Case(
        "devices.compute-mode",
        _facts_with("one_h200", nvidia__gpus__0__compute_mode="exclusive_process"),
        {"training__devices": [0]},
        False,
    ),
    Case(
        "devices.compute-mode",
        _facts_with("node_8gpu_mps", nvidia__gpus__0__compute_mode="exclusive_process"),
        MPS_NODE,
        False,
    ),
    Case(
        "devices.torch-cuda",
        _facts_with("one_h200", packages__torch="2.13.0+cpu"),
        {"training__devices": [0]},
        True,
        "CPU-only build",
    ),
    Case("devices.torch-cuda", "one_h200", {"training__devices": [0]}, False),
    Case(
        "sim.packages",
        _facts_with("cpu_laptop", packages__warp_lang=None, packages__mujoco_warp=None),
        {"sim__backend": "mjwarp"},
        True,
        "warp-lang and mujoco-warp are not installed",
        "bash tools/setup.sh gpu in the unilab checkout",
    ),
    Case("sim.packages", _facts_with("cpu_laptop", packages__torch=None), {}, True, "torch is not installed"),
    Case("sim.packages", _facts_with("cpu_laptop", packages__warp_lang=None, packages__mujoco_warp=None), {}, False),
    Case(
        "sim.tested-versions",
        _facts_with("cpu_laptop", packages__mujoco="4.1.0"),
        {},
        True,
        "mujoco 4.1.0 is installed on the host; this unilab is tested with mujoco 4.0.x",
        "pip install 'mujoco>=4.0,<4.1'",
    ),
    Case("sim.tested-versions", _facts_with("cpu_laptop", packages__mujoco="4.0.7"), {}, False),
    Case(
        "sim.tested-versions",
        _facts_with("one_h200", packages__mujoco_warp="3.3.2"),
        {"sim__backend": "mjwarp", "training__devices": [0]},
        True,
        "mujoco-warp 3.3.2 is installed on the host",
        "pip install 'mujoco-warp>=4.0,<4.1'",
    ),
    Case("sim.tested-versions", _facts_with("cpu_laptop", packages__mujoco_warp="3.3.2"), {}, False),
    Case("devices.cpu-blocks", "cpu_laptop", {"training__devices": ["cpu"] * 3}, True, "need at least 3 CPUs"),
    Case(
        "devices.cpu-blocks",
        "cpu_laptop",
        {"training__devices": ["cpu", "cpu"], "training__collector_cpu_ids": [[0, 1], [1]]},
        True,
        "CPU 1 is in",
    ),
    Case("devices.cpu-blocks", "cpu_laptop", {"training__collector_cpu_ids": [[5]]}, True, "outside the affinity"),
    Case(
        "devices.cpu-blocks",
        "cpu_laptop",
        {"training__collector_cpu_ids": [[0], [1]]},
        True,
        "2 CPU blocks given for 1",
    ),
    Case("devices.cpu-blocks", "cpu_laptop", {"training__collector_cpu_ids": [[]]}, True, "is empty"),
    Case(
        "devices.cpu-blocks",
        "cpu_laptop",
        {"training__collector_cpu_ids": [[1, 0, 1]]},
        True,
        "CPUs [1] appear more than once in the block of rank 0",
        "training.collector_cpu_ids[0] = [0, 1]",
    ),
    Case(
        "devices.cpu-blocks",
        "cpu_laptop",
        {"training__devices": ["cpu", "cpu"], "training__collector_cpu_ids": [[1], [0]]},
        False,
    ),
    Case("sim.workers", "cpu_laptop", {"sim__workers": 4}, True, "exceed the 2 CPU(s)"),
    Case(
        "sim.workers",
        "cpu_laptop",
        {"sim__workers": 2, "task__num_envs": 1, "run__total_env_steps": 10},
        True,
        "leave workers idle",
    ),
    Case("sim.workers", "one_h200", {**MJWARP_GPU, "sim__workers": 2}, True, "has no effect"),
    Case("sim.workers", "cpu_laptop", {"sim__workers": 2}, False),
    Case(
        "task.episode-steps",
        "cpu_laptop",
        {"sim__timestep": 1e-6, "sim__decimation": 1, "task__episode_length_s": 3600.0},
        True,
        "is 3.6e+09 control steps",
    ),
    Case(
        "task.episode-steps",
        "cpu_laptop",
        {"task__episode_length_s": 0.001},
        True,
        "is shorter than one control step of 0.02 s",
        "set task.episode_length_s >= 0.02",
    ),
    Case("task.episode-steps", "cpu_laptop", {"task__episode_length_s": 0.02}, False),
    Case("task.episode-steps", "cpu_laptop", {"task__episode_length_s": 3600.0}, False),
    Case("sim.buffers", "cpu_laptop", {"sim__njmax": 400}, True, "sim.njmax = 400 has no effect"),
    Case("sim.buffers", "cpu_laptop", {"sim__nconmax": 64}, True, "sim.nconmax = 64 has no effect"),
    Case("sim.buffers", "one_h200", {**MJWARP_GPU, "sim__njmax": 400, "sim__nconmax": 64}, False),
    Case(
        "wire.bf16-needs-dp",
        "cpu_laptop",
        {"training__dp_gradient_wire_dtype": "bfloat16"},
        True,
        "one rank has no gradient all-reduce",
    ),
    Case(
        "wire.bf16-needs-dp",
        "cpu_laptop",
        {"training__devices": ["cpu", "cpu"], "algo": {"name": "ppo"}, "training__dp_gradient_wire_dtype": "bfloat16"},
        True,
        "rsl-rl-lib",
    ),
    Case(
        "wire.bf16-needs-dp",
        "cpu_laptop",
        {"training__devices": ["cpu", "cpu"], "training__dp_gradient_wire_dtype": "bfloat16"},
        False,
    ),
    Case("nccl.transport", "cpu_laptop", {"training__nccl_transport": "loopback"}, True, "only used between"),
    Case(
        "nccl.transport", "node_8gpu_mps", {"training__devices": [0, 1], "training__nccl_transport": "loopback"}, False
    ),
    Case("graph.learner", "cpu_laptop", {"training__learner_graph": "on"}, True, "needs CUDA devices"),
    Case(
        "graph.learner",
        "one_h200",
        {"training__devices": [0], "training__learner_graph": "on", "algo": {"name": "ppo"}},
        True,
        "eager runner",
    ),
    Case("graph.learner", "one_h200", {"training__devices": [0], "training__learner_graph": "on"}, False),
    Case(
        "graph.learner",
        _facts_with("node_8gpu_mps", nccl_env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}),
        {"training__devices": [0, 1], "training__learner_graph": "on"},
        True,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=3",
        fix="unset TORCH_NCCL_ASYNC_ERROR_HANDLING",
    ),
    Case(
        "graph.learner",
        _facts_with("node_8gpu_mps", nccl_env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}),
        {"training__devices": [0, 1], "training__learner_graph": "on"},
        False,
    ),
    Case(
        "graph.physics",
        "one_h200",
        {"training__devices": [0], "training__physics_graph": "on"},
        True,
        "CPU MuJoCo backend has no graph",
    ),
    Case(
        "graph.physics",
        "cpu_laptop",
        {"sim__backend": "mjwarp", "training__physics_graph": "on"},
        True,
        "needs a CUDA device",
    ),
    Case("graph.physics", "one_h200", {**MJWARP_GPU, "training__physics_graph": "on"}, False),
    Case(
        "graph.collector",
        "one_h200",
        {"training__devices": [0], "training__collector_graph": "update_state"},
        True,
        "MuJoCo Warp collectors only",
    ),
    Case(
        "graph.collector",
        "cpu_laptop",
        {"sim__backend": "mjwarp", "training__collector_graph": "update_state"},
        True,
        "needs CUDA devices",
    ),
    Case(
        "graph.collector",
        "one_h200",
        {**MJWARP_GPU, **ONE_COMMAND, "training__collector_graph": "update_state", "task__observation_noise": True},
        True,
        "preflight: observation term",
    ),
    Case(
        "graph.collector",
        "one_h200",
        {**MJWARP_GPU, "training__collector_graph": "update_state"},  # commands drawn again every 10 s
        True,
        "is an interval event",
    ),
    Case(
        "graph.collector",
        "one_h200",
        {**MJWARP_GPU, "training__collector_graph": "update_state", "task__push_interval_s": 5.0},
        True,
        "is an interval event",
    ),
    Case(
        "graph.collector", "one_h200", {**MJWARP_GPU, **ONE_COMMAND, "training__collector_graph": "update_state"}, False
    ),
    Case(
        "mps.host",
        "cpu_laptop",
        {"training__cuda_process_sharing": "mps"},
        True,
        "no NVIDIA driver",
        fix='cuda_process_sharing = "none"',
    ),
    Case(
        "host.platform",
        _facts_with("cpu_laptop", os__system="Darwin"),
        {},
        True,
        "the host runs Darwin, and unilab's runtime needs Linux",
        fix="--host-facts node.json",
    ),
    Case("host.platform", _facts_with("one_h200", os__system="Windows"), MJWARP_GPU, True, "the host runs Windows"),
    Case("host.platform", "cpu_laptop", {}, False),
    Case(
        "run.wandb",
        "cpu_laptop",
        {"run__wandb": {"mode": "offline"}},
        True,
        "wandb is not installed on the host",
        fix="bash tools/setup.sh wandb in the unilab checkout",
    ),
    Case("run.wandb", _facts_with("cpu_laptop", packages__wandb="0.31.0"), {"run__wandb": {"mode": "offline"}}, False),
    Case("run.wandb", "cpu_laptop", {}, False),
    Case("mps.host", "one_h200", {"training__cuda_process_sharing": "mps"}, True, "rank 0 runs on the CPU"),
    Case("mps.host", "mig_gpu", {**MJWARP_GPU, "training__cuda_process_sharing": "mps"}, True, "has MIG enabled"),
    Case("mps.host", "node_8gpu_mps", MPS_NODE, False),
    Case("mps.backend", "node_8gpu_mps", {**MPS_NODE, "sim__backend": "mujoco"}, True, "steps physics on the CPU"),
    Case("mps.backend", "node_8gpu_mps", MPS_NODE, False),
    Case(
        "mps.service",
        _facts_with("node_8gpu_mps", mps__services=[], mps__registry_error="the MPS service registry X cannot be read"),
        MPS_NODE,
        True,
        "registry X cannot be read",
        fix="inspect or remove",
    ),
    Case("mps.algo", "node_8gpu_mps", {**MPS_NODE, "algo": {"name": "ppo"}}, True, "never overlaps the collector"),
    Case("mps.algo", "node_8gpu_mps", MPS_NODE, False),
    Case(
        "mps.service",
        "one_h200",
        {**MJWARP_GPU, "training__cuda_process_sharing": "mps"},
        True,
        "no MPS service is registered",
        fix="unilab mps start --gpus 0 --name train-gpu0 --daemon",
    ),
    Case(
        "mps.service",
        _facts_with("node_8gpu_mps", mps__services__1__control_socket_exists=False),
        MPS_NODE,
        True,
        "control socket",
        fix="unilab mps start --gpus 1 --name train-gpu1 --daemon",
    ),
    Case(
        "mps.service",
        _facts_with("node_8gpu_mps", mps__services__0__daemon_alive=False),
        MPS_NODE,
        True,
        "is not running",
    ),
    Case(
        "mps.service",
        "node_8gpu_mps",
        {**MPS_NODE, "training__mps_service": "train-gpu5"},
        True,
        "is not registered for rank 0",
    ),
    Case("mps.service", "node_8gpu_mps", MPS_NODE, False),
    Case("mps.service-unused", "cpu_laptop", {"training__mps_service": "train-gpu0"}, True, "has no effect"),
    Case(
        "mps.service-unused",
        "node_8gpu_mps",
        {**MPS_NODE, "training__devices": [0], "training__mps_service": "train-gpu0"},
        False,
    ),
    Case("sync.action-dependency", "cpu_laptop", {"training__env_steps_per_sync": 4}, True, "needs an explicit"),
    Case(
        "sync.action-dependency",
        "cpu_laptop",
        {"training__env_steps_per_sync": 4, "training__action_dependency": "precommitted_sequence"},
        True,
        "not implemented",
    ),
    Case(
        "sync.action-dependency",
        "cpu_laptop",
        {"training__env_steps_per_sync": 4, "training__action_dependency": "synchronous"},
        True,
        "but K = 4",
    ),
    Case(
        "sync.action-dependency",
        "cpu_laptop",
        {"training__action_dependency": "precommitted_sequence"},
        True,
        "K = 1 is the synchronous contract",
    ),
    Case("sync.action-dependency", "cpu_laptop", {"training__action_dependency": "synchronous"}, False),
    Case("sync.slot-capacity", "cpu_laptop", {"training__inference_slot_capacity": 2}, True, "exactly one action"),
    Case(
        "sync.slot-capacity",
        "cpu_laptop",
        {
            "training__env_steps_per_sync": 2,
            "training__inference_slot_capacity": 3,
            "training__action_dependency": "precommitted_sequence",
        },
        True,
        "exceeds K = 2",
    ),
    Case("sync.slot-capacity", "cpu_laptop", {}, False),
    Case(
        "task.motion",
        "cpu_laptop",
        {"task__name": "g1_motion_tracking", "task__motion": "no/such/clip.npz"},
        True,
        "clip.npz",
    ),
    Case("task.motion", "cpu_laptop", {"task__name": "g1_motion_tracking", "task__motion": "builtin:g1_squat"}, False),
    Case("task.robot", "cpu_laptop", {"task__robot_mjcf": "no/such/g1.xml"}, True, "not found"),
    Case("task.robot", "cpu_laptop", {}, False),
    # A real checkpoint, fitting or not: tests/test_init_from.py (it needs a run directory).
    Case("run.init-from", "cpu_laptop", {"run__init_from": "no/such/run"}, True, "no/such/run does not exist"),
    Case("run.init-from", "cpu_laptop", {}, False),
    Case(
        "task.reward-weights",
        "cpu_laptop",
        {"task__reward_weights": {"alive": 1.0, "base_hieght": -20.0}},
        True,
        "g1_walk has no reward term 'base_hieght' (did you mean 'base_height'?)",
        "use one of its terms: track_lin_vel_xy_exp, track_ang_vel_z_exp, upright, base_height",
    ),
    Case(
        "task.reward-weights",
        "cpu_laptop",
        {"task__name": "cartpole", "task__reward_weights": {"alive": 1.0}},
        True,
        "cartpole has no reward term 'alive'",
    ),
    Case("task.reward-weights", "cpu_laptop", {"task__reward_weights": {"alive": 1.0, "base_height": 0.0}}, False),
    Case(
        "task.reward-curriculum",
        "cpu_laptop",
        {"task__reward_curriculum": {"track_yaw": {"weight": 3.0, "start_env_steps": 0}}},
        True,
        "g1_walk has no reward term 'track_yaw'",
        "use one of its terms: track_lin_vel_xy_exp, track_ang_vel_z_exp",
    ),
    Case(
        "task.reward-curriculum",
        "cpu_laptop",
        {
            "task__reward_curriculum": {
                "track_ang_vel_z_exp": {"weight": 3.0, "start_env_steps": 2_000, "end_env_steps": 1_000}
            }
        },
        True,
        "the change ends (1,000 env steps) before it starts (2,000)",
        "set its end_env_steps to 2_000 or later (or leave it out: a step)",
    ),
    Case(
        "task.reward-curriculum",
        "cpu_laptop",
        {
            "run__total_env_steps": 1_000_000,
            "task__reward_curriculum": {"track_ang_vel_z_exp": {"weight": 3.0, "start_env_steps": 500_000}},
        },
        False,
    ),
    Case(
        "task.privileged-observations",
        "cpu_laptop",
        {"task__privileged_observations": ["base_lin_vel"], "algo": {"name": "td3"}},
        False,
    ),
    Case(
        "task.privileged-observations",
        "cpu_laptop",
        {"task__privileged_observations": ["projected_gravity"], "algo": {"name": "ppo"}},
        False,
    ),
    Case(
        "task.privileged-observations",
        "cpu_laptop",
        {"task__privileged_observations": ["base_lin_vl"], "algo": {"name": "ppo"}},
        True,
        "g1_walk has no observation term 'base_lin_vl'",
        fix="use its terms: base_lin_vel",
    ),
    Case("task.mirror-augmentation", "cpu_laptop", {"algo__mirror_augmentation": True}, False),
    Case(
        "task.mirror-augmentation",
        "cpu_laptop",
        {"task__name": "g1_motion_tracking", "task__motion": "builtin:g1_squat", "algo__mirror_augmentation": True},
        True,
        "G1 motion tracking declares no left-right mirror",
        "set algo.mirror_augmentation = false, or train a task that has one (g1_walk)",
    ),
    Case(
        "task.push-interval",
        "cpu_laptop",
        {"task__name": "g1_motion_tracking", "task__motion": "builtin:g1_squat", "task__push_interval_s": 3.0},
        False,
    ),
    Case(
        "task.push-interval",
        "cpu_laptop",
        {"task__push_interval_s": 0.03},  # 1.5 steps of 0.005 s x 4: used to become 0.04 s silently
        True,
        "push_interval_s = 0.03 is 1.5 control steps of 0.02 s",
        "set task.push_interval_s = 0.02 or 0.04",
    ),
    Case(
        "task.push-interval",
        "cpu_laptop",
        {"task__push_interval_s": 0.01},  # shorter than one step: the only valid neighbour is one step
        True,
        "is 0.5 control steps",
        "set task.push_interval_s = 0.02 (a whole",
    ),
    Case(
        "task.push-interval",
        "cpu_laptop",
        {"task__push_interval_s": 0.09, "sim__timestep": 0.003, "sim__decimation": 10},
        False,
    ),
    # Float noise: 0.018 / (0.003 x 3) is 1.9999999999999996, still two whole steps.
    Case(
        "task.push-interval",
        "cpu_laptop",
        {"task__push_interval_s": 0.018, "sim__timestep": 0.003, "sim__decimation": 3},
        False,
    ),
    Case("task.push-interval", "cpu_laptop", {"task__push_interval_s": 3.0}, False),
    Case("run.budget", "cpu_laptop", {"run__total_env_steps": 10}, True, "less than one step"),
    Case("run.budget", "cpu_laptop", {}, False),
    Case(
        "algo.buffer-size",
        "cpu_laptop",
        {"algo": {"name": "sac", "buffer_size": 15}},
        True,
        "replay capacity 15 is smaller than one env step of 16 envs",
        "--set algo.buffer_size=256",
    ),
    Case("algo.buffer-size", "cpu_laptop", {"algo": {"name": "flashsac", "buffer_size": 16, "batch_size": 16}}, False),
    Case(
        "algo.warmup",
        "cpu_laptop",
        {"algo": {"name": "sac", "warmup_env_steps": 100_000}},
        True,
        "the learner would never update",
        "--set algo.warmup_env_steps=10000",
    ),
    Case("algo.warmup", "cpu_laptop", {"algo": {"name": "flashsac", "warmup_env_steps": 99_000}}, False),
    # A run too short to fill one batch: a shorter warm-up alone would meet the check below, so the fix
    # raises the budget (the warm-up's 313 syncs of 16 envs, then one update at sync 314: 5,009 env steps) ...
    Case(
        "algo.warmup",
        "cpu_laptop",
        {"task__num_envs": 16, "run__total_env_steps": 100, "algo": {"name": "sac", "batch_size": 256}},
        True,
        "the learner would never update",
        "raise run.total_env_steps to at least 5009 (a shorter warm-up alone is not enough",
    ),
    # ... and following it plans.
    Case(
        "algo.warmup",
        "cpu_laptop",
        {"task__num_envs": 16, "run__total_env_steps": 5009, "algo": {"name": "sac", "batch_size": 256}},
        False,
    ),
    Case(
        "algo.ppo-minibatches",
        "cpu_laptop",
        {"task__num_envs": 16, "algo": {"name": "ppo", "num_steps_per_env": 24, "num_mini_batches": 1000}},
        True,
        "rollout of 384 samples",
        fix="algo.num_mini_batches <= 384",
    ),
    Case(
        "algo.ppo-minibatches",
        "cpu_laptop",
        {"task__num_envs": 16, "algo": {"name": "ppo", "num_steps_per_env": 24, "num_mini_batches": 384}},
        False,
    ),
    # 99,999 of 100,000 is shorter, but leaves no sync for FlashSAC's first update (0.5 per step).
    Case(
        "algo.warmup",
        "cpu_laptop",
        {"algo": {"name": "flashsac", "warmup_env_steps": 99_999}},
        True,
        "before the first gradient update",
    ),
    # The replay must hold one batch before the last sync: 4 syncs of 16 envs store 48 transitions.
    Case(
        "algo.warmup",
        "cpu_laptop",
        {
            "task__num_envs": 16,
            "run__total_env_steps": 64,
            "algo": {"name": "sac", "batch_size": 64, "warmup_env_steps": 0},
        },
        True,
        "the run ends after 4 env steps of its 16 envs per rank, before the first gradient update (after 5",
        "raise run.total_env_steps to at least 65, or lower algo.batch_size",
    ),
    Case(
        "algo.warmup",
        "cpu_laptop",
        {
            "task__num_envs": 16,
            "run__total_env_steps": 65,  # the fewest: its 5th sync is a partial one
            "algo": {"name": "sac", "batch_size": 64, "warmup_env_steps": 0},
        },
        False,
    ),
    # FlashSAC's 3-step returns hold 2 syncs back and its 0.5 updates per step need 2 ready syncs:
    # the first update comes at the 8th sync (128 env steps of 16 envs); 112 is one short.
    Case(
        "algo.warmup",
        "cpu_laptop",
        {
            "task__num_envs": 16,
            "run__total_env_steps": 112,
            "algo": {"name": "flashsac", "batch_size": 64, "warmup_env_steps": 0},
        },
        True,
        "(after 8:",
        "at least 113",
    ),
    Case("algo.warmup", "cpu_laptop", {"algo": {"name": "ppo"}, "run__total_env_steps": 100}, False),
    # Ten additions of 0.1 make 0.9999999999999999: the first update comes at the 11th ready sync.
    Case(
        "algo.warmup",
        "cpu_laptop",
        {
            "task__num_envs": 16,
            "run__total_env_steps": 224,
            "algo": {"name": "sac", "batch_size": 64, "warmup_env_steps": 0, "updates_per_step": 0.1},
        },
        True,
        "(after 15:",
    ),
    Case(
        "algo.buffer-size",
        "cpu_laptop",
        {"task__num_envs": 16, "algo": {"name": "sac", "batch_size": 256, "buffer_size": 128}},
        True,
        "smaller than one batch",
    ),
    Case("algo.buffer-size", "cpu_laptop", {"algo": {"name": "ppo"}, "task__num_envs": 4096}, False),
    Case(
        "algo.critic-support",
        "cpu_laptop",
        {"algo": {"name": "sac", "critic": "c51", "v_min": 5.0, "v_max": 5}},
        True,
        "C51 critic support is empty: v_min 5.0 >= v_max 5.0",
        "set algo.v_min below algo.v_max",
    ),
    # The scalar critic has no support, so its v_min/v_max are not checked.
    Case("algo.critic-support", "cpu_laptop", {"algo": {"name": "sac", "v_min": 5.0, "v_max": -5.0}}, False),
    Case(
        "algo.critic-support",
        "cpu_laptop",
        {"algo": {"name": "flashsac", "v_min": 1.0}},
        True,
        "FlashSAC's critic support [1.0, 5.0] must contain 0",
        "algo.v_min = -5.0 and algo.v_max = 5.0",
    ),
    Case("algo.critic-support", "cpu_laptop", {"algo": {"name": "flashsac", "v_min": -1, "v_max": 1}}, False),
    Case(
        "algo.options",
        "cpu_laptop",
        {"algo": {"name": "sac", "v_min": -10.0, "v_max": 10.0}},
        True,
        'algo.v_min has no effect: the scalar critic (algo.critic = "mse")',
        'remove algo.v_min, or set algo.critic = "c51"',
    ),
    Case(
        "algo.options",
        "cpu_laptop",
        {"algo": {"name": "sac", "critic": "mse", "num_atoms": 51}},
        True,
        "algo.num_atoms has no effect",
        'remove algo.num_atoms, or set algo.critic = "c51"',
    ),
    Case(
        "algo.options",
        "cpu_laptop",
        {"algo": {"name": "ppo", "schedule": "fixed", "desired_kl": 0.02}},
        True,
        'algo.desired_kl has no effect: algo.schedule = "fixed"',
        'remove algo.desired_kl, or set algo.schedule = "adaptive"',
    ),
    Case(
        "algo.options",
        "cpu_laptop",
        {"algo": {"name": "sac", "critic": "c51", "num_atoms": 51, "v_min": -10.0, "v_max": 10.0}},
        False,
    ),
    Case("algo.options", "cpu_laptop", {"algo": {"name": "sac"}}, False),  # unused defaults are not requests
    Case("algo.options", "cpu_laptop", {"algo": {"name": "ppo", "schedule": "fixed"}}, False),
    Case("algo.options", "cpu_laptop", {"algo": {"name": "ppo", "desired_kl": 0.02}}, False),
    Case(
        "algo.options",
        "cpu_laptop",
        {"algo": {"name": "flashsac", "num_atoms": 51, "v_min": -2.0, "v_max": 2.0, "n_step": 1}},
        False,
    ),
    # A bfloat16 learner needs bf16 matrix units (and an off-policy learner).
    Case("learner.precision", "cpu_laptop", {"algo": {"name": "sac", "precision": "bfloat16"}}, True, "avx512_bf16"),
    Case(
        "learner.precision",
        _facts_with("cpu_amx", cpu__features=None),
        {"algo": {"name": "sac", "precision": "bfloat16"}},
        True,
        "do not record the CPU's features",
        fix="unilab host --json > node.json",
    ),
    Case("learner.precision", "cpu_amx", {"algo": {"name": "ppo", "precision": "bfloat16"}}, True, "rsl-rl-lib"),
    Case("learner.precision", "cpu_amx", {"algo": {"name": "sac", "precision": "bfloat16"}}, False),
    Case("learner.precision", "cpu_laptop", {"algo": {"name": "sac", "precision": "float32"}}, False),
    Case(
        "learner.precision",
        "one_h200",
        {"algo": {"name": "flashsac", "precision": "bfloat16"}, "training__devices": [0]},
        False,
    ),
]


def _diags(case: Case):
    spec = validate_spec_data(spec_data(**case.spec), "case")
    ctx = build_context(spec, case.facts, ROOT / "specs")
    rule = next(r for r in RULES if r.id == case.rule)
    return rule.check(ctx)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule(case: Case) -> None:
    diags = _diags(case)
    if not case.violated:
        assert diags == []
        return
    assert diags, f"{case.rule} did not fire"
    d = diags[0]
    assert d.rule_id == case.rule
    assert case.says in d.condition
    assert case.fix in d.fix
    assert d.key_path and d.fix


def test_auto_learner_graph_is_disabled_with_a_reason_under_a_users_nccl_error_handling() -> None:
    facts = _facts_with("node_8gpu_mps", nccl_env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
    spec = validate_spec_data(spec_data(training__devices=[0, 1]), "case")
    plan = compile_plan(spec, facts, ROOT)
    assert not plan.graphs.learner.enabled
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in (plan.graphs.learner.disable_reason or "")
    env = {v.name: (v.value, v.source) for v in plan.nccl_env}
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == ("1", "user")


def test_every_rule_has_a_failing_and_a_passing_case() -> None:
    failing = {c.rule for c in CASES if c.violated}
    passing = {c.rule for c in CASES if not c.violated}
    ids = {r.id for r in RULES}
    assert ids - failing == set()
    assert ids - passing == set()


def test_rule_ids_are_unique_and_stable_shaped() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert all(i == i.lower() and "." in i and " " not in i for i in ids)


def test_all_violations_reported_at_once() -> None:
    spec = validate_spec_data(
        spec_data(
            training__cuda_process_sharing="mps",
            training__learner_graph="on",
            training__dp_gradient_wire_dtype="bfloat16",
        ),
        "s",
    )
    with pytest.raises(PlanRefused) as e:
        compile_plan(spec, host("cpu_laptop"), Path("."))
    ids = [d.rule_id for d in e.value.diagnostics]
    assert {"mps.host", "mps.backend", "wire.bf16-needs-dp", "graph.learner"} <= set(ids)
    # The MPS service rule waits for the host rule: no noise about services on a host without a driver.
    assert "mps.service" not in ids


def test_mps_error_on_a_cpu_laptop_names_rule_condition_and_fix() -> None:
    spec = validate_spec_data(spec_data(training__cuda_process_sharing="mps"), "s")
    with pytest.raises(PlanRefused) as e:
        compile_plan(spec, host("cpu_laptop"), Path("."))
    text = e.value.render()
    assert "[mps.host] training.cuda_process_sharing: no NVIDIA driver" in text
    assert "fix:" in text


def test_algo_options_reports_every_ignored_key_with_its_path() -> None:
    spec = validate_spec_data(spec_data(algo={"name": "sac", "num_atoms": 51, "v_min": -1.0, "v_max": 1.0}), "s")
    with pytest.raises(PlanRefused) as e:
        compile_plan(spec, host("cpu_laptop"), ROOT / "specs")
    got = [(d.rule_id, d.key_path) for d in e.value.diagnostics]
    assert got == [("algo.options", "algo.num_atoms"), ("algo.options", "algo.v_min"), ("algo.options", "algo.v_max")]


def test_push_interval_fixes_are_themselves_whole_steps() -> None:
    for timestep, decimation, interval in [(0.005, 4, 0.03), (0.003, 10, 0.1), (0.002, 7, 1.0), (0.004, 3, 0.005)]:
        dotted = {"task__push_interval_s": interval, "sim__timestep": timestep, "sim__decimation": decimation}
        (d,) = _diags(Case("task.push-interval", "cpu_laptop", dotted, True))
        values = d.fix.removeprefix("set task.push_interval_s = ").split(" (")[0].split(" or ")
        assert values
        for v in values:
            ok = _diags(Case("task.push-interval", "cpu_laptop", {**dotted, "task__push_interval_s": float(v)}, False))
            assert ok == [], (dotted, v)


def test_a_clip_shorter_than_two_control_steps_is_refused(tmp_path: Path) -> None:
    """91 frames at 1 MHz (an fps in the wrong unit) end every episode after one step: refused."""
    from unilab.tasks.motion_file import BUILTIN_DIR

    with np.load(BUILTIN_DIR / "g1_squat.npz") as clip:
        arrays = {k: clip[k] for k in clip.files}
    np.savez(tmp_path / "fast.npz", **{**arrays, "fps": np.array(1e6)})
    dotted = {"task__name": "g1_motion_tracking", "task__motion": str(tmp_path / "fast.npz")}
    (d,) = _diags(Case("task.motion", "cpu_laptop", dotted, True))
    assert "under two control steps (0.04 s)" in d.condition and "fps" in d.fix


def test_the_run_loop_updates_exactly_where_the_warmup_rule_says(tmp_path: Path) -> None:
    """The rule's count and the learner loop's are one: at the boundary the rule accepts (128 env
    steps of 16 envs for FlashSAC with batch 64 and 3-step returns) the run does exactly one update."""
    import json
    import subprocess
    import sys

    algo = '{name="flashsac", batch_size=64, warmup_env_steps=0, hidden_dims=[16], expansion=2}'
    sets = ["task.num_envs=16", "run.total_env_steps=128", f"algo={algo}", f'run.output_dir="{tmp_path}"']
    r = subprocess.run(
        [sys.executable, "-m", "unilab", "apply", str(ROOT / "specs" / "cartpole.toml"), "--quiet"]
        + [a for s in sets for a in ("--set", s)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (manifest,) = tmp_path.glob("*/manifest.json")
    assert json.loads(manifest.read_text())["counters"]["updates"] == 1
