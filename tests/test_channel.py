"""The collector's shared counters read as of one sync, even while the collector is updating them."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable

import torch

from unilab.collect import channel as ch


def _writer(bufs: ch.SharedBuffers, syncs: int, started: mp.Event) -> None:
    # Every sync completes one episode of return 1 and length 1 that terminated, with reward terms
    # 2 and 3: a consistent read has episodes == return == length == terminated == terms / 2 == terms / 3.
    terms = bufs.episode_terms.numpy()
    started.set()
    for _ in range(syncs):
        ch.publish_sync(bufs.stats, terms, 4, [1.0, 1.0, 1.0, 1.0, 2.0, 3.0], 0)


def _read_while_writing(
    bufs: ch.SharedBuffers, writer: Callable[..., None], writes: int, check: Callable[[], None]
) -> int:
    """Run `writer(bufs, writes, started)` in a spawned process and `check()` reads until it ends;
    the number of reads."""
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    proc = ctx.Process(target=writer, args=(bufs, writes, started))
    proc.start()
    try:
        started.wait(timeout=60)
        reads = 0
        while proc.is_alive() or reads == 0:
            check()
            reads += 1
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == 0
    return reads


def test_counters_never_pair_two_syncs() -> None:
    bufs = ch.SharedBuffers.allocate(4, 3, 1, 2)

    def check() -> None:
        stats, terms = ch.read_counters(bufs)
        n = stats[ch.STAT_EPISODES]
        assert stats[ch.STAT_SEQ] % 2 == 0
        assert [stats[ch.STAT_SYNCS], stats[ch.STAT_RETURN_SUM], stats[ch.STAT_LENGTH_SUM]] == [n, n, n]
        assert stats[ch.STAT_ENV_STEPS] == 4 * n and terms == [n, 2 * n, 3 * n], (stats, terms)

    assert _read_while_writing(bufs, _writer, 50_000, check) > 10
    assert ch.read_counters(bufs)[0][ch.STAT_EPISODES] == 50_000


def _health_writer(bufs: ch.SharedBuffers, publications: int, started: mp.Event) -> None:
    # Every publication covers 4 env steps with sums 1 and 2: a consistent read has health == [4n, n, 2n].
    health = bufs.health.numpy()
    started.set()
    for _ in range(publications):
        ch.publish_health(bufs.stats, health, [4.0, 1.0, 2.0])


def test_learning_health_sums_are_read_with_the_env_steps_they_cover() -> None:
    bufs = ch.SharedBuffers.allocate(4, 3, 1, 0, num_health=2)

    def check() -> None:
        steps, *sums = ch.read_health(bufs)
        assert sums == [steps / 4, steps / 2], (steps, sums)

    _read_while_writing(bufs, _health_writer, 20_000, check)
    assert ch.read_health(bufs) == [80_000.0, 20_000.0, 40_000.0]


def test_a_collector_that_died_mid_update_leaves_the_last_copy() -> None:
    bufs = ch.SharedBuffers.allocate(4, 3, 1, 0)
    bufs.stats[ch.STAT_SEQ] = 1  # odd for ever
    bufs.stats[ch.STAT_EPISODES] = 5
    t0 = time.perf_counter()
    stats, _ = ch.read_counters(bufs)
    assert stats[ch.STAT_EPISODES] == 5 and time.perf_counter() - t0 < 5
    assert torch.equal(bufs.stats[ch.STAT_SEQ], torch.tensor(1.0, dtype=torch.float64))


def _hello_then_fail(conn: object) -> None:
    buf = torch.zeros(4).share_memory_()  # its file descriptor is fetched from this process on unpickling
    conn.send(("hello", buf))  # type: ignore[attr-defined]
    conn.send(("error", ("rank0.collector", "ValueError: reset failed", "", "")))  # type: ignore[attr-defined]


def test_a_collector_that_fails_right_after_its_hello_is_reported_with_its_own_error() -> None:
    """Reading the Hello fetches its shared buffers from the collector; if that has already exited
    (it failed just after sending it), its own error report, next in the pipe, is what is shown."""
    import pytest

    from unilab.collect.collector_client import CollectorClient, RunFailed

    ctx = mp.get_context("spawn")
    read, write = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_hello_then_fail, args=(write,))
    proc.start()
    write.close()
    proc.join(timeout=60)  # gone before its Hello is read
    client = CollectorClient.__new__(CollectorClient)
    client.where, client.proc, client.hello, client._messages_closed, client._messages = (
        "rank0.collector",
        proc,
        None,
        False,
        read,
    )
    with pytest.raises(RunFailed, match="reset failed"):
        client._receive(5.0)
