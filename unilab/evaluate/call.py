"""`unilab.evaluate(run_dir, ...)`: the Python API's evaluation (docs/python.md), here beside the
package it calls so that ``unilab.evaluate`` can be both this function and the package."""

from __future__ import annotations

import os
from pathlib import Path

from unilab.evaluate.models import EvalReport
from unilab.python_voice import python_api
from unilab.stop import import_uninterrupted


@python_api
def evaluate(
    run_dir: str | os.PathLike[str],
    episodes: int = 64,
    *,
    seed: int = 0,
    checkpoint: str | os.PathLike[str] | None = None,
    workers: int | None = None,
    video: str | os.PathLike[str] | None = None,
    video_episodes: int | None = None,
    progress: bool = False,
) -> EvalReport:
    """Play the run's deterministic policy, as `unilab eval` does: ``episodes`` episodes, one per
    world, from its newest checkpoint (or ``checkpoint``); ``video`` films world 0's episode (the
    first ``video_episodes``) into an MP4. Returns the report `unilab eval --json` prints
    (schemas/eval.v1.json): ``report.episode_return.mean``, ``report.command_tracking``, ..."""

    import_uninterrupted("numpy", "torch", "mujoco", "unilab.evaluate.rollout")
    from unilab.evaluate.rollout import EvalRequest
    from unilab.evaluate.rollout import evaluate as run_eval

    return run_eval(
        EvalRequest(
            run_dir=Path(run_dir),
            episodes=episodes,
            seed=seed,
            checkpoint=None if checkpoint is None else Path(checkpoint),
            workers=workers,
            progress=progress,
            video=None if video is None else Path(video),
            video_episodes=video_episodes,
        )
    )
