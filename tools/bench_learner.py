"""Learner updates/s on this CPU: unilab's update, as its plan configures it here, against a plain
eager reference at the same networks, timed side by side in one process.

    python tools/bench_learner.py                       # sac and flashsac, about 4 minutes
    python tools/bench_learner.py --algos sac --rounds 3 --window 3

Configs (g1_walk's sizes: 99 observations, 29 actions):
- sac: the matched config of the CPU learner comparison (UniLab 1.5.2's CPU path): batch 256, twin
  C51 critic (101 atoms) [768, 384, 192] with LayerNorm, actor [512, 256, 128], SiLU, the actor
  and temperature updated every 4 critic updates;
- flashsac: the spec defaults (batch 2048, width 256, 2 inverted-residual blocks x4, 101 atoms,
  actor every 2 critic updates).
Arms: the CleanRL-style reference (tools/reference_learners.py: nn.Sequential MLPs, two separate Q
networks, torch.optim.Adam, float32, no compile) on 1 thread, the learner thread of the matched
comparison, and on unilab's thread count; unilab's learner with the precision and torch_threads
that `unilab plan` resolves for specs/g1.toml with the config above on this host, and the same in
float32. Every arm samples its minibatches from one replay buffer of random transitions. Rounds
interleave the arms (shared CPUs are noisy) and each figure is the median over rounds. The process
takes the allocator setting a rank's learner process takes (unilab.run.cpu_tuning); it is
process-wide, so the reference runs with it too.

`--main-job` times the main job's own learner instead (specs/g1.toml as it is: its networks, batch,
observation and action sizes, the actor's columns) in float32 and in bfloat16 at the plan's
threads, side by side, and prints `main_job: bfloat16_vs_float32=<ratio> planned=<precision>`:
whether the plan's precision is the faster one at these sizes on this CPU.

Last lines, per algorithm:
    <algo>: learner_vs_reference=<planned unilab / reference, 1 thread> same_threads=<... / reference, same threads>
Targets: sac >= 3.0 on a CPU with AMX, >= 2.0 on one with AVX512-BF16, >= 1.5 on AVX2 only; flashsac >= 2.0.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
OBS_DIM, ACT_DIM = 99, 29
SAC_MATCHED = (
    'algo={name="sac", batch_size=256, updates_per_step=8.0, actor_hidden_dims=[512, 256, 128], '
    'critic_hidden_dims=[768, 384, 192], activation="silu", critic="c51", layer_norm=true, actor_update_every=4}'
)
FLASHSAC_DEFAULTS = 'algo={name="flashsac"}'
CONFIGS = {"sac": SAC_MATCHED, "flashsac": FLASHSAC_DEFAULTS}


def cpu_line() -> str:
    from unilab.host.probe import probe_host

    cpu = probe_host().cpu
    feats = " ".join(cpu.features) if cpu.features is not None else "not readable"
    cores = f"{len(cpu.cores)} physical cores" if cpu.cores is not None else "cores not readable"
    return f"# cpu: {cpu.model}; {len(cpu.affinity)} CPUs, {cores}; features: {feats}"


def planned(algo_set: str) -> Any:
    """The plan of specs/g1.toml with `algo_set` on this host."""
    from unilab.host.probe import probe_host
    from unilab.plan.compile import compile_plan
    from unilab.spec.load import load_spec

    loaded = load_spec(ROOT / "specs" / "g1.toml", [algo_set])
    return compile_plan(loaded.spec, probe_host(), loaded.spec_dir)


@dataclass
class Arm:
    label: str
    threads: int
    update: Callable[[], Any]
    cadence: int
    rates: list[float] = field(default_factory=list)


def replay(batch_size: int, n_step: int, obs_dim: int = OBS_DIM, act_dim: int = ACT_DIM) -> Callable[[], Any]:
    """Minibatches of ``batch_size`` from a replay buffer full of random transitions."""
    from unilab.learn.replay import ReplayBuffer

    envs = 256
    rb = ReplayBuffer(max(4 * batch_size, 8192), obs_dim, act_dim, envs, n_step=n_step)
    g = torch.Generator().manual_seed(0)
    for _ in range(rb.capacity // envs + n_step):
        rb.add_batch(
            torch.randn(envs, obs_dim, generator=g),
            torch.rand(envs, act_dim, generator=g) * 2 - 1,
            torch.randn(envs, generator=g) * 0.1,
            torch.randn(envs, obs_dim, generator=g),
            torch.rand(envs, generator=g) < 0.01,
            torch.rand(envs, generator=g) < 0.01,
        )
    return lambda: rb.sample(batch_size, g)


def arms_for(algo: str) -> tuple[list[Arm], Any, str]:
    from reference_learners import ReferenceFlashSac, ReferenceSac  # beside this file

    from unilab.algos.common import make_learner, planned_precision, replay_n_step

    plan = planned(CONFIGS[algo])
    cfg = plan.algo
    precision, threads = planned_precision(plan), plan.ranks[0].torch_threads
    sample = replay(cfg.batch_size, replay_n_step(cfg))
    torch.manual_seed(0)
    if algo == "sac":
        ref: Any = ReferenceSac(
            OBS_DIM,
            ACT_DIM,
            tuple(cfg.actor_hidden_dims),
            tuple(cfg.critic_hidden_dims),
            cfg.activation,
            cfg.layer_norm,
            cfg.num_atoms,
            cfg.v_min,
            cfg.v_max,
            cfg.actor_update_every,
        )
    else:
        ref = ReferenceFlashSac(
            OBS_DIM, ACT_DIM, cfg.critic_hidden_dims[0], cfg.num_blocks, cfg.expansion, cfg.num_atoms
        )

    def ref_update() -> Any:
        b = sample()
        return ref.update(b.obs, b.action, b.reward, b.next_obs, b.discount)

    def unilab(prec: str) -> Callable[[], Any]:
        learner = make_learner(cfg, OBS_DIM, ACT_DIM, torch.device("cpu"), 0, prec)
        return lambda: learner.update(sample())

    every = cfg.actor_update_every
    arms = [Arm("reference fp32", 1, ref_update, every)]
    if threads != 1:
        arms.append(Arm("reference fp32", threads, ref_update, every))
    arms.append(Arm("unilab float32", threads, unilab("float32"), every))
    if precision != "float32":
        arms.append(Arm(f"unilab {precision} (planned)", threads, unilab(precision), every))
        if threads != 1:
            arms.append(Arm(f"unilab {precision}", 1, unilab(precision), every))
    else:
        arms[-1].label += " (planned)"
    return arms, plan, precision


def reference_gflop(algo: str, arm: Arm) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        for _ in range(arm.cadence):
            arm.update()
    return fc.get_total_flops() / arm.cadence / 1e9


def time_window(arm: Arm, seconds: float) -> float:
    torch.set_num_threads(arm.threads)
    n, t0 = 0, time.perf_counter()
    while n < arm.cadence or time.perf_counter() - t0 < seconds:
        out = arm.update()
        n += 1
    float(out["critic_loss"] if isinstance(out, dict) else out)  # the one host read, after the window
    return n / (time.perf_counter() - t0)


def main_job(rounds: int, window: float) -> None:
    """The main job's learner in float32 and bfloat16, at the plan's threads, on its own sizes."""
    from unilab.algos.common import actor_columns, make_learner, planned_precision, replay_n_step
    from unilab.tasks.registry import task_def

    plan = planned("run.seed=0")  # the spec as it is
    cfg, task = plan.algo, plan.task
    d = task_def(task)
    dims = {"gait_phase": 2, "joint_pos_rel": 29, "joint_vel_rel": 29}
    act_dim = len(d.action_joints(task) or ()) or 29
    terms = [(n, act_dim if n == "last_action" else dims.get(n, 3)) for n in d.observations(task)]
    obs_dim = sum(w for _, w in terms)
    cols = actor_columns(task, terms)
    sample = replay(cfg.batch_size, replay_n_step(cfg), obs_dim, act_dim)
    threads = plan.ranks[0].torch_threads
    arms = []
    for prec in ("float32", "bfloat16"):
        learner = make_learner(cfg, obs_dim, act_dim, torch.device("cpu"), 0, prec, cols)
        arms.append(Arm(prec, threads, lambda lr=learner: lr.update(sample()), 1))
    print(
        f"# main job: {obs_dim} observations ({len(cols or range(obs_dim))} the actor's), {act_dim} actions, "
        f"batch {cfg.batch_size}, actor {list(cfg.actor_hidden_dims)}, critic {list(cfg.critic_hidden_dims)}; "
        f"plan: {planned_precision(plan)} on {threads} threads",
        flush=True,
    )
    for arm in arms:
        torch.set_num_threads(arm.threads)
        for _ in range(10):
            arm.update()
    for r in range(rounds):
        for arm in arms:
            arm.rates.append(time_window(arm, window))
        print(f"#   round {r + 1}: " + ", ".join(f"{a.label} {a.rates[-1]:.1f}/s" for a in arms), flush=True)
    fp32, bf16 = (statistics.median(a.rates) for a in arms)
    print(f"float32 {fp32:.1f} updates/s, bfloat16 {bf16:.1f} updates/s (medians)")
    print(f"main_job: bfloat16_vs_float32={bf16 / fp32:.2f} planned={planned_precision(plan)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="sac,flashsac")
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per arm (median)")
    p.add_argument("--window", type=float, default=4.0, help="seconds per arm per round")
    p.add_argument("--main-job", action="store_true", help="time specs/g1.toml's own learner, float32 against bfloat16")
    args = p.parse_args()
    if args.main_job:
        from unilab.run.cpu_tuning import keep_freed_memory

        keep_freed_memory()
        print(cpu_line(), flush=True)
        main_job(args.rounds, args.window)
        return

    from unilab.run.cpu_tuning import keep_freed_memory

    # What a rank's learner process does first; process-wide, so the reference runs with it too.
    allocator = keep_freed_memory()
    print(cpu_line(), flush=True)
    print(f"# torch {torch.__version__}; allocator: {allocator}; rounds {args.rounds} x {args.window:g}s per arm")
    results: list[str] = []
    for algo in args.algos.split(","):
        arms, plan, precision = arms_for(algo)
        lp = plan.learner
        print(f"# {algo}: plan precision {precision} ({lp.precision.reason})", flush=True)
        print(f"# {algo}: plan torch_threads {plan.ranks[0].torch_threads} ({lp.threads_reason})", flush=True)
        for arm in arms:  # warm-up: one full actor cadence builds both update shapes
            torch.set_num_threads(arm.threads)
            for _ in range(2 * arm.cadence):
                arm.update()
        torch.set_num_threads(1)
        gflop = reference_gflop(algo, arms[0])
        for r in range(args.rounds):
            for arm in arms:
                arm.rates.append(time_window(arm, args.window))
            print(f"#   round {r + 1}: " + ", ".join(f"{a.label}@{a.threads}t {a.rates[-1]:.1f}/s" for a in arms))
        med = {(a.label, a.threads): statistics.median(a.rates) for a in arms}
        print(f"\n{algo}: {gflop:.2f} GFLOP per update (FlopCounterMode, reference)")
        print(f"{'arm':34s}{'threads':>8s}{'updates/s':>11s}{'ms/update':>11s}{'GFLOP/s':>9s}   rounds (updates/s)")
        for a in arms:
            m = med[(a.label, a.threads)]
            rates = " ".join(f"{x:.1f}" for x in a.rates)
            print(f"{a.label:34s}{a.threads:8d}{m:11.2f}{1000 / m:11.1f}{m * gflop:9.0f}   {rates}")
        ref1 = med[("reference fp32", 1)]
        planned_arm = next(a for a in arms if a.label.endswith("(planned)"))
        mine = med[(planned_arm.label, planned_arm.threads)]
        same = med[("reference fp32", planned_arm.threads)]
        results.append(f"{algo}: learner_vs_reference={mine / ref1:.2f} same_threads={mine / same:.2f}")
        print(flush=True)
    for line in results:
        print(line)


if __name__ == "__main__":
    main()
