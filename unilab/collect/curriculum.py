"""`task.reward_curriculum` at run time: the reward weights of the run's env steps, set on the task
before each step.

The weights depend on the run's env steps alone (summed over ranks), not on this session's: a
resumed run, whose collector starts afresh, continues with the weights an uninterrupted run would
have at the same env step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unilab.tasks.registry import task_def

if TYPE_CHECKING:
    from unilab.tasks.contract import CollectorTask


class RewardCurriculum:
    def __init__(self, task_spec: Any, env_steps_start: int, env_steps_per_step: int) -> None:
        changes = task_spec.reward_curriculum or {}
        self._spec, self._def = task_spec, task_def(task_spec)
        self._start, self._per_step = env_steps_start, env_steps_per_step
        # Outside [first start, last end] the weights do not change: no work per step there.
        self._first = min(c.start_env_steps for c in changes.values())
        self._last = max(c.end for c in changes.values())
        self._applied: tuple[float, ...] | None = None

    @classmethod
    def of(cls, task_spec: Any, env_steps_start: int, env_steps_per_step: int) -> RewardCurriculum | None:
        """The curriculum of a task spec, or None where it changes no weight."""
        if not getattr(task_spec, "reward_curriculum", None):
            return None
        return cls(task_spec, env_steps_start, env_steps_per_step)

    def apply(self, task: CollectorTask, steps_done: int) -> None:
        """Set the weights for the env step after ``steps_done`` vector steps of this session."""
        env_steps = self._start + steps_done * self._per_step
        if self._applied is not None and not self._first <= env_steps <= self._last:
            return
        weights = self._def.weights_at(self._spec, env_steps)
        applied = tuple(weights[name] for name in task.reward_names)
        if applied != self._applied:
            task.set_reward_weights(applied)
            self._applied = applied
