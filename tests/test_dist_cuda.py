"""`GradSync.sync` on CUDA: no host synchronisation, and capturable in a CUDA graph (needs an NVIDIA GPU).

One rank with NCCL (world size 1) is enough to show both: the collective is a real NCCL all-reduce,
and the test is about what the host does around it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from unilab.dist import GradSync

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs a CUDA GPU and NCCL"
    ),
]


@pytest.fixture
def nccl_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # As the plan sets it for captured collectives (PyTorch's CUDA graph notes): NCCL's watchdog
    # must not poll events from inside a capture.
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev)
    yield dev
    dist.destroy_process_group()


def test_sync_needs_no_host_sync_and_replays_in_a_cuda_graph(nccl_rank: torch.device) -> None:
    dev = nccl_rank
    params = [torch.zeros(n, device=dev, requires_grad=True) for n in (4096, 100)]
    for p in params:
        p.grad = torch.zeros_like(p)
    sync = GradSync({"g": params}, "bfloat16")
    ok = torch.ones((), dtype=torch.bool, device=dev)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        sync.sync("g", ok)  # warm-up: creates the NCCL communicator outside capture
        torch.cuda.set_sync_debug_mode("error")  # any host sync inside `sync` raises
        try:
            sync.sync("g", ok)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # as graph_support captures
        verdict = sync.sync("g", ok)
    for value, flag in ((3.0, True), (float("nan"), False), (5.0, True)):
        params[0].grad.fill_(value)  # type: ignore[union-attr]
        params[1].grad.fill_(1.0)  # type: ignore[union-attr]
        ok.fill_(flag)
        graph.replay()
        torch.cuda.synchronize()
        assert bool(verdict) is flag
        want = value if flag else 0.0  # an invalid rank contributes zeros
        assert torch.equal(params[0].grad, torch.full((4096,), want, device=dev))
