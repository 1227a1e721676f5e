"""Rules on the task's inputs and its compatibility with the algorithm and the run budget."""

from __future__ import annotations

import difflib

from unilab.algos.algodef import AlgoDef, KeyRule
from unilab.algos.registry import ALGOS, algo_def, names
from unilab.errors import Diagnostic, UnilabError
from unilab.plan.context import Context
from unilab.plan.rules.registry import Rule, rule
from unilab.sections import ReplayAlgoSpec
from unilab.tasks.registry import TASKS, robot_spec, task_def
from unilab.tasks.timing import control_dt, nearest_whole_step_seconds, seconds_text, whole_steps


def _did_you_mean(name: str, known: list[str] | tuple[str, ...]) -> str:
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _from_error(r: Rule, exc: UnilabError, key: str) -> Diagnostic:
    cond = exc.summary + (f" ({exc.detail})" if exc.detail else "")
    return r.diag(cond, exc.fix or f"correct {key}", key)


@rule(
    "task.motion",
    "task.motion",
    "g1_motion_tracking's motion file is valid (keys, 29 joints, the robot's bodies, finite, non-zero "
    "quaternions, fps > 0, joint angles in radians, the root above the floor) and lasts at least two control "
    "steps.",
)
def task_motion(r: Rule, ctx: Context) -> list[Diagnostic]:
    if isinstance(ctx.motion, UnilabError):
        return [_from_error(r, ctx.motion, "task.motion")]
    dt = control_dt(ctx.spec.sim.timestep, ctx.spec.sim.decimation)
    if ctx.motion is not None and ctx.motion.duration_s < 2 * dt:
        # Episodes would end on the clip's last frame after one step: nothing to track, yet it "trains".
        m = ctx.motion
        return [
            r.diag(
                f"the clip lasts {m.duration_s:.4g} s ({m.num_frames} frames at {m.fps:g} fps), under two "
                f"control steps ({2 * dt:.4g} s)",
                "check the clip's fps (frames per second of its data), or use a longer clip",
            )
        ]
    return []


@rule(
    "task.robot",
    "task.robot_mjcf",
    "The robot MJCF exists, parses as XML, has the G1's 29 joint names, its mesh files exist, "
    "and its actuators are all or none (MuJoCo itself compiles it when the run starts).",
)
def task_robot(r: Rule, ctx: Context) -> list[Diagnostic]:
    if isinstance(ctx.robot, UnilabError):
        return [_from_error(r, ctx.robot, "task.robot_mjcf")]
    return []


def _no_such_reward_term(r: Rule, task: object, name: str, key: str) -> Diagnostic | None:
    """A name ``task`` has no reward term of, with the closest one; None where it has it."""
    terms = list(task_def(task).reward_weights(task))
    if name in terms:
        return None
    return r.diag(
        f"{getattr(task, 'name', task)} has no reward term {name!r}{_did_you_mean(name, terms)}",
        f"use one of its terms: {', '.join(terms)}",
        key,
    )


@rule(
    "task.reward-weights",
    "task.reward_weights",
    "Every name in task.reward_weights is a reward term of the task (docs/tasks.md lists them).",
)
def task_reward_weights(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.task
    found = (_no_such_reward_term(r, t, name, f"task.reward_weights.{name}") for name in t.reward_weights or {})
    return [d for d in found if d is not None]


@rule(
    "task.reward-curriculum",
    "task.reward_curriculum",
    "Every name in task.reward_curriculum is a reward term of the task, and each change ends no earlier than it "
    "starts. A change the run does not reach (a shorter `--set run.total_env_steps`) leaves the weight as it "
    "was: the plan shows both.",
)
def task_reward_curriculum(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.task
    out = []
    for name, change in (t.reward_curriculum or {}).items():
        key = f"task.reward_curriculum.{name}"
        if (unknown := _no_such_reward_term(r, t, name, key)) is not None:
            out.append(unknown)
        elif change.end < change.start_env_steps:
            out.append(
                r.diag(
                    f"the change ends ({change.end:,} env steps) before it starts ({change.start_env_steps:,})",
                    f"set its end_env_steps to {change.start_env_steps:_} or later (or leave it out: a step)",
                    key,
                )
            )
    return out


@rule(
    "task.privileged-observations",
    "task.privileged_observations",
    "Each name in task.privileged_observations is one of the task's observation terms, the actor keeps at least "
    "one, and the algorithm's actor and critic take separate inputs (SAC, TD3, FlashSAC: the actor's columns of "
    "one observation; PPO: rsl-rl-lib's observation groups, `policy` for the actor, `critic` for the critic).",
)
def task_privileged_observations(r: Rule, ctx: Context) -> list[Diagnostic]:
    t = ctx.spec.task
    asked = getattr(t, "privileged_observations", None) or ()
    if not asked:
        return []
    terms = task_def(t).observations(t)
    out = []
    for name in asked:
        if name not in terms:
            meant = _did_you_mean(name, terms)
            out.append(
                r.diag(f"{t.name} has no observation term {name!r}{meant}", f"use its terms: {', '.join(terms)}")
            )
    if len(set(asked)) != len(asked):
        out.append(r.diag("a term is named twice", "name each term once"))
    if not out and set(terms) <= set(asked):
        out.append(r.diag("every observation term is privileged: the actor would see nothing", "leave the actor one"))
    d = algo_def(ctx.spec.algo)
    if not d.takes_privileged_observations:
        able = [n for n in names() if ALGOS[n].takes_privileged_observations]
        out.append(
            r.diag(
                f"{d.title} runs through {d.external_runner or 'its own runner'}, whose actor and critic see the "
                "same observation here",
                f"use an algorithm whose critic takes its own inputs (algo.name: {', '.join(able)}), or leave "
                "task.privileged_observations unset",
            )
        )
    return out


@rule(
    "task.mirror-augmentation",
    "algo.mirror_augmentation",
    "Mirror augmentation needs the task's left-right mirror of every observation term it observes and of its "
    "actions (g1_walk declares one).",
)
def task_mirror_augmentation(r: Rule, ctx: Context) -> list[Diagnostic]:
    algo, t = ctx.spec.algo, ctx.spec.task
    if not (isinstance(algo, ReplayAlgoSpec) and algo.mirror_augmentation):
        return []
    d = task_def(t)
    if d.mirror_terms is None:
        able = [n for n, td in TASKS.items() if td.mirror_terms is not None]
        return [
            r.diag(
                f"{d.title} declares no left-right mirror of its observations and actions",
                f"set algo.mirror_augmentation = false, or train a task that has one ({', '.join(able)})",
            )
        ]
    missing = d.unmirrored_observations(t)
    if missing:
        return [
            r.diag(
                f"{d.title}'s observation terms {', '.join(missing)} have no mirror",
                "set algo.mirror_augmentation = false, or declare their mirror in the task's mirror_terms",
            )
        ]
    return []


@rule(
    "task.push-interval",
    "task.push_interval_s",
    "A push interval is a whole number of control steps (`sim.timestep * sim.decimation`); it is never rounded.",
)
def task_push_interval(r: Rule, ctx: Context) -> list[Diagnostic]:
    t, sim = robot_spec(ctx.spec.task), ctx.spec.sim
    if t is None or t.push_interval_s is None:
        return []
    dt = control_dt(sim.timestep, sim.decimation)
    if whole_steps(t.push_interval_s, dt) is not None:
        return []
    near = " or ".join(nearest_whole_step_seconds(t.push_interval_s, dt))
    return [
        r.diag(
            f"push_interval_s = {t.push_interval_s} is {t.push_interval_s / dt:.6g} control steps of "
            f"{seconds_text(dt)} s (sim.timestep {sim.timestep} x sim.decimation {sim.decimation}); "
            "pushes fire on whole control steps",
            f"set task.push_interval_s = {near} (a whole number of {seconds_text(dt)} s control steps)",
        )
    ]


_INT32_MAX = 2**31 - 1


@rule(
    "task.episode-steps",
    "task.episode_length_s",
    "An episode lasts at least one control step and at most 2**31 - 1 (the tasks count steps in int32).",
)
def task_episode_steps(r: Rule, ctx: Context) -> list[Diagnostic]:
    t, sim = ctx.spec.task, ctx.spec.sim
    dt = control_dt(sim.timestep, sim.decimation)
    steps = t.episode_length_s / dt
    if steps < 1 and whole_steps(t.episode_length_s, dt) is None:
        # Rounded up to one step it would last many times what was asked.
        return [
            r.diag(
                f"episode_length_s = {t.episode_length_s} is shorter than one control step of {seconds_text(dt)} s "
                f"(sim.timestep {sim.timestep} x sim.decimation {sim.decimation})",
                f"set task.episode_length_s >= {seconds_text(dt)}, or lower sim.timestep or sim.decimation",
            )
        ]
    if steps <= _INT32_MAX:
        return []
    return [
        r.diag(
            f"episode_length_s = {t.episode_length_s} is {steps:.3g} control steps of {seconds_text(dt)} s "
            f"(sim.timestep {sim.timestep} x sim.decimation {sim.decimation}), more than {_INT32_MAX:,}",
            "shorten task.episode_length_s, or raise sim.timestep or sim.decimation",
        )
    ]


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


# The learners refuse these too (unilab/learn/replay.py, sac.py, flashsac.py) as a guard, but
# by then `unilab apply` has made the run directory and started the collector.


@rule(
    "algo.buffer-size",
    "algo.buffer_size",
    "An off-policy replay buffer holds at least one env step of a rank's envs (`buffer_size >= task.num_envs`) "
    "and one batch (`buffer_size >= batch_size`).",
)
def algo_buffer_size(r: Rule, ctx: Context) -> list[Diagnostic]:
    algo, n = ctx.spec.algo, ctx.spec.task.num_envs
    if not isinstance(algo, ReplayAlgoSpec):
        return []
    if algo.buffer_size < n:
        return [
            r.diag(
                f"replay capacity {algo.buffer_size} is smaller than one env step of {n} envs (task.num_envs)",
                # At least one batch too (below), so that following this fix does not meet that one.
                f"set algo.buffer_size >= {max(n, algo.batch_size)} (e.g. --set algo.buffer_size="
                f"{max(n, algo.batch_size)}), or lower task.num_envs",
            )
        ]
    if algo.buffer_size < algo.batch_size:  # updates wait for one batch in replay
        return [
            r.diag(
                f"replay capacity {algo.buffer_size} is smaller than one batch (algo.batch_size = "
                f"{algo.batch_size}), so the learner would never update",
                f"set algo.buffer_size >= {algo.batch_size}, or lower algo.batch_size",
            )
        ]
    return []


@rule(
    "algo.warmup",
    "algo.warmup_env_steps",
    "An off-policy run has env steps left to learn from after its random warm-up "
    "(`warmup_env_steps < run.total_env_steps`), and its replay fills one batch before it ends.",
)
def algo_warmup(r: Rule, ctx: Context) -> list[Diagnostic]:
    algo, total = ctx.spec.algo, ctx.spec.run.total_env_steps
    if not isinstance(algo, ReplayAlgoSpec):
        return []
    n, world = ctx.spec.task.num_envs, ctx.world_size
    syncs, needed = _run_syncs(total, n, world), _first_update_syncs(algo, n, world, algo.warmup_env_steps)
    fewest = _fewest_env_steps(needed, n, world)  # with this warm-up
    if algo.warmup_env_steps >= total:
        # The fix must not lead into the check below: a warm-up short enough, with a batch still to fill.
        shorter = next((w for w in (total // 10, 0) if syncs >= _first_update_syncs(algo, n, world, w)), None)
        if shorter is not None:
            fix = (
                f"lower algo.warmup_env_steps below {total} (e.g. --set algo.warmup_env_steps={shorter}), "
                "or raise run.total_env_steps"
            )
        else:
            fix = (
                f"raise run.total_env_steps to at least {fewest} (a shorter warm-up alone is not enough: one batch "
                f"of algo.batch_size = {algo.batch_size} must fill the replay first), or lower "
                "algo.warmup_env_steps and algo.batch_size"
            )
        return [
            r.diag(
                f"the {'warm-up' if ctx.spec.run.init_from else 'random warm-up'} ({algo.warmup_env_steps:,} env "
                "steps) is not shorter than the run "
                f"({total:,} env steps, run.total_env_steps), so the learner would never update",
                fix,
            )
        ]
    if syncs < needed:
        batch_bound = _fill_syncs(algo, n) >= -(-(algo.warmup_env_steps // world) // n)
        return [
            r.diag(
                f"the run ends after {syncs:,} env steps of its {n} envs per rank, before the first gradient "
                f"update (after {needed:,}: one batch of algo.batch_size = {algo.batch_size} in the replay, the "
                "warm-up, then 1 / algo.updates_per_step such steps), so the learner would never update",
                f"raise run.total_env_steps to at least {fewest}, or lower "
                + ("algo.batch_size" if batch_bound else "algo.warmup_env_steps"),
                "algo.batch_size",
            )
        ]
    return []


def _run_syncs(total: int, n: int, world: int) -> int:
    """Syncs a rank runs: its share of the env steps in whole env steps of its envs, rounded up."""
    return -(-(total // world) // n)


def _fewest_env_steps(syncs: int, n: int, world: int) -> int:
    """The smallest run.total_env_steps whose ranks run `syncs` syncs (the last one may be partial)."""
    return world * ((syncs - 1) * n + 1)


def _fill_syncs(algo: ReplayAlgoSpec, n: int) -> int:
    """Syncs until a rank's replay holds one batch (an n-step return holds back the newest n - 1)."""
    return -(-algo.batch_size // n) + algo_def(algo).n_step(algo) - 1


def _first_update_syncs(algo: ReplayAlgoSpec, n: int, world: int, warmup: int) -> int:
    """The sync of a rank's first gradient update: the first whose replay holds one batch and whose
    warm-up is over, once 1 / updates_per_step such syncs have added up to one update
    (unilab.run.offpolicy)."""
    warm = -(-(warmup // world) // n)
    return max(_fill_syncs(algo, n), warm) + _syncs_to_first_update(algo.updates_per_step)


def _key_rule(d: AlgoDef, k: KeyRule) -> None:
    """Register an algorithm's own key rule (`AlgoDef.rules`): it checks specs that name it."""

    @rule(k.id, k.key_path, k.requires)
    def check(r: Rule, ctx: Context) -> list[Diagnostic]:
        if algo_def(ctx.spec.algo) is not d:
            return []
        return [r.diag(condition, fix, key) for condition, fix, key in k.check(ctx.spec)]


# In the catalog here, after the replay rules above (docs/rules.md lists them in this order).
for _d in ALGOS.values():
    for _k in _d.rules:
        _key_rule(_d, _k)


def _syncs_to_first_update(updates_per_step: float) -> int:
    """Eligible syncs until the learner loop's owed updates reach one, summed in floating point
    as the loop sums them (ten additions of 0.1 make 0.9999999999999999: eleven syncs)."""
    if updates_per_step < 1e-4:  # summing would take long; rounding cannot matter at this scale
        return int(1.0 / updates_per_step) + 2
    owed, syncs = 0.0, 0
    while owed < 1.0:
        owed += updates_per_step
        syncs += 1
    return syncs


@rule(
    "algo.critic-support",
    "algo.v_min",
    "A distributional critic has a non-empty support, `v_min < v_max` (`critic = c51`); "
    "FlashSAC's also contains 0, `v_min < 0 < v_max`.",
)
def algo_critic_support(r: Rule, ctx: Context) -> list[Diagnostic]:
    algo = ctx.spec.algo
    if not isinstance(algo, ReplayAlgoSpec):
        return []
    if getattr(algo, "critic", None) == "c51" and not algo.v_min < algo.v_max:  # a chosen C51 critic
        return [
            r.diag(
                f"C51 critic support is empty: v_min {algo.v_min} >= v_max {algo.v_max}",
                "set algo.v_min below algo.v_max, e.g. --set algo.v_min=-20.0 --set algo.v_max=20.0",
            )
        ]
    d = algo_def(algo)
    if d.zero_centred_support and not algo.v_min < 0 < algo.v_max:
        key = "algo.v_min" if algo.v_min >= 0 else "algo.v_max"
        lo, hi = (d.spec.model_fields[k].default for k in ("v_min", "v_max"))
        return [
            r.diag(
                f"{d.title}'s critic support [{algo.v_min}, {algo.v_max}] must contain 0 (rewards are scaled to it)",
                f"set algo.v_min = {lo} and algo.v_max = {hi} (its default support): "
                f"--set algo.v_min={lo} --set algo.v_max={hi}",
                key,
            )
        ]
    return []


@rule(
    "algo.options",
    "algo",
    "Keys an algorithm ignores are not set: `num_atoms`, `v_min` and `v_max` need `critic = c51` where there is a "
    "choice of critic; "
    "PPO's `desired_kl` needs `schedule = adaptive`.",
)
def algo_options(r: Rule, ctx: Context) -> list[Diagnostic]:
    algo = ctx.spec.algo
    out = []
    for entry in algo_def(algo).ignored_keys:  # FlashSAC has none: it uses every key it takes
        if not entry.ignored(algo):
            continue
        # Only keys the user wrote: a default that goes unused is not a request.
        for k in entry.keys:
            if k in algo.model_fields_set:
                out.append(
                    r.diag(f"algo.{k} has no effect: {entry.why}", f"remove algo.{k}, or {entry.use}", f"algo.{k}")
                )
    return out
