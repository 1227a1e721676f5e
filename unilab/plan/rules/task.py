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
    if t.name != "g1_motion_tracking" and t.motion is not None:
        return [
            r.diag(
                f"{t.name} does not use a reference motion",
                'remove task.motion, or set task.name = "g1_motion_tracking"',
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
    if ctx.spec.task.name == "cartpole" and ctx.spec.task.robot_mjcf is not None:
        return [
            r.diag(
                "the cartpole check task has its own model; task.robot_mjcf is for the G1 tasks",
                "remove task.robot_mjcf",
            )
        ]
    if isinstance(ctx.robot, UnilabError):
        return [_from_error(r, ctx.robot, "task.robot_mjcf")]
    return []


@rule(
    "task.options",
    "task",
    "Options a task does not use are not set: velocity commands are g1_walk's; the "
    "cartpole check task takes no noise, randomization or pushes.",
)
def task_options(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.task
    unused: list[str] = []
    if t.name != "g1_walk" and "commands" in t.model_fields_set:
        unused.append("commands")
    if t.name == "cartpole":
        unused += [
            k
            for k, on in (
                ("observation_noise", t.observation_noise),
                ("domain_randomization", t.domain_randomization),
                ("push_interval_s", t.push_interval_s is not None),
            )
            if on
        ]
    return [r.diag(f"task.{k} has no effect on {t.name}", f"remove task.{k}", f"task.{k}") for k in unused]


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
