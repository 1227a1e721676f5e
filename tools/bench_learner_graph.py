"""Learner updates/s, eager against the whole-cycle CUDA graph (`unilab.learn.graph`), measured
side by side in one run, at the shipped SAC and FlashSAC configs.

    python tools/bench_learner_graph.py [--updates 300] [--device cuda:0]

On a CPU (no CUDA) it compares eager with the eager twin, which measures the runner's own host
overhead (static-buffer copy, identity check), not a graph gain. Last line:
`learner_graph_vs_eager=<graph updates/s / eager updates/s>` for the first algo.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from unilab.algos.common import make_learner
from unilab.learn.graph import LearnerGraph
from unilab.learn.replay import Batch
from unilab.spec.load import load_spec

ROOT = Path(__file__).resolve().parent.parent
SPECS = {"sac": ROOT / "specs/g1.toml", "flashsac": ROOT / "specs/g1_motion_tracking.toml"}
OBS, ACT = 99, 29


def _batch(b: int, dev: torch.device) -> Batch:
    return Batch(
        obs=torch.randn(b, OBS, device=dev),
        action=torch.rand(b, ACT, device=dev) * 2 - 1,
        reward=torch.randn(b, device=dev),
        next_obs=torch.randn(b, OBS, device=dev),
        discount=torch.full((b,), 0.99, device=dev),
    )


def _rate(step: object, batches: list[Batch], dev: torch.device) -> float:
    for b in batches[:20]:  # warm-up and capture happen here, outside the timed window
        step(b)  # type: ignore[operator]
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for b in batches:
        step(b)  # type: ignore[operator]
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return len(batches) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved eager/graph rounds")
    args = ap.parse_args()
    dev = torch.device(args.device)
    mode = "cuda_graph" if dev.type == "cuda" else "eager_twin"
    ratios: dict[str, float] = {}
    for algo_name, path in SPECS.items():
        algo = load_spec(path).spec.algo
        pool = [_batch(algo.batch_size, dev) for _ in range(8)]
        batches = [pool[i % len(pool)] for i in range(args.updates)]
        eager = make_learner(algo, OBS, ACT, dev, seed=0)
        graphed = make_learner(algo, OBS, ACT, dev, seed=0)
        runner = LearnerGraph(graphed, graphed.update, batch_size=algo.batch_size, mode=mode, warmup=3)
        e_rates, g_rates = [], []
        for _ in range(args.repeats):  # interleaved: the machine's drift hits both arms alike
            e_rates.append(_rate(eager.update, batches, dev))
            g_rates.append(_rate(runner, batches, dev))
        e, g = sorted(e_rates)[len(e_rates) // 2], sorted(g_rates)[len(g_rates) // 2]
        ratios[algo_name] = g / e
        print(
            f"{algo_name:9s} batch {algo.batch_size:5d}  eager {e:9.1f} updates/s   {mode} {g:9.1f} updates/s"
            f"   ratio {g / e:5.2f}   captures {runner.stats.captures} replays {runner.stats.replays}"
        )
    print(f"device={dev} mode={mode} " + " ".join(f"{k}={v:.3f}" for k, v in ratios.items()))
    print(f"learner_graph_vs_eager={ratios['sac']:.3f}")


if __name__ == "__main__":
    main()
