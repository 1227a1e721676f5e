"""The learner's threads on a block it shares with the collector: all of it while the collector
waits, as many as it has CPUs of its own while the collector steps."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from unilab.records.progress import Progress
from unilab.run.offpolicy import LearnerThreads


@pytest.fixture
def restored() -> Iterator[None]:
    cpus, threads = os.sched_getaffinity(0), torch.get_num_threads()
    yield
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(threads)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to share")
def test_the_learner_takes_the_collectors_cpu_only_while_the_collector_waits(restored: None) -> None:
    a, b = sorted(os.sched_getaffinity(0))[:2]
    t = LearnerThreads(2, [a, b], [b])
    prog = Progress()
    t.set(False, prog)  # the collector is stepping the physics on b
    assert torch.get_num_threads() == 1
    t.set(True, prog)  # it waits for its action: b is free
    assert torch.get_num_threads() == 2 and prog.updates_on_shared_cpus == 1
    t.set(False, prog)
    assert torch.get_num_threads() == 1 and prog.updates_on_shared_cpus == 1


def test_a_learner_on_cpus_of_its_own_is_never_narrowed() -> None:
    t = LearnerThreads(1, [0], [1])
    assert not t.shared
