"""Round trip of the learner <-> collector handshake: the token pipes unilab uses against the
multiprocessing semaphores it used before, measured side by side in one run.

    python tools/bench_channel.py [--round-trips 20000]

Each round trip is what one sync costs in handshaking (the learner posts "step", the collector
answers "observation ready"), with the learner waiting the way unilab.collect.collector_client waits.
Pipes leave nothing in /dev/shm however the processes end; this prints what that costs per sync.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _semaphore_peer(go: object, done: object, n: int) -> None:
    for _ in range(n):
        go.acquire()  # type: ignore[attr-defined]
        done.release()  # type: ignore[attr-defined]


def _pipe_peer(go: object, done: object, n: int) -> None:
    rf, wf = go.fileno(), done.fileno()  # type: ignore[attr-defined]
    for _ in range(n):
        os.read(rf, 1)
        os.write(wf, b"o")


def _semaphores(n: int) -> float:
    ctx = mp.get_context("spawn")
    go, done = ctx.Semaphore(0), ctx.Semaphore(0)
    peer = ctx.Process(target=_semaphore_peer, args=(go, done, n + 1))
    peer.start()
    go.release()
    done.acquire()  # the peer is up
    t0 = time.perf_counter()
    for _ in range(n):
        go.release()
        while not done.acquire(timeout=0.2):
            pass
    dt = time.perf_counter() - t0
    peer.join()
    return dt / n


def _pipes(n: int) -> float:
    from unilab.collect.channel import TokenWait

    ctx = mp.get_context("spawn")
    go_r, go_w = ctx.Pipe(duplex=False)
    done_r, done_w = ctx.Pipe(duplex=False)
    peer = ctx.Process(target=_pipe_peer, args=(go_r, done_w, n + 1))
    peer.start()
    go, done = go_w.fileno(), done_r.fileno()
    wait = TokenWait(done)
    os.write(go, b"s")
    os.read(done, 1)  # the peer is up
    t0 = time.perf_counter()
    for _ in range(n):
        os.write(go, b"s")
        while not wait.ready(0.2):
            pass
        os.read(done, 1)
    dt = time.perf_counter() - t0
    peer.join()
    return dt / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--round-trips", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3, help="alternating measurements of each; medians are printed")
    args = p.parse_args(argv)
    sem, pipe = [], []
    for _ in range(args.repeats):
        sem.append(_semaphores(args.round_trips))
        pipe.append(_pipes(args.round_trips))
    s, q = statistics.median(sem), statistics.median(pipe)
    print(f"round trip: semaphores {s * 1e6:.1f} us, pipes {q * 1e6:.1f} us (median of {args.repeats})")
    print(f"pipe_minus_semaphore_us_per_sync={(q - s) * 1e6:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
