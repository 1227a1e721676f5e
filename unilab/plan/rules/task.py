"""Rules on the task's inputs and its compatibility with the algorithm and the run budget."""

from __future__ import annotations

from unilab.errors import Diagnostic, UnilabError
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule


def _from_error(r: Rule, exc: UnilabError, key: str) -> Diagnostic:
    cond = exc.summary + (f" ({exc.detail})" if exc.detail else "")
    return r.diag(cond, exc.fix or f"correct {key}", key)


@rule(
    "task.motion",
    "task.motion",
    "g1_motion_tracking has a valid motion file (keys, 29 joints, the robot's bodies, finite, fps > 0); "
    "g1_walk has none.",
)
def task_motion(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.task
    if t.name == "g1_motion_tracking" and t.motion is None:
        return [
            r.diag(
                "g1_motion_tracking needs a reference motion",
                'set task.motion = "builtin:g1_squat" or the path of a .npz clip (see docs/tasks.md)',
            )
        ]
    if t.name == "g1_walk" and t.motion is not None:
        return [
            r.diag(
                "g1_walk does not use a reference motion", 'remove task.motion, or set task.name = "g1_motion_tracking"'
            )
        ]
    if isinstance(ctx.motion, UnilabError):
        return [_from_error(r, ctx.motion, "task.motion")]
    return []


@rule(
    "task.robot",
    "task.robot_mjcf",
    "The robot MJCF exists, parses, has the G1's 29 joint names, its mesh files exist, "
    "and its actuators are all or none.",
)
def task_robot(r: Rule, ctx: Context) -> list[Diagnostic]:
    if isinstance(ctx.robot, UnilabError):
        return [_from_error(r, ctx.robot, "task.robot_mjcf")]
    return []


@rule(
    "task.walk-options", "task", "Walk-only options (noise, randomization, pushes) are not set for g1_motion_tracking."
)
def task_walk_options(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.task
    if t.name != "g1_motion_tracking":
        return []
    out = []
    for key, on in (
        ("observation_noise", t.observation_noise),
        ("domain_randomization", t.domain_randomization),
        ("push_interval_s", t.push_interval_s is not None),
        ("commands", "commands" in t.model_fields_set),
    ):
        if on:
            out.append(
                r.diag(
                    f"task.{key} is a g1_walk option; g1_motion_tracking ignores it",
                    f"remove task.{key}",
                    f"task.{key}",
                )
            )
    return out


@rule("run.budget", "run.total_env_steps", "The run collects at least one env step per env and rank.")
def run_budget(r: Rule, ctx: Context) -> list[Diagnostic]:
    per_step = ctx.spec.task.num_envs * ctx.world_size
    if ctx.spec.run.total_env_steps < per_step:
        return [
            r.diag(
                f"total_env_steps = {ctx.spec.run.total_env_steps} is less than one step of "
                f"{ctx.spec.task.num_envs} envs x {ctx.world_size} ranks",
                f"set run.total_env_steps >= {per_step}",
            )
        ]
    return []
