"""One rank of an on-policy run (PPO through rsl-rl-lib): rsl-rl's `OnPolicyRunner` drives each
iteration (rollout of `num_steps_per_env` syncs, GAE returns, PPO epochs) over the rank's
collector process through `unilab.run.vecenv.CollectorVecEnv`; this loop runs one iteration at a
time so it can stop, log through the run's hooks and checkpoint between iterations.

Counters (`Progress`, shared with the off-policy loop): `syncs` and `env_steps` are collector
syncs and env steps; `updates` are PPO gradient steps (iterations x epochs x mini-batches, one
optimizer step each). Every transition the collector produces goes into rsl-rl's rollout storage
(`transitions_stored`), except non-finite worlds' steps (`transitions_nonfinite`, see vecenv).
The budget is whole iterations: the run ends at the first iteration boundary at or past the
rank's share of `run.total_env_steps`, which the plan resolves and records as
`run.effective_env_steps` (summed over ranks); this loop runs to exactly that figure.

With data parallel, every rank runs the same iterations in lockstep: rank 0's models are
broadcast once at start, rsl-rl averages the gradients of every mini-batch step (fp32 all-reduce)
and the adaptive learning rate, the observation normalizers learn from every rank's rollout, and
a stop request on any rank stops all ranks at the same iteration boundary.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from unilab.algos.columns import actor_columns
from unilab.algos.ppo.runner import RankSyncedMLPModel, UnilabOnPolicyRunner
from unilab.algos.registry import algo_def
from unilab.collect import channel as ch
from unilab.dist import param_digest
from unilab.errors import RunDiverged, UnilabError
from unilab.plan.models import Plan
from unilab.run.init_state import loading_init
from unilab.run.rank_loop import RankLoop
from unilab.run.vecenv import CollectorVecEnv, RolloutStopped


class OnPolicyRank(RankLoop):
    """PPO's driver: one unit is one rsl-rl iteration (a rollout and its update)."""

    def __init__(self, plan: Plan, *args: Any, **kwargs: Any) -> None:
        d = algo_def(plan.algo)
        if d.loop != "onpolicy":  # PPO, the one on-policy algorithm (unilab.algos.registry)
            raise UnilabError(f"internal: OnPolicyRank runs an on-policy algorithm, the plan's is {d.title}")
        super().__init__(plan, *args, **kwargs)
        self.rollout_steps = d.syncs_per_unit(plan.algo)  # syncs per env in one rollout
        self.state_key = d.state_key  # where a checkpoint holds the runner's state
        self.learner: UnilabOnPolicyRunner | None = None  # the rsl-rl runner, once built
        self.env: CollectorVecEnv | None = None
        self.iterations = 0
        self.losses: dict[str, float] = {}
        self.n = 0  # envs of this rank's collector, once it said

    # ----------------------------------------------------------------------- data-parallel evidence
    def param_digest(self) -> str | None:
        """Digest of the actor and critic (parameters and normalizer buffers): equal on every rank.
        None when the run stopped before its runner was built (every rank alike)."""
        if self.learner is None:
            return None
        alg = self.learner.alg
        return param_digest([alg.get_policy(), alg._raw_critic])

    @property
    def grad_syncs(self) -> int:
        return self.learner.alg.grad_syncs if self.learner is not None else 0

    @property
    def grad_sync_s(self) -> float:
        return self.learner.alg.grad_sync_s if self.learner is not None else 0.0

    def grad_sync_evidence(self) -> tuple[int, float, dict[str, int]]:
        """rsl-rl's own all-reduce, counted by the PPO runner (float32 on the wire)."""
        wire: dict[str, int] = (
            {self.plan.algo.name: 4 * self.learner.alg.grad_numel()} if self.learner is not None else {}
        )
        return self.grad_syncs, self.grad_sync_s, wire

    # ---------------------------------------------------------------------------------- the driver
    def _started(self) -> None:
        p = self.plan
        if p.sync.env_steps_per_sync != 1:
            raise UnilabError(
                f"PPO runs with env_steps_per_sync = 1 only; the plan has {p.sync.env_steps_per_sync}",
                fix="set training.env_steps_per_sync = 1",
            )
        if p.topology.world_size > 1 and p.gradient_wire.dtype != "float32":
            raise UnilabError(
                "PPO's gradient all-reduce (rsl-rl's) runs in float32; the plan asks for a bfloat16 wire",
                fix='set training.dp_gradient_wire_dtype = "float32" for PPO',
            )

    def _total(self) -> int:
        """The plan's resolved budget: a whole number of this rank's rollouts."""
        p, n = self.plan, self.n
        total = p.run.effective_env_steps // p.topology.world_size
        per_iteration = self.rollout_steps * n
        if total % per_iteration:
            raise UnilabError(
                f"the plan's budget of {total} env steps per rank is not a whole number of rollouts of "
                f"{per_iteration} ({self.rollout_steps} steps x {n} envs)",
                fix="re-plan the spec with this unilab (unilab plan SPEC) and apply the new plan",
            )
        return total

    def _setup(self, hello: ch.Hello) -> None:
        """rsl-rl's runner over the collector, restored or started from init_from."""
        p, prog = self.plan, self.progress
        self.n = hello.num_envs
        # Single rank: a stop request abandons the rollout in progress at once. With data parallel a
        # rank must not leave a collective: the stop is decided by all ranks between iterations.
        in_rollout_stop = (lambda: False) if self.dp is not None else self.hooks.should_stop
        env = CollectorVecEnv(
            self.collector,
            hello,
            p.task.max_episode_steps,
            in_rollout_stop,
            cfg={"task": p.task.name, "num_envs": hello.num_envs},
            # The actor's columns where the critic keeps privileged observations: the runner's
            # actor reads the "policy" group, its critic the whole observation ("critic").
            actor_cols=actor_columns(p.task, hello.obs_terms),
        )
        self.env = env
        # Same initial weights on every rank (rank 0's are broadcast anyway).
        torch.manual_seed(p.run.seed)
        dev = f"cuda:{torch.cuda.current_device()}" if self.device.type == "cuda" else "cpu"
        runner = UnilabOnPolicyRunner.for_plan(env, p.algo, dev)
        self.learner = runner
        if self.resume_state is not None:
            runner.alg.load(self.resume_state[self.state_key], None, strict=True)
            prog.restore_counters(self.resume_state["counters"])
            self.iterations = int(self.resume_state["iterations"])
        elif self.init_state is not None:
            # The actor (its observation normalizer and action noise inside) and the critic; a
            # fresh optimizer at the plan's learning rate.
            with loading_init(p):
                runner.alg.load(self.init_state[self.state_key], {"actor": True, "critic": True}, strict=True)
        runner.sync_replicas()
        # Exploration noise differs per rank (each rank's own seed), and a resumed run draws anew.
        torch.manual_seed(self.rp.seed + 104729 * (1 + self.iterations))
        self._base = (prog.syncs, prog.env_steps, prog.updates)

    def _step(self) -> bool:
        """One iteration: rsl-rl's rollout of num_steps_per_env syncs, GAE and the PPO epochs."""
        runner, env, prog = self._runner(), self.env, self.progress
        if env is None:
            raise UnilabError("internal: the on-policy driver stepped before its setup")
        base_syncs, base_env_steps, base_updates = self._base
        try:
            self.losses = runner.iterate()
        except RolloutStopped:
            self._account(env, base_syncs, base_env_steps, env.num_envs)
            return False
        self.iterations += 1
        prog.updates = base_updates + runner.alg.gradient_steps
        self._account(env, base_syncs, base_env_steps, env.num_envs)
        losses = self.losses
        bad = sorted(k for k, v in losses.items() if not math.isfinite(float(v)))
        if bad:  # rsl-rl has already stepped on them: every later update would train on NaN
            raise RunDiverged(
                f"PPO's losses became non-finite at iteration {self.iterations} "
                f"({', '.join(f'{k} = {losses[k]}' for k in bad)}); the run stops instead of training on NaN",
                detail="the parameters are lost from this update on; checkpoints written before it keep the "
                "last good ones",
                # Resuming the same plan would repeat the same updates: the way on is a new plan.
                fix='start a new run with a lower algo.learning_rate (or schedule = "adaptive"), and check '
                "the task's rewards for non-finite values",
            )
        return True

    def _runner(self) -> UnilabOnPolicyRunner:
        if self.learner is None:
            raise UnilabError("internal: the on-policy driver used its runner before its setup")
        return self.learner

    def _metrics(self) -> dict[str, float]:
        runner = self._runner()
        metrics = {f"ppo_{k}": float(v) for k, v in self.losses.items()}
        metrics["learning_rate"] = float(runner.alg.learning_rate)
        metrics["action_std"] = float(runner.alg.get_policy().output_std.detach().mean())
        metrics["iterations"] = float(self.iterations)
        metrics["steps_per_iteration"] = float(self.rollout_steps * self.n)
        return metrics

    def _account(self, env: CollectorVecEnv, base_syncs: int, base_env_steps: int, n: int) -> None:
        prog = self.progress
        prog.syncs = base_syncs + env.t
        prog.env_steps = base_env_steps + env.t * n
        prog.transitions_produced = env.t * n
        prog.transitions_nonfinite = env.transitions_nonfinite
        prog.transitions_stored = prog.transitions_produced - env.transitions_nonfinite
        prog.wait_s = env.wait_s
        if self.learner is not None:
            prog.update_s = self.learner.alg.update_s
        prog.dp_sync_s = RankSyncedMLPModel.gather_s

    def _state(self) -> dict[str, Any]:
        """Checkpoint state: rsl-rl's actor/critic (normalizers included) and optimizer state dicts,
        the adaptive learning rate (in the optimizer's param groups) and the counters; all plain
        tensors, numbers and dicts, loadable with torch.load(weights_only=True)."""
        env, runner, prog = self.env, self._runner(), self.progress
        return {
            self.state_key: runner.alg.save(),
            "iterations": self.iterations,
            "counters": prog.counters_state(),
            "obs_dim": int(env.num_obs) if env is not None else 0,
            "act_dim": int(env.num_actions) if env is not None else 0,
            "obs_terms": ch.obs_terms_state(self.collector.hello),
        }
