"""Control-step arithmetic shared by the plan and the runtime tasks, importable without torch.

The plan records `max_episode_steps` and checks `task.push_interval_s` with these functions, and
the tasks (``unilab.tasks.base``, ``unilab.tasks.cartpole``, ``unilab.tasks.events``) compute the
same quantities with the same functions from the same control step, so what the plan says and
what the task does cannot drift apart.
"""

from __future__ import annotations

import math

# "A whole number of control steps" up to this relative error. It absorbs the float error of
# `timestep * decimation` and of decimal seconds (0.9 / (0.003 * 10) = 30.000000000000004, and
# 0.003 * 3 = 0.009000000000000001), nothing a user could mean as a different step count.
WHOLE_STEPS_RTOL = 1e-9


def control_dt(timestep: float, decimation: int) -> float:
    """The env (control) step in seconds: `sim.timestep * sim.decimation`."""
    return timestep * decimation


def whole_steps(seconds: float, step_dt: float) -> int | None:
    """`seconds / step_dt` when it is a whole number (at least 1) of control steps, within
    ``WHOLE_STEPS_RTOL``; otherwise None."""
    ratio = seconds / step_dt
    n = round(ratio)
    if n >= 1 and abs(ratio - n) <= WHOLE_STEPS_RTOL * ratio:
        return n
    return None


def max_episode_steps(episode_length_s: float, step_dt: float) -> int:
    """Control steps of an episode: `episode_length_s / step_dt` rounded up (a ratio within
    ``WHOLE_STEPS_RTOL`` of a whole number is that number), at least 1."""
    exact = whole_steps(episode_length_s, step_dt)
    if exact is not None:
        return exact
    return max(1, math.ceil(episode_length_s / step_dt))


def seconds_text(value: float) -> str:
    """A number of seconds as a user writes it: 12 significant digits, no float noise (0.04, not
    0.04000000000000001)."""
    return f"{value:.12g}"


def nearest_whole_step_seconds(seconds: float, step_dt: float) -> list[str]:
    """The whole multiples (at least one step) of `step_dt` nearest to `seconds`, below and above,
    written as a user writes them (``seconds_text``); each is a whole number of steps."""
    ratio = seconds / step_dt
    ks = sorted({max(1, math.floor(ratio)), max(1, math.ceil(ratio))})
    return [seconds_text(k * step_dt) for k in ks]
