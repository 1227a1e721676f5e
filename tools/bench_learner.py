"""Learner updates/s on CPU: `sac` and `flashsac` at their default configs and batch sizes, side by side.

    python tools/bench_learner.py                 # about 3 minutes at most (--budget)
    python tools/bench_learner.py --budget 900    # room for the torch.compile cells too

Sizes are g1_walk's (obs_dim 99, act_dim 29). Cells: eager fp32, eager bf16 autocast,
torch.compile (mode "default" and "max-autotune-no-cudagraphs"), each at 1 and 2 intra-op threads.
Every cell runs in its own subprocess (its own thread settings and compile state, a hard timeout).
A cell samples its minibatches from a replay buffer of random transitions, warms up (compiles)
over one full actor cadence, then counts updates in a short window. Cells that do not fit the
time budget are listed as not run, never silently dropped. bf16 cells are skipped, with the
measured reason, when a bf16 matrix product is slower than fp32 on this CPU (no AVX512-BF16/AMX).
The CPU is usually shared: treat figures as indicative and compare cells of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

MODES = ("eager", "default", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class Cell:
    algo: str
    mode: str  # eager or a torch.compile mode
    dtype: str  # fp32 or bf16
    threads: int

    @property
    def label(self) -> str:
        mode = "eager" if self.mode == "eager" else f"compile:{self.mode}"
        return f"{mode} {self.dtype} threads={self.threads}"


def run_cell(cell: Cell, window: float, obs_dim: int, act_dim: int, count_flops: bool) -> dict[str, float]:
    """Child process body: build the learner, warm up, count updates in `window` seconds."""
    import torch

    from unilab.learn.flashsac import FlashSacLearner
    from unilab.learn.replay import ReplayBuffer
    from unilab.learn.sac import SacLearner
    from unilab.spec.models import FlashSacSpec, SacSpec

    torch.set_num_threads(cell.threads)
    kw = {
        "autocast_dtype": torch.bfloat16 if cell.dtype == "bf16" else None,
        "compile_mode": None if cell.mode == "eager" else cell.mode,
    }
    if cell.algo == "sac":
        cfg_s = SacSpec(name="sac")
        learner: SacLearner | FlashSacLearner = SacLearner(obs_dim, act_dim, cfg_s, seed=0, **kw)  # type: ignore[arg-type]
        batch_size, n_step, every = cfg_s.batch_size, 1, cfg_s.actor_update_every
    else:
        cfg_f = FlashSacSpec(name="flashsac")
        learner = FlashSacLearner(obs_dim, act_dim, cfg_f, seed=0, **kw)  # type: ignore[arg-type]
        batch_size, n_step, every = cfg_f.batch_size, cfg_f.n_step, cfg_f.actor_update_every
    envs = 256
    rb = ReplayBuffer(max(4 * batch_size, 8192), obs_dim, act_dim, envs, n_step=n_step)
    g = torch.Generator().manual_seed(0)
    for _ in range(rb.capacity // envs + n_step):
        rb.add_batch(
            torch.randn(envs, obs_dim, generator=g),
            torch.rand(envs, act_dim, generator=g) * 2 - 1,
            torch.randn(envs, generator=g),
            torch.randn(envs, obs_dim, generator=g),
            torch.rand(envs, generator=g) < 0.01,
            torch.rand(envs, generator=g) < 0.01,
        )
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    for _ in range(every):  # one full cadence: both update shapes are built (compiled) here
        m = learner.update(rb.sample(batch_size, g))
    float(m["critic_loss"])  # the only host read, outside the timed window
    out["warmup_s"] = time.perf_counter() - t0
    if count_flops:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as fc:
            for _ in range(every):
                learner.update(rb.sample(batch_size, g))
        out["gflop_per_update"] = fc.get_total_flops() / every / 1e9
    n = 0
    t0 = time.perf_counter()
    while n < every or time.perf_counter() - t0 < window:
        m = learner.update(rb.sample(batch_size, g))
        n += 1
    finite = bool(m["critic_finite"])
    dt = time.perf_counter() - t0
    out.update({"updates": n, "seconds": dt, "updates_per_s": n / dt, "finite": float(finite)})
    return out


def bf16_slowdown() -> float:
    """Time of a 1024x768 @ 768x768 product in bf16 over fp32 on one thread (>1: bf16 is slower)."""
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(1024, 768), torch.randn(768, 768)
    ab, bb = a.bfloat16(), b.bfloat16()

    def best(f: object, reps: int) -> float:
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            f()  # type: ignore[operator]
            ts.append(time.perf_counter() - t)
        return min(ts)

    fp32 = best(lambda: a @ b, 5)
    bf16 = best(lambda: ab @ bb, 2)
    return bf16 / fp32


def cell_order(algos: list[str], threads: list[int], modes: list[str]) -> list[Cell]:
    """Cheap, decisive cells first, so a tight budget still compares what matters most."""
    order: list[Cell] = []
    if "eager" in modes:
        for dtype in ("fp32", "bf16"):
            order += [Cell(a, "eager", dtype, t) for a in algos for t in threads]
    compiled = [m for m in MODES[1:] if m in modes]
    for mode in compiled:
        order += [Cell(a, mode, "fp32", threads[0]) for a in algos]
    for mode in compiled:
        order += [Cell(a, mode, "fp32", t) for a in algos for t in threads[1:]]
    return order


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="sac,flashsac")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--modes", default=",".join(MODES), help="subset of: " + ", ".join(MODES))
    p.add_argument("--window", type=float, default=3.0, help="seconds counted per cell after warm-up")
    p.add_argument("--budget", type=float, default=170.0, help="seconds for all cells together")
    p.add_argument("--obs-dim", type=int, default=99)
    p.add_argument("--act-dim", type=int, default=29)
    p.add_argument("--force-bf16", action="store_true", help="run bf16 cells even where bf16 is slower")
    p.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell, print JSON
    p.add_argument("--count-flops", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.cell:
        algo, mode, dtype, threads = args.cell.split("|")
        res = run_cell(Cell(algo, mode, dtype, int(threads)), args.window, args.obs_dim, args.act_dim, args.count_flops)
        print("RESULT " + json.dumps(res))
        return

    start = time.perf_counter()
    algos = args.algos.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    ratio = bf16_slowdown()
    skip_bf16 = ratio > 1.0 and not args.force_bf16
    print(f"# cpu: {os.cpu_count()} logical CPUs; bf16/fp32 matmul time ratio on 1 thread: {ratio:.2f}", flush=True)
    rows: list[tuple[Cell, str, dict[str, float]]] = []
    flops_done: set[str] = set()
    for cell in cell_order(algos, threads, args.modes.split(",")):
        if cell.dtype == "bf16" and skip_bf16:
            rows.append((cell, f"skipped: bf16 matmul {ratio:.0f}x slower than fp32 here", {}))
            continue
        left = args.budget - (time.perf_counter() - start)
        if left < 10:
            rows.append((cell, "not run: over --budget", {}))
            continue
        env = dict(os.environ, OMP_NUM_THREADS=str(cell.threads), MKL_NUM_THREADS=str(cell.threads))
        cmd = [sys.executable, __file__, "--cell", f"{cell.algo}|{cell.mode}|{cell.dtype}|{cell.threads}"]
        cmd += ["--window", str(args.window), "--obs-dim", str(args.obs_dim), "--act-dim", str(args.act_dim)]
        if cell.mode == "eager" and cell.dtype == "fp32" and cell.algo not in flops_done:
            cmd.append("--count-flops")
            flops_done.add(cell.algo)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            rows.append((cell, f"timeout: over the {left:.0f}s left of --budget", {}))
            continue
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not line:
            err = (proc.stderr.strip().splitlines() or ["?"])[-1][:70]
            rows.append((cell, f"failed: {err}", {}))
            continue
        res = json.loads(line[0][7:])
        rows.append((cell, "ok" if res["finite"] else "ok (non-finite loss)", res))
        print(f"# {cell.algo:8s} {cell.label:45s} {res['updates_per_s']:8.2f} updates/s", flush=True)

    gflop = {c.algo: r["gflop_per_update"] for c, _, r in rows if "gflop_per_update" in r}
    print()
    hdr = f"{'algo':9s}{'variant':48s}{'updates/s':>10s}{'GFLOP/s':>9s}{'warmup s':>10s}  status"
    print(hdr)
    print("-" * len(hdr))
    for cell, status, r in rows:
        ups = f"{r['updates_per_s']:10.2f}" if r else f"{'-':>10s}"
        gfs = f"{r['updates_per_s'] * gflop[cell.algo]:9.1f}" if r and cell.algo in gflop else f"{'-':>9s}"
        warm = f"{r['warmup_s']:10.1f}" if r else f"{'-':>10s}"
        print(f"{cell.algo:9s}{cell.label:48s}{ups}{gfs}{warm}  {status}")
    for a in algos:
        if a in gflop:
            print(f"# {a}: {gflop[a]:.2f} GFLOP per update (FlopCounterMode, matmul-class ops)")
    best = []
    for a in algos:
        ok = [(r["updates_per_s"], c) for c, _, r in rows if c.algo == a and r]
        if ok:
            ups, c = max(ok, key=lambda x: x[0])
            best.append(f"{a} = {c.label} ({ups:.2f} updates/s)")
        else:
            best.append(f"{a} = none measured")
    print(f"# total {time.perf_counter() - start:.0f}s")
    print("fastest CPU choice: " + "; ".join(best))


if __name__ == "__main__":
    main()
