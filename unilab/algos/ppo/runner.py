"""rsl-rl-lib's PPO, adapted to unilab's runtime in three small subclasses, and `PpoSpec` mapped to
rsl-rl's train cfg.

- `UnilabOnPolicyRunner`: rsl-rl's `OnPolicyRunner` that joins the process group unilab already
  initialised (gloo on CPU, nccl on CUDA) instead of creating its own NCCL group on
  `cuda:{LOCAL_RANK}`, writes no files (no log_dir), and broadcasts rank 0's parameters once,
  here, rather than at the start of every `learn()` call (unilab calls `learn(1)` per iteration).
- `UnilabPPO`: rsl-rl's `PPO` with its gradient all-reduce and its update timed and counted (the
  manifest's evidence); the all-reduce itself is rsl-rl's (`reduce_gradients_in_buckets`, fp32).
- `RankSyncedMLPModel`: rsl-rl's `MLPModel` with its normalizer update timed. Since rsl-rl-lib
  5.5 the empirical normalizer all-reduces each batch's count, mean and variance across ranks
  itself, so the replicas' normalizers stay identical; gathering the rollouts first, as unilab
  did, counted every sample once per rank.

Observation groups (rsl-rl's `obs_groups`): the environment (`unilab.run.vecenv.CollectorVecEnv`)
gives the actor's columns as the group "policy"; where the task keeps privileged observations for
the critic (`task.privileged_observations`) it gives the whole observation as the group "critic"
too, and the critic reads that (an asymmetric actor-critic). Each model normalizes its own group
(its own `EmpiricalNormalization`), so the actor's normalizer is the width of the actor's columns.
"""

from __future__ import annotations

import contextlib
import io
import time
from typing import Any, cast

import torch
import torch.distributed as dist
from rsl_rl.algorithms import PPO
from rsl_rl.models import MLPModel
from rsl_rl.modules.distribution import GaussianDistribution
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

from unilab.algos.ppo.spec import PpoSpec


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class RankSyncedMLPModel(MLPModel):
    gather_s = 0.0  # class-wide: time spent merging the normalizers' statistics across ranks (this process)

    def update_normalization(self, obs: TensorDict) -> None:
        if not (self.obs_normalization and _distributed()):
            super().update_normalization(obs)
            return
        t0 = time.perf_counter()
        super().update_normalization(obs)  # rsl-rl's normalizer all-reduces the batch statistics
        RankSyncedMLPModel.gather_s += time.perf_counter() - t0


class UnilabPPO(PPO):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.grad_syncs = 0
        self.grad_sync_s = 0.0
        self.update_s = 0.0
        self.gradient_steps = 0
        self.last_losses: dict[str, float] = {}

    def reduce_parameters(self) -> None:
        t0 = time.perf_counter()
        super().reduce_parameters()
        self.grad_sync_s += time.perf_counter() - t0
        self.grad_syncs += 1

    def update(self) -> dict[str, float]:
        t0 = time.perf_counter()
        losses = super().update()
        self.update_s += time.perf_counter() - t0
        self.gradient_steps += self.num_learning_epochs * self.num_mini_batches
        self.last_losses = losses
        return losses

    def grad_numel(self) -> int:
        return sum(p.numel() for m in (self.actor, self.critic) for p in m.parameters() if p.requires_grad)


class UnilabOnPolicyRunner(OnPolicyRunner):
    alg: UnilabPPO

    def __init__(self, env: Any, train_cfg: dict[str, Any], device: str) -> None:
        # rsl-rl prints the model architectures while constructing; unilab's output is its own.
        with contextlib.redirect_stdout(io.StringIO()):
            super().__init__(env, train_cfg, log_dir=None, device=device)

    @classmethod
    def for_plan(cls, env: Any, algo: Any, device: str) -> UnilabOnPolicyRunner:
        """The runner of a plan's `[algo]` (this package's `PpoSpec`) over ``env``; its critic reads
        the env's "critic" group where the env gives one (privileged observations), else "policy"."""
        asymmetric = CRITIC_GROUP in env.get_observations().keys()
        return cls(env, train_cfg(cast("PpoSpec", algo), asymmetric=asymmetric), device)

    def _configure_multi_gpu(self) -> None:
        """Use the process group unilab initialised, on whatever device this rank's plan chose."""
        if not _distributed():
            self.gpu_world_size, self.gpu_local_rank, self.gpu_global_rank = 1, 0, 0
            self.is_distributed = False
            self.cfg["multi_gpu"] = None
            return
        self.gpu_world_size = dist.get_world_size()
        self.gpu_global_rank = dist.get_rank()
        self.gpu_local_rank = 0  # each rank sees only its own device (unilab pins it by UUID)
        self.is_distributed = True
        self.cfg["multi_gpu"] = {
            "global_rank": self.gpu_global_rank,
            "local_rank": self.gpu_local_rank,
            "world_size": self.gpu_world_size,
        }

    def sync_replicas(self) -> None:
        """Broadcast rank 0's models (parameters and normalizer buffers) to every rank, once, after
        construction and any resume. rsl-rl's `learn()` would repeat this at each call; the replicas
        stay identical by construction (averaged gradients, shared normalizer data), and a repeated
        broadcast would hide a divergence the final parameter digests are meant to reveal."""
        if self.is_distributed:
            self.alg.broadcast_parameters()
            lr = torch.tensor(self.alg.learning_rate, device=self.device)
            dist.broadcast(lr, src=0)
            self.alg.learning_rate = float(lr.item())
        self.is_distributed = False  # read by rsl-rl's learn() only to repeat the broadcast

    def iterate(self) -> dict[str, float]:
        """One PPO iteration (rollout of num_steps_per_env syncs, returns, update); its mean losses."""
        self.learn(1)
        return self.alg.last_losses


# The environment's observation groups: the actor's columns, and (privileged observations only)
# the whole observation for the critic.
POLICY_GROUP, CRITIC_GROUP = "policy", "critic"


def obs_groups(asymmetric: bool = False) -> dict[str, list[str]]:
    """rsl-rl's `obs_groups`: which of the env's groups each model reads. ``asymmetric``: the
    critic reads the "critic" group (the whole observation), the actor "policy" (its columns)."""
    return {"actor": [POLICY_GROUP], "critic": [CRITIC_GROUP if asymmetric else POLICY_GROUP]}


def train_cfg(algo: PpoSpec, asymmetric: bool = False) -> dict[str, Any]:
    """rsl-rl's train cfg from the plan's `[algo]` (rsl-rl 5.x layout); ``asymmetric``: the
    critic reads its own observation group (`obs_groups`)."""
    dims = list(algo.hidden_dims)
    return {
        "num_steps_per_env": algo.num_steps_per_env,
        "save_interval": 1 << 30,  # no log_dir: rsl-rl never saves; unilab checkpoints
        "check_for_nan": True,
        "obs_groups": obs_groups(asymmetric),
        "actor": {
            "class_name": RankSyncedMLPModel,
            "hidden_dims": dims,
            "activation": "elu",
            "obs_normalization": algo.normalize_observations,
            "distribution_cfg": {"class_name": GaussianDistribution, "init_std": algo.init_noise_std},
        },
        "critic": {
            "class_name": RankSyncedMLPModel,
            "hidden_dims": dims,
            "activation": "elu",
            "obs_normalization": algo.normalize_observations,
        },
        "algorithm": {
            "class_name": UnilabPPO,
            "num_learning_epochs": algo.num_learning_epochs,
            "num_mini_batches": algo.num_mini_batches,
            "clip_param": algo.clip_param,
            "gamma": algo.gamma,
            "lam": algo.lam,
            "value_loss_coef": algo.value_loss_coef,
            "entropy_coef": algo.entropy_coef,
            "learning_rate": algo.learning_rate,
            "max_grad_norm": algo.max_grad_norm,
            "optimizer": "adam",
            "use_clipped_value_loss": True,
            "schedule": algo.schedule,
            "desired_kl": algo.desired_kl,
        },
    }
