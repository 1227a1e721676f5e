"""The collector: one physics backend, one task, fixed-shape buffers, automatic masked resets.

``step(actions)`` runs one env step for every world and returns persistent buffers
``(obs, reward, terminated, truncated)``; they are overwritten by the next step, copy what you
keep. For a world that ended this step, ``obs`` is already its first observation of the next
episode and ``next_obs`` holds the terminal observation (what an off-policy learner stores as
the transition's next observation). For the other worlds ``next_obs`` equals ``obs``.

Worlds whose action, physics state, observation or reward is non-finite are flagged on the
device (``nonfinite`` [N]), their reward and ``next_obs`` are zeroed, they are reported as
truncated and reset in the same step; the host counts them every ``finite_check_interval``
steps (``unilab.collect.finite``). Learners should drop transitions flagged in ``nonfinite``.

Learning-health sums (saturated action components, the task's ``diagnostic_terms``) accumulate
on the device every step; ``health_sums`` reads them at the caller's interval.

Host reads per step: none on CUDA. On CPU one ``any()`` of the done mask (a CPU tensor, no
device sync) skips the reset path and the episode bookkeeping when no world ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from unilab.collect.finite import FiniteMonitor, FiniteVerdict
from unilab.collect.timing import PhaseTimer, PhaseTiming
from unilab.errors import UnilabError

if TYPE_CHECKING:
    from collections.abc import Callable

    from unilab.sim.contract import PhysicsBackend, PhysicsState
    from unilab.tasks.contract import CollectorTask


_NO_TIMER = PhaseTimer(enabled=False)  # inside a captured body there is no host clock to read
# An action component beyond this (of 1, the bound) counts as saturated: a policy that pushes most
# components to the bound acts bang-bang, which tanh-squashed actors drift into when the critic
# rewards extremes (or the action scale is too small for the motion asked of them).
SATURATED_ACTION = 0.95


class Collector:
    def __init__(
        self,
        backend: PhysicsBackend,
        task: CollectorTask,
        *,
        finite_check_interval: int = 100,
        timing: bool = True,
        update_graph: str | None = None,
    ) -> None:
        if task.backend is not backend:
            raise ValueError("the task was built for a different backend")
        self.backend = backend
        self.task = task
        self.num_envs = n = task.num_envs
        self.obs_dim = task.obs_dim
        self.action_dim = task.num_actions
        # (name, columns) of each observation term in order: what a checkpoint records of the layout.
        self.obs_terms = [(t.name, int(t.dim)) for t in task.observations]
        self.device = dev = task.device
        self._host_done_check = dev.type == "cpu"

        self.obs = torch.zeros(n, self.obs_dim, device=dev)
        self.next_obs = torch.zeros(n, self.obs_dim, device=dev)
        self.reward = torch.zeros(n, device=dev)
        self.terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.truncated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.done = torch.zeros(n, dtype=torch.bool, device=dev)
        self._actions = torch.zeros(n, self.action_dim, device=dev)
        self._safe_actions = torch.zeros_like(self._actions)
        self._finite = FiniteMonitor(n, dev, finite_check_interval)
        self.nonfinite = self._finite.bad

        # Episode statistics, on the device; ``episode_stats`` reads them (one transfer).
        r = len(task.rewards)
        self.episode_return = torch.zeros(n, device=dev)
        self.episode_length = torch.zeros(n, device=dev)
        self.episode_term_return = torch.zeros(n, r, device=dev)
        # [count, return sum, length sum, terminated count, *per-term sums]
        self._completed = torch.zeros(4 + r, device=dev)
        self._row = torch.zeros(4 + r, device=dev)

        # Learning-health sums over env steps, on the device; ``health_sums`` reads them (one transfer).
        # [0]: saturated action components (counted, divided by the action size on reading), then
        # one sum per task diagnostic (``diagnostic_terms``: name -> fn(task) -> [N] per env step).
        diagnostics = task.diagnostic_terms()
        self._diagnostics = list(diagnostics.values())
        self.health_names = ["action_saturation", *diagnostics]
        self._health = torch.zeros(len(self.health_names), device=dev)
        self._health_slots = list(self._health.unbind())  # views made once: no indexing per step
        self._abs_actions = torch.zeros(n, self.action_dim, device=dev)
        self._saturated = torch.zeros(n, self.action_dim, dtype=torch.bool, device=dev)
        self._health_since = 0  # env_steps at the last read

        self.timer = PhaseTimer(enabled=timing)
        self.steps = 0
        self.env_steps = 0
        # Called every step with (state, done) once the step's rewards and ends are known, before the
        # ended worlds are reset: the only moment their final state can be seen (eval --video).
        self.before_reset: Callable[[PhysicsState, torch.Tensor], None] | None = None

        # Experimental update-state graph ("cuda_graph", or "eager_twin" to test its logic on a CPU).
        self.update_graph = None
        if update_graph is not None:
            from unilab.collect.update_graph import UpdateStateGraph

            self._host_done_check = False  # the captured body must not read the done mask on the host
            self.update_graph = UpdateStateGraph(self, self._graphed_body, mode=update_graph)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ lifecycle
    def reset_all(self) -> torch.Tensor:
        """Reset every world; returns ``obs``."""
        mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        qpos, qvel = self.task.reset_targets(mask)
        state = self.backend.reset(mask, qpos, qvel)
        self.task.after_reset(mask, state)
        self.obs.copy_(self.task.compute_observations())
        self.next_obs.copy_(self.obs)
        self.episode_return.zero_()
        self.episode_length.zero_()
        self.episode_term_return.zero_()
        self.reward.zero_()
        self.terminated.zero_()
        self.truncated.zero_()
        self.timer.skip()
        return self.obs

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        task, timer, ph = self.task, self.timer, self.timer.index
        if actions.shape != self._actions.shape:
            raise UnilabError(
                f"actions have shape {tuple(actions.shape)}, the collector expects {tuple(self._actions.shape)}",
                fix=f"pass one {self.action_dim}-dim action per world ([num_envs, {self.action_dim}])",
            )
        timer.start()

        # Non-finite actions never reach the physics: those worlds get zeros and are flagged below.
        self._actions.copy_(actions)
        torch.nan_to_num(self._actions, nan=0.0, posinf=0.0, neginf=0.0, out=self._safe_actions)
        ctrl = task.apply_actions(self._safe_actions)
        timer.lap(ph["action_apply"])

        state = self.backend.step(ctrl)
        timer.lap(ph["physics_step"])

        done = self.done
        if self.update_graph is not None:
            self.update_graph.run(state)
            any_done = True
            timer.lap(ph["update_state"])
        else:
            self._update_body(state, timer)
            any_done = not self._host_done_check or bool(done.any())
            self._episode_metrics(done, any_done)
            timer.lap(ph["metrics"])
        if self.before_reset is not None:
            self.before_reset(state, done)

        if any_done:
            qpos, qvel = task.reset_targets(done)
            state = self.backend.reset(done, qpos, qvel)
            timer.lap(ph["packed_reset"])
            task.after_reset(done, state)
            post = task.compute_observations()
            torch.where(done.unsqueeze(1), post, self.next_obs, out=self.obs)
            timer.lap(ph["post_reset_observation"])
        else:
            self.obs.copy_(self.next_obs)
            timer.lap(ph["post_reset_observation"])

        self.steps += 1
        self.env_steps += self.num_envs
        if self._finite.due(self.steps):
            self._finite.read(self.steps)
            timer.skip()
        return self.obs, self.reward, self.terminated, self.truncated

    def _update_body(self, state: PhysicsState, timer: PhaseTimer) -> None:
        """State read .. publication: what the update-state graph captures (with the metrics)."""
        task, ph = self.task, timer.index
        task.read_state(state)
        task.advance()
        timer.lap(ph["state_read"])

        terminated, truncated = task.compute_terminations()
        timer.lap(ph["termination"])

        reward = task.compute_rewards()
        timer.lap(ph["reward"])

        task.step_events()
        timer.lap(ph["events_commands"])

        obs = task.compute_observations()
        timer.lap(ph["observation"])

        bad = self._finite.record(self._actions, state.qpos, state.qvel, obs, reward)
        bad_col = bad.unsqueeze(1)
        timer.lap(ph["finite_check"])

        done = self.done
        torch.logical_or(terminated, truncated, out=done)
        done |= bad
        timer.lap(ph["reset_mask"])

        # Publication of this step's transition (before any reset overwrites the task's buffers).
        self.reward.copy_(reward).masked_fill_(bad, 0.0)
        self.next_obs.copy_(obs).masked_fill_(bad_col, 0.0)
        torch.logical_and(terminated, ~bad, out=self.terminated)
        torch.logical_or(truncated, bad, out=self.truncated)
        self.truncated &= ~self.terminated
        timer.lap(ph["publication"])

    def _graphed_body(self, state: PhysicsState) -> None:
        self._update_body(state, _NO_TIMER)
        self._episode_metrics(self.done, True)

    def _episode_metrics(self, done: torch.Tensor, any_done: bool) -> None:
        self._health_metrics()
        self.episode_return += self.reward
        self.episode_length += 1.0
        self.episode_term_return += self.task.reward_terms
        if not any_done:
            return
        # Non-finite worlds: their per-term rewards are unusable, drop the episode's term sums.
        self.episode_term_return.masked_fill_(self.nonfinite.unsqueeze(1), 0.0)
        d = done.to(torch.float32)
        row = self._row
        row[0] = d.sum()
        row[1] = (self.episode_return * d).sum()
        row[2] = (self.episode_length * d).sum()
        row[3] = self.terminated.to(torch.float32).sum()
        row[4:] = (self.episode_term_return * d.unsqueeze(1)).sum(dim=0)
        self._completed += row
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0.0)
        self.episode_term_return.masked_fill_(done.unsqueeze(1), 0.0)

    def _health_metrics(self) -> None:
        """Add this step's saturated action components and task diagnostics to the device sums."""
        slots = self._health_slots
        torch.abs(self._safe_actions, out=self._abs_actions)
        torch.gt(self._abs_actions, SATURATED_ACTION, out=self._saturated)
        slots[0].add_(self._saturated.sum())
        for slot, fn in zip(slots[1:], self._diagnostics, strict=True):
            slot.add_(fn(self.task).sum())

    def close(self) -> None:
        """Close the backend (workers, shared memory). Idempotent."""
        self.backend.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reporting
    def episode_stats(self) -> dict[str, float]:
        """Means over the episodes completed since the previous call (one host read); clears them."""
        c = self._completed.cpu().tolist()
        self._completed.zero_()
        count = c[0]
        out = {"episodes": count}
        if count > 0:
            out["episode_return"] = c[1] / count
            out["episode_length"] = c[2] / count
            out["terminated_fraction"] = c[3] / count
            for name, s in zip(self.task.reward_names, c[4:], strict=True):
                out[f"reward/{name}"] = s / count
        return out

    def health_sums(self) -> list[float]:
        """``[env steps, *sums]`` since the previous call (one host read; clears them): per
        ``health_names`` the sum over those env steps, ``action_saturation`` as the share of the
        action's components beyond ``SATURATED_ACTION`` per env step."""
        sums = self._health.cpu().tolist()
        self._health.zero_()
        steps, self._health_since = self.env_steps - self._health_since, self.env_steps
        sums[0] /= self.action_dim
        return [float(steps), *sums]

    def health_stats(self) -> dict[str, float]:
        """Means per env step of the learning-health figures since the previous read; clears them."""
        steps, *sums = self.health_sums()
        return {name: s / steps for name, s in zip(self.health_names, sums, strict=True)} if steps else {}

    @property
    def completed_totals(self) -> torch.Tensor:
        """Device tensor of totals over episodes completed since the last clear:
        ``[count, return sum, length sum, terminated count, *per-reward-term sums]``. Read it at
        your own interval and ``zero_()`` it, or use ``episode_stats`` (which does both)."""
        return self._completed

    def timings(self) -> dict[str, PhaseTiming]:
        """Accumulated wall time per lifecycle phase since construction (or ``reset_timings``)."""
        return self.timer.snapshot()

    def reset_timings(self) -> None:
        self.timer.reset()

    @property
    def finite_verdict(self) -> FiniteVerdict | None:
        """The verdict of the last interval boundary (None before the first)."""
        return self._finite.last

    def check_finite_now(self) -> FiniteVerdict:
        """Read the finite flags now instead of waiting for the interval (a host read)."""
        return self._finite.read(self.steps)

    @property
    def nonfinite_worlds_total(self) -> int:
        """World-steps flagged non-finite, counted at interval boundaries."""
        return self._finite.total_events
