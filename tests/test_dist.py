"""Data-parallel gradient sync (`unilab.dist`) over real torch.distributed gloo process groups on CPU.

Two kinds of tests:
- in-process, one rank (a world-1 gloo group): layout, threshold, errors, digest; fast;
- two spawned ranks kept alive for the module (`RankPool`: starting two torch processes costs
  several seconds on the 2-core machine, so they are started once and run named scenarios).
  Each scenario runs on both ranks and returns plain data (numpy arrays, floats, digests);
  the assertions are made here, in the test process.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import queue
import re
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from unilab.algos.flashsac.learner import FlashSacLearner
from unilab.algos.flashsac.spec import FlashSacSpec
from unilab.algos.sac.learner import SacLearner
from unilab.algos.sac.spec import SacSpec
from unilab.dist import BufferSync, GradSync, broadcast_parameters, param_digest
from unilab.errors import UnilabError
from unilab.learn.replay import Batch
from unilab.plan.models import WirePlan

WORLD = 2
OBS_DIM, ACT_DIM = 99, 29  # G1 walk: 99 observations, 29 joints
TINY = 2.0**-133  # the smallest positive (subnormal) bfloat16


# ====================================================================== helpers shared by both kinds
def _batch(seed: int, n: int, *, nan_reward: bool = False) -> Batch:
    g = torch.Generator().manual_seed(seed)
    reward = torch.randn(n, generator=g)
    if nan_reward:
        reward[3] = float("nan")
    return Batch(
        obs=torch.randn(n, OBS_DIM, generator=g),
        action=torch.rand(n, ACT_DIM, generator=g) * 2 - 1,
        reward=reward,
        next_obs=torch.randn(n, OBS_DIM, generator=g),
        discount=torch.full((n,), 0.99),
    )


def _learner_state(learner: SacLearner) -> list[torch.Tensor | torch.nn.Module]:
    """Everything that must agree across ranks: networks, temperature and optimizer moments."""
    opts = (learner.critic_opt, learner.actor_opt, learner.alpha_opt)
    moments = [t for o in opts for t in (*o.exp_avg, *o.exp_avg_sq, o.step_count)]
    return [learner.actor, learner.critic, learner.critic_target, learner.log_alpha, *moments]


def _critic_state(learner: SacLearner) -> list[torch.Tensor | torch.nn.Module]:
    o = learner.critic_opt
    return [learner.critic, learner.critic_target, *o.exp_avg, *o.exp_avg_sq, o.step_count]


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in params]  # type: ignore[union-attr]


def _set_grads(params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
    for p, g in zip(params, grads, strict=True):
        p.grad.copy_(g)  # type: ignore[union-attr]


def _np(ts: list[torch.Tensor]) -> list[np.ndarray]:
    return [t.detach().float().numpy().copy() if t.dtype == torch.bfloat16 else t.detach().numpy().copy() for t in ts]


def _synced_update(learner: SacLearner, sync: GradSync, batch: Batch) -> dict[str, bool]:
    """`SacLearner.update` with the all-reduce between each `*_grads` and `*_step` (as the runtime chains it)."""
    verdicts: dict[str, torch.Tensor] = {}
    m = learner.critic_grads(batch)
    verdicts["critic"] = sync.sync("critic", m["critic_finite"])
    learner.critic_step(verdicts["critic"])
    if (learner.num_critic_updates - 1) % learner.cfg.actor_update_every == 0:
        m = learner.actor_grads(batch)
        verdicts["actor"] = sync.sync("actor", m["actor_finite"])
        learner.actor_step(verdicts["actor"])
        a = learner.alpha_grads(m["entropy"])
        verdicts["alpha"] = sync.sync("alpha", a["alpha_finite"])
        learner.alpha_step(verdicts["alpha"])
    return {k: bool(v) for k, v in verdicts.items()}


# ====================================================================== scenarios (run on every rank)
def sc_mean(rank: int, world: int) -> dict[str, Any]:
    """Arbitrary shapes and dtypes, one `.grad` left None, small buckets: the synced grad is the mean."""
    shapes = [(3, 5), (7,), (), (40, 30), (2, 1, 9)]
    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    params.append(torch.zeros(6, dtype=torch.float64, requires_grad=True))
    g = torch.Generator().manual_seed(100 + rank)
    local = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
    for p, v in zip(params, local, strict=True):
        p.grad = v.clone()
    params[1].grad = None  # counts as zeros
    out: dict[str, Any] = {"local": _np(local)}
    for label, bucket_bytes in (("default", None), ("small_buckets", 64)):
        for p, v in zip(params, local, strict=True):
            p.grad = v.clone()
        params[1].grad = None
        kw = {} if bucket_bytes is None else {"bucket_bytes": bucket_bytes}
        sync = GradSync({"g": params}, "float32", **kw)
        ok = sync.sync("g", torch.tensor(True))
        out[label] = {
            "ok": bool(ok),
            "synced": _np([p.grad for p in params]),  # type: ignore[misc]
            "buckets": sync.counters["g"].buckets,
            "syncs": sync.counters["g"].syncs,
            "wire_bytes": sync.counters["g"].wire_bytes_per_sync,
        }
    return out


def sc_threshold(rank: int, world: int) -> dict[str, Any]:
    """bf16 wire: 1023 elements stay fp32, 1024 go bf16; the average is divided in fp32 after restoring."""
    params = [torch.zeros(n, requires_grad=True) for n in (1023, 1024, 1024, 5)]
    g = torch.Generator().manual_seed(200 + rank)
    local = [torch.randn(p.shape, generator=g) for p in params]
    # params[2]: rank 0 sends 3 * TINY, rank 1 sends 0. The bf16 sum is exactly 3 * TINY; half of it
    # is representable in fp32 but not in bf16 (dividing in bf16 rounds 1.5 * TINY to 2 * TINY).
    local[2] = torch.full((1024,), 3 * TINY if rank == 0 else 0.0)
    res: dict[str, Any] = {"local": _np(local)}
    for wire in ("float32", "bfloat16"):
        for p, v in zip(params, local, strict=True):
            p.grad = v.clone()
        sync = GradSync({"g": params}, wire)
        ok = sync.sync("g", torch.tensor(True))
        res[wire] = {
            "ok": bool(ok),
            "synced": _np([p.grad for p in params]),  # type: ignore[misc]
            "wire_dtypes": [str(d) for d in sync.wire_dtypes("g")],
            "wire_bytes": sync.counters["g"].wire_bytes_per_sync,
        }
    return res


def sc_sac_identical(rank: int, world: int, wire: str, updates: int, precision: str) -> dict[str, Any]:
    """Different init seeds per rank, broadcast, then real SAC updates from different data per rank."""
    from unilab.learn.precision import DTYPES

    cfg = SacSpec(name="sac", critic="c51", layer_norm=True, batch_size=128)
    learner = SacLearner(OBS_DIM, ACT_DIM, cfg, seed=rank, compute_dtype=DTYPES[precision])
    before = param_digest(_learner_state(learner))
    broadcast_parameters([learner.actor, learner.critic, learner.critic_target, learner.log_alpha])
    learner.refresh_working_copies()  # as unilab.run.dp does after its broadcast
    digests = [param_digest(_learner_state(learner))]
    sync = GradSync(learner.optim_groups(), wire)  # type: ignore[arg-type]
    verdicts = []
    for step in range(updates):
        verdicts.append(_synced_update(learner, sync, _batch(1000 * rank + step, cfg.batch_size)))
        digests.append(param_digest(_learner_state(learner)))
    return {"before_broadcast": before, "digests": digests, "verdicts": verdicts, "summary": sync.summary()}


def sc_bf16_error(rank: int, world: int, hidden: tuple[int, ...], critic: str, batch_size: int) -> dict[str, Any]:
    """Relative L2 error of bf16-wire against fp32-wire averages of real SAC critic and actor gradients."""
    cfg = SacSpec(name="sac", critic=critic, layer_norm=True, hidden_dims=hidden, batch_size=batch_size)
    learner = SacLearner(OBS_DIM, ACT_DIM, cfg, seed=0)
    broadcast_parameters([learner.actor, learner.critic, learner.critic_target, learner.log_alpha])
    groups = learner.optim_groups()
    syncs = {w: GradSync(groups, w) for w in ("float32", "bfloat16")}
    for step in range(3):  # move off the initial weights with a few real synced updates
        _synced_update(learner, syncs["float32"], _batch(5000 * rank + step, batch_size))
    batch = _batch(7000 * rank, batch_size)
    out: dict[str, Any] = {}
    for name, make in (("critic", learner.critic_grads), ("actor", learner.actor_grads)):
        make(batch)
        local = _grads(groups[name])
        avg: dict[str, torch.Tensor] = {}
        for w, s in syncs.items():
            _set_grads(groups[name], local)
            s.sync(name, torch.tensor(True))
            avg[w] = torch.cat([p.grad.reshape(-1) for p in groups[name]])  # type: ignore[union-attr]
        err = torch.linalg.vector_norm(avg["bfloat16"] - avg["float32"]) / torch.linalg.vector_norm(avg["float32"])
        out[name] = {
            "rel_err": float(err),
            "bf16_elements": sum(
                p.numel()
                for p, d in zip(groups[name], syncs["bfloat16"].wire_dtypes(name), strict=True)
                if d == torch.bfloat16
            ),
            "elements": sum(p.numel() for p in groups[name]),
            "bytes": {w: s.counters[name].wire_bytes_per_sync for w, s in syncs.items()},
        }
    return out


def sc_nonfinite(rank: int, world: int, wire: str) -> dict[str, Any]:
    """Rank 1's critic loss is NaN on update 0: both ranks skip that critic step; update 1 proceeds."""
    cfg = SacSpec(name="sac", batch_size=64)
    learner = SacLearner(OBS_DIM, ACT_DIM, cfg, seed=3)
    broadcast_parameters([learner.actor, learner.critic, learner.critic_target, learner.log_alpha])
    sync = GradSync(learner.optim_groups(), wire)  # type: ignore[arg-type]
    critic = learner.optim_groups()["critic"]
    out: dict[str, Any] = {"updates": []}
    for step in range(2):
        batch = _batch(300 * rank + step, cfg.batch_size, nan_reward=(step == 0 and rank == 1))
        critic_before, all_before = param_digest(_critic_state(learner)), param_digest(_learner_state(learner))
        m = learner.critic_grads(batch)
        local_ok, local = bool(m["critic_finite"]), _grads(critic)
        ok = sync.sync("critic", m["critic_finite"])
        synced = _grads(critic)
        learner.critic_step(ok)
        critic_after = param_digest(_critic_state(learner))
        m = learner.actor_grads(batch)
        actor_ok = sync.sync("actor", m["actor_finite"])
        learner.actor_step(actor_ok)
        a = learner.alpha_grads(m["entropy"])
        learner.alpha_step(sync.sync("alpha", a["alpha_finite"]))
        out["updates"].append(
            {
                "local_ok": local_ok,
                "global_ok": bool(ok),
                "actor_ok": bool(actor_ok),
                "local": _np(local),
                "synced": _np(synced),
                "synced_finite": all(bool(torch.isfinite(g).all()) for g in synced),
                "critic_unchanged": critic_before == critic_after,
                "all_before": all_before,
                "all_after": param_digest(_learner_state(learner)),
            }
        )
    return out


def sc_nonfinite_grad_ok_flag(rank: int, world: int) -> dict[str, Any]:
    """A finite loss but an inf gradient on rank 1 also fails the global verdict, without poisoning rank 0."""
    params = [torch.zeros(2000, requires_grad=True), torch.zeros(10, requires_grad=True)]
    out: dict[str, Any] = {}
    for wire in ("float32", "bfloat16"):
        params[0].grad = torch.full((2000,), 1.0 + rank)
        params[1].grad = torch.full((10,), 2.0)
        if rank == 1:
            params[0].grad[17] = float("inf")
        sync = GradSync({"g": params}, wire)
        first = sync.sync("g", torch.tensor(True))
        params[0].grad = torch.full((2000,), 1.0 + rank)
        params[1].grad = torch.full((10,), 2.0)
        second = sync.sync("g", torch.tensor(True))
        out[wire] = {"first": bool(first), "second": bool(second), "avg0": float(params[0].grad[0])}  # type: ignore[index]
    return out


def sc_broadcast(rank: int, world: int) -> dict[str, Any]:
    """Parameters, buffers (BatchNorm running stats) and a non-contiguous tensor all take rank 0's values."""
    torch.manual_seed(rank)
    net = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4))
    net(torch.randn(8, 5) + rank)  # rank-specific running statistics
    loose = torch.randn(3, 6).t()  # non-contiguous
    count = broadcast_parameters([net, loose, net[0].weight])
    return {
        "count": count,
        "state": {k: v.numpy().copy() for k, v in net.state_dict().items()},
        "loose": loose.numpy().copy(),
        "digest": param_digest([net, loose]),
    }


def sc_flashsac_identical(rank: int, world: int, buffers: bool, updates: int, precision: str) -> dict[str, Any]:
    """FlashSAC with synced gradients; BatchNorm running statistics averaged by `BufferSync` or left local."""
    from unilab.learn.precision import DTYPES

    cfg = FlashSacSpec(name="flashsac", hidden_dims=(64,), batch_size=64)
    learner = FlashSacLearner(OBS_DIM, ACT_DIM, cfg, seed=rank, compute_dtype=DTYPES[precision])
    nets = [learner.actor, learner.critic, learner.critic_target]
    broadcast_parameters([*nets, learner.log_alpha])
    learner.refresh_working_copies()
    sync = GradSync(learner.optim_groups(), "bfloat16")  # type: ignore[arg-type]
    bufs = BufferSync(nets)
    for step in range(updates):
        batch = _batch(900 * rank + step, cfg.batch_size)
        if learner.num_critic_updates % cfg.actor_update_every == 0:  # FlashSacLearner.update's order
            m = learner.actor_grads(batch)
            learner.actor_step(sync.sync("actor", m["actor_finite"]))
            a = learner.alpha_grads(m["entropy"])
            learner.alpha_step(sync.sync("alpha", a["alpha_finite"]))
        m = learner.critic_grads(batch)
        learner.critic_step(sync.sync("critic", m["critic_finite"]))
        if buffers:
            bufs.sync()
    params = [*[p for g in learner.optim_groups().values() for p in g], *learner.critic_target.parameters()]
    return {
        "params": param_digest(params),
        "buffers": param_digest([b for n in nets for b in n.buffers()]),
        "buffer_syncs": bufs.syncs,
        "buffer_bytes": bufs.wire_bytes_per_sync,
    }


def sc_buffer_repair(rank: int, world: int) -> dict[str, Any]:
    """Buffers are averaged over ranks; a rank with non-finite buffers takes the valid ranks' mean."""
    bn = torch.nn.BatchNorm1d(3)
    bs = BufferSync([bn])
    out: dict[str, Any] = {}
    bn.running_mean.fill_(1.0 + 2 * rank)  # 1 and 3
    bn.running_var.fill_(2.0)
    bs.sync()
    out["mean"] = (bn.running_mean.numpy().copy(), bn.running_var.numpy().copy())
    bn.running_mean.fill_(float("nan") if rank == 1 else 5.0)
    bs.sync()
    out["repaired"] = (bn.running_mean.numpy().copy(), bn.running_var.numpy().copy())
    bn.running_var.fill_(float("nan"))  # no valid rank: everyone keeps its own
    bs.sync()
    out["none_valid"] = bn.running_var.numpy().copy()
    out["num_batches_tracked"] = int(bn.num_batches_tracked)
    return out


def _any_rank(local: bool) -> bool:
    flag = torch.tensor([int(local)])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def sc_graph_twin(rank: int, world: int, fail_rank: int | None, precision: str = "float32") -> dict[str, Any]:
    """The learner graph runner's eager twin with a real all-reduce inside its body, next to plain
    synced updates; with `fail_rank`, that rank's capture fails and every rank must raise."""
    from unilab.learn.graph import LearnerGraph
    from unilab.learn.precision import DTYPES

    cfg = SacSpec(name="sac", hidden_dims=(64, 64), batch_size=64, actor_update_every=2)
    dt = DTYPES[precision]
    eager = SacLearner(OBS_DIM, ACT_DIM, cfg, seed=rank, compute_dtype=dt)
    graphed = SacLearner(OBS_DIM, ACT_DIM, cfg, seed=rank, compute_dtype=dt)
    for lrn in (eager, graphed):
        broadcast_parameters([lrn.actor, lrn.critic, lrn.critic_target, lrn.log_alpha])
        lrn.refresh_working_copies()
    sync_e, sync_g = GradSync(eager.optim_groups(), "float32"), GradSync(graphed.optim_groups(), "float32")
    calls = [0]

    def body(b: Batch) -> dict[str, torch.Tensor]:
        calls[0] += 1
        m = graphed.update(b, sync=sync_g.sync)
        # After the body's collectives: the twin's dry run executes them (a CUDA capture only records
        # them), so a rank failing before them would leave the others waiting in an all-reduce.
        if rank == fail_rank and calls[0] == 3:  # one warm-up per cycle kind, then the first capture
            raise RuntimeError("operation not permitted when stream is capturing")
        return m

    counters = [(c, "syncs") for c in sync_g.counters.values()]
    runner = LearnerGraph(
        graphed, body, batch_size=64, mode="eager_twin", warmup=1, host_counters=counters, agree=_any_rank
    )
    out: dict[str, Any] = {"eager": [], "graphed": [], "error": None}
    try:
        for step in range(6):
            batch = _batch(100 * rank + step, 64)
            eager.update(batch, sync=sync_e.sync)
            runner(batch)
            out["eager"].append(param_digest(_learner_state(eager)))
            out["graphed"].append(param_digest(_learner_state(graphed)))
    except UnilabError as e:
        out["error"] = e.summary
    out["syncs"] = ({k: c.syncs for k, c in sync_e.counters.items()}, {k: c.syncs for k, c in sync_g.counters.items()})
    out["stats"] = runner.stats.evidence()
    return out


def sc_finish(rank: int, world: int, late_rank: int | None, grace_s: float, delay_s: float) -> dict[str, Any]:
    """The end-of-run barrier of a data-parallel apply; ``late_rank`` arrives ``delay_s`` late."""
    from unilab.run.dp import finish_barrier

    if rank == late_rank:
        time.sleep(delay_s)
    t0 = time.perf_counter()
    try:
        finish_barrier(None, grace_s)
    except UnilabError as e:
        return {"error": e.summary, "detail": e.detail, "waited_s": time.perf_counter() - t0}
    return {"error": None, "waited_s": time.perf_counter() - t0}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    f.__name__: f
    for f in (
        sc_mean,
        sc_threshold,
        sc_sac_identical,
        sc_bf16_error,
        sc_nonfinite,
        sc_nonfinite_grad_ok_flag,
        sc_broadcast,
        sc_flashsac_identical,
        sc_buffer_repair,
        sc_graph_twin,
        sc_finish,
    )
}


# ====================================================================== the two-rank pool
def _rank_main(rank: int, world: int, store_path: str, inbox: Any, outbox: Any) -> None:
    torch.set_num_threads(1)  # two ranks share two cores
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=90))
    try:
        while (msg := inbox.get()) is not None:
            name, kwargs = msg
            try:
                outbox.put((rank, True, SCENARIOS[name](rank, world, **kwargs)))
            except BaseException:
                outbox.put((rank, False, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


class RankPool:
    """`world` gloo ranks in spawned processes that run scenarios on request and send back their results."""

    def __init__(self, world: int, store_path: Path) -> None:
        ctx = mp.get_context("spawn")
        self.world = world
        self.inboxes = [ctx.Queue() for _ in range(world)]
        self.outbox = ctx.Queue()
        self.procs = [
            ctx.Process(target=_rank_main, args=(r, world, str(store_path), self.inboxes[r], self.outbox), daemon=True)
            for r in range(world)
        ]
        for p in self.procs:
            p.start()
        self.broken: str | None = None

    def run(self, scenario: str, timeout_s: float = 240.0, **kwargs: Any) -> list[dict[str, Any]]:
        if self.broken:
            pytest.fail(f"the rank pool broke in an earlier scenario: {self.broken}")
        for q in self.inboxes:
            q.put((scenario, kwargs))
        results: dict[int, Any] = {}
        errors = []
        try:
            for _ in range(self.world):
                rank, ok, value = self.outbox.get(timeout=timeout_s)
                if ok:
                    results[rank] = value
                else:
                    errors.append(f"rank {rank}:\n{value}")
        except queue.Empty:
            self.broken = f"{scenario} gave no result within {timeout_s} s"
            pytest.fail(self.broken)
        if errors:
            pytest.fail(f"scenario {scenario} failed\n" + "\n".join(errors))
        return [results[r] for r in range(self.world)]

    def close(self) -> None:
        for q in self.inboxes:
            q.put(None)
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()  # our own child, by handle


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory):
    pool = RankPool(WORLD, tmp_path_factory.mktemp("dist") / "store")
    yield pool
    pool.close()


# ====================================================================== two-rank tests
@pytest.mark.slow
def test_fp32_wire_gives_the_mean_of_the_ranks_gradients(ranks: RankPool) -> None:
    r0, r1 = ranks.run("sc_mean")
    local0, local1 = r0["local"], r1["local"]
    local0[1] = np.zeros_like(local0[1])  # the .grad left None counts as zeros
    local1[1] = np.zeros_like(local1[1])
    for label in ("default", "small_buckets"):
        for r in (r0, r1):
            assert r[label]["ok"] is True
            assert r[label]["syncs"] == 1
            for got, a, b in zip(r[label]["synced"], local0, local1, strict=True):
                assert got.dtype == a.dtype
                # fp32 SUM of two values is commutative, and halving is exact: bitwise equal.
                np.testing.assert_array_equal(got, (a + b) / 2)
    assert r0["default"]["buckets"] == 2  # fp32 (with the sentinel) and float64
    assert r0["small_buckets"]["buckets"] > r0["default"]["buckets"]
    n32 = 3 * 5 + 7 + 1 + 40 * 30 + 2 * 9
    assert r0["default"]["wire_bytes"] == 4 * (1 + n32) + 8 * 6
    assert r0["small_buckets"]["wire_bytes"] == r0["default"]["wire_bytes"]


@pytest.mark.slow
def test_bf16_wire_threshold_and_fp32_division(ranks: RankPool) -> None:
    r0, r1 = ranks.run("sc_threshold")
    a, b = r0["local"], r1["local"]
    f32, b16 = r0["float32"], r0["bfloat16"]
    assert b16["wire_dtypes"] == ["torch.float32", "torch.bfloat16", "torch.bfloat16", "torch.float32"]
    assert f32["wire_dtypes"] == ["torch.float32"] * 4
    assert b16["wire_bytes"] == 4 * (1 + 1023 + 5) + 2 * 2048
    assert f32["wire_bytes"] == 4 * (1 + 1023 + 1024 + 1024 + 5)
    for r in (r0, r1):
        np.testing.assert_array_equal(r["bfloat16"]["synced"][0], r["float32"]["synced"][0])  # 1023: fp32
        np.testing.assert_array_equal(r["bfloat16"]["synced"][3], r["float32"]["synced"][3])
        assert r["bfloat16"]["ok"] and r["float32"]["ok"]
    # 1024 elements: packed as bf16, summed in bf16, restored to fp32, halved in fp32.
    ta, tb = torch.from_numpy(a[1]), torch.from_numpy(b[1])
    expect = (ta.bfloat16() + tb.bfloat16()).float() / 2
    for r in (r0, r1):
        np.testing.assert_array_equal(r["bfloat16"]["synced"][1], expect.numpy())
    assert not np.array_equal(b16["synced"][1], f32["synced"][1])
    # Division in fp32: 3 * TINY / 2 exactly; dividing in bf16 would have rounded it to 2 * TINY.
    summed = torch.full((1024,), 3 * TINY).bfloat16()
    in_bf16 = (summed / 2).float()
    in_fp32 = summed.float() / 2
    assert not torch.equal(in_bf16, in_fp32)  # the construction discriminates
    for r in (r0, r1):
        np.testing.assert_array_equal(r["bfloat16"]["synced"][2], in_fp32.numpy())
        assert r["bfloat16"]["synced"][2][0] == 1.5 * TINY


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wire", "precision"), [("float32", "float32"), ("bfloat16", "float32"), ("bfloat16", "bfloat16")]
)
def test_sac_replicas_stay_bitwise_identical(ranks: RankPool, wire: str, precision: str) -> None:
    r0, r1 = ranks.run("sc_sac_identical", wire=wire, updates=4, precision=precision)
    assert r0["before_broadcast"] != r1["before_broadcast"]  # different seeds: the broadcast has work to do
    assert r0["digests"] == r1["digests"]
    assert len(set(r0["digests"])) == len(r0["digests"])  # every update moved the parameters
    assert all(v == {"critic": True, "actor": True, "alpha": True} for v in r0["verdicts"] + r1["verdicts"])
    s = r0["summary"]
    assert s["critic"]["syncs"] == 4 and s["actor"]["syncs"] == 4 and s["alpha"]["syncs"] == 4
    assert s["critic"]["wire_dtype"] == wire and s["critic"]["world_size"] == WORLD
    assert (s["critic"]["bf16_tensors"] > 0) == (wire == "bfloat16")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hidden", "critic", "batch_size"),
    [((256, 256), "mse", 256), ((512, 512, 512), "c51", 1024)],
    ids=["mse-256x2-b256", "c51-512x3-b1024"],
)
def test_bf16_wire_error_on_real_sac_gradients(
    ranks: RankPool, hidden: tuple[int, ...], critic: str, batch_size: int
) -> None:
    r0, r1 = ranks.run("sc_bf16_error", hidden=hidden, critic=critic, batch_size=batch_size)
    for name in ("critic", "actor"):
        e0, e1 = r0[name]["rel_err"], r1[name]["rel_err"]
        assert e0 == e1  # every rank receives the same average
        assert 0.0 < e0 < 0.01, f"{name}: bf16 wire relative L2 error {e0:.3%}"
        assert r0[name]["bf16_elements"] > 0.95 * r0[name]["elements"]
        assert r0[name]["bytes"]["bfloat16"] < 0.55 * r0[name]["bytes"]["float32"]
        print(f"bf16 wire rel L2 error, SAC {critic} {hidden} batch {batch_size}, {name}: {e0:.4%}")


@pytest.mark.slow
@pytest.mark.parametrize("wire", ["float32", "bfloat16"])
def test_nonfinite_loss_on_one_rank_skips_the_step_on_every_rank(ranks: RankPool, wire: str) -> None:
    r0, r1 = ranks.run("sc_nonfinite", wire=wire)
    u0, u1 = r0["updates"], r1["updates"]
    # Update 0: rank 1's critic loss is NaN, rank 0's is fine.
    assert u0[0]["local_ok"] is True and u1[0]["local_ok"] is False
    for u in (u0[0], u1[0]):
        assert u["global_ok"] is False
        assert u["critic_unchanged"] is True  # critic, target critic and its Adam state bitwise unchanged
        assert u["synced_finite"] is True  # rank 1's NaN did not reach anyone
        assert u["actor_ok"] is True  # only the critic step is skipped
    # Rank 1 contributed zeros: the average is rank 0's gradient over the world size.
    for got0, got1, mine in zip(u0[0]["synced"], u1[0]["synced"], u0[0]["local"], strict=True):
        np.testing.assert_array_equal(got0, got1)
        if wire == "float32":
            np.testing.assert_array_equal(got0, mine / 2)
    assert u0[0]["all_after"] == u1[0]["all_after"]
    # Update 1: clean data everywhere, the step proceeds on both ranks.
    for u in (u0[1], u1[1]):
        assert u["local_ok"] and u["global_ok"] and u["actor_ok"]
        assert u["critic_unchanged"] is False
    assert u0[1]["all_after"] == u1[1]["all_after"] != u0[1]["all_before"]


@pytest.mark.slow
def test_nonfinite_gradient_with_finite_loss_fails_the_verdict(ranks: RankPool) -> None:
    r0, r1 = ranks.run("sc_nonfinite_grad_ok_flag")
    for r in (r0, r1):
        for wire in ("float32", "bfloat16"):
            assert r[wire]["first"] is False  # rank 1 reported ok, but its packed gradient held an inf
            assert r[wire]["second"] is True
            assert r[wire]["avg0"] == 1.5  # the second sync averages 1.0 and 2.0 normally


@pytest.mark.slow
def test_broadcast_parameters_gives_every_rank_rank0s_tensors(ranks: RankPool) -> None:
    r0, r1 = ranks.run("sc_broadcast")
    assert r0["count"] == r1["count"] == 8  # linear w, b; bn w, b; 3 bn buffers; loose; the tied weight once
    assert r0["digest"] == r1["digest"]
    for k, v in r0["state"].items():
        np.testing.assert_array_equal(r1["state"][k], v)
    np.testing.assert_array_equal(r1["loose"], r0["loose"])


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_flashsac_replicas_need_buffer_sync_to_stay_identical(ranks: RankPool, precision: str) -> None:
    local0, local1 = ranks.run("sc_flashsac_identical", buffers=False, updates=3, precision=precision)
    synced0, synced1 = ranks.run("sc_flashsac_identical", buffers=True, updates=3, precision=precision)
    # Parameters agree either way (averaged gradients); BatchNorm statistics only with BufferSync.
    assert local0["params"] == local1["params"]
    assert local0["buffers"] != local1["buffers"]
    assert synced0["params"] == synced1["params"]
    assert synced0["buffers"] == synced1["buffers"]
    assert synced0["buffer_syncs"] == 3 and local0["buffer_syncs"] == 0
    assert synced0["buffer_bytes"] > 0


@pytest.mark.slow
def test_buffer_sync_averages_and_repairs_a_nonfinite_rank(ranks: RankPool) -> None:
    r0, r1 = ranks.run("sc_buffer_repair")
    for r in (r0, r1):
        np.testing.assert_array_equal(r["mean"][0], np.full(3, 2.0, np.float32))  # (1 + 3) / 2
        np.testing.assert_array_equal(r["mean"][1], np.full(3, 2.0, np.float32))
        np.testing.assert_array_equal(r["repaired"][0], np.full(3, 5.0, np.float32))  # rank 0's, alone valid
        assert r["num_batches_tracked"] == 0  # integer buffers are left alone
    assert np.isnan(r0["none_valid"]).all() and np.isnan(r1["none_valid"]).all()


# ====================================================================== one-rank tests (in process)
@pytest.fixture
def one_rank(tmp_path: Path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_gradsync_needs_a_process_group() -> None:
    assert not dist.is_initialized()
    with pytest.raises(UnilabError, match="process group"):
        GradSync({"g": [torch.zeros(3, requires_grad=True)]}, "float32")


def test_layout_assigns_wire_dtypes_by_size_and_dtype(one_rank: None) -> None:
    params = [
        torch.zeros(1023),
        torch.zeros(1024),
        torch.zeros(32, 32),
        torch.zeros(4096, dtype=torch.float64),
        torch.zeros(4096, dtype=torch.bfloat16),
    ]
    b16 = GradSync({"g": params}, "bfloat16")
    assert b16.wire_dtypes("g") == [torch.float32, torch.bfloat16, torch.bfloat16, torch.float64, torch.bfloat16]
    assert GradSync({"g": params}, "float32").wire_dtypes("g") == [p.dtype for p in params]
    plan = WirePlan(dtype="bfloat16", active=True, reduction="r", bf16_min_group_elements=2048)
    assert GradSync.from_plan({"g": params}, plan).wire_dtypes("g")[:3] == [torch.float32] * 3


def test_buckets_never_exceed_the_size_but_never_split_a_tensor(one_rank: None) -> None:
    params = [torch.zeros(n, requires_grad=True) for n in (10, 10, 100, 10)]
    sync = GradSync({"g": params}, "float32", bucket_bytes=4 * 25)
    # [sentinel + 10 + 10], [100] alone (larger than a bucket), [10]
    assert sync.counters["g"].buckets == 3
    for i, p in enumerate(params):
        p.grad = torch.arange(p.numel(), dtype=torch.float32) + i
    want = _grads(params)
    assert bool(sync.sync("g", torch.tensor(True))) is True
    for p, w in zip(params, want, strict=True):
        assert torch.equal(p.grad, w)  # world size 1: the average is the gradient itself


def test_invalid_local_loss_contributes_zeros_and_fails_the_verdict(one_rank: None) -> None:
    p = torch.zeros(2048, requires_grad=True)
    q = torch.zeros(3, requires_grad=True)
    sync = GradSync({"g": [p, q]}, "bfloat16")
    p.grad = torch.full((2048,), float("nan"))
    q.grad = torch.ones(3)
    assert bool(sync.sync("g", torch.tensor(False))) is False
    assert torch.equal(p.grad, torch.zeros(2048)) and torch.equal(q.grad, torch.zeros(3))
    p.grad.fill_(2.0)
    q.grad.fill_(3.0)
    assert bool(sync.sync("g", torch.tensor(True))) is True  # the next sync is unaffected
    assert torch.equal(p.grad, torch.full((2048,), 2.0)) and torch.equal(q.grad, torch.full((3,), 3.0))
    c = sync.counters["g"]
    assert c.syncs == 2 and c.wire_bytes_per_sync == 4 * (1 + 3) + 2 * 2048
    assert c.wire_bytes_total == 2 * c.wire_bytes_per_sync and c.seconds > 0


def test_sync_leaves_parameters_alone(one_rank: None) -> None:
    learner = SacLearner(OBS_DIM, ACT_DIM, SacSpec(name="sac", batch_size=32), seed=1)
    sync = GradSync(learner.optim_groups(), "bfloat16")  # type: ignore[arg-type]
    before = param_digest(_learner_state(learner))
    m = learner.critic_grads(_batch(0, 32))
    assert bool(sync.sync("critic", m["critic_finite"])) is True
    assert param_digest(_learner_state(learner)) == before


def test_bad_arguments_are_refused(one_rank: None) -> None:
    p = torch.zeros(3, requires_grad=True)
    with pytest.raises(UnilabError, match="wire dtype"):
        GradSync({"g": [p]}, "float16")  # type: ignore[arg-type]
    with pytest.raises(UnilabError, match="no parameters"):
        GradSync({"g": []}, "float32")
    with pytest.raises(UnilabError, match="floating"):
        GradSync({"g": [torch.zeros(3, dtype=torch.int64)]}, "float32")
    with pytest.raises(UnilabError, match="no optimizer group 'h'"):
        GradSync({"g": [p]}, "float32").sync("h", torch.tensor(True))


def test_param_digest_is_bitwise() -> None:
    a = [torch.nn.Linear(4, 3), torch.tensor(0.5)]
    b = [torch.nn.Linear(4, 3), torch.tensor(0.5)]
    b[0].load_state_dict(a[0].state_dict())
    assert param_digest(a) == param_digest(b)
    with torch.no_grad():
        w = b[0].weight.view(-1)
        w[0] = torch.nextafter(w[0], torch.tensor(math.inf))  # one ulp
    assert param_digest(a) != param_digest(b)
    assert param_digest([torch.zeros(2)]) != param_digest([torch.zeros(2, dtype=torch.int32)])  # dtype counts
    assert param_digest([torch.zeros(2, 3)]) != param_digest([torch.zeros(3, 2)])  # shape counts


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_learner_graph_twin_with_real_collectives_matches_eager_on_every_rank(ranks: RankPool, precision: str) -> None:
    r0, r1 = ranks.run("sc_graph_twin", fail_rank=None, precision=precision)
    for r in (r0, r1):
        assert r["error"] is None
        assert r["graphed"] == r["eager"]  # bitwise, update by update
        assert r["syncs"][0] == r["syncs"][1]  # replays advanced the host-side sync counters too
        assert r["stats"]["captures"] == 2 and r["stats"]["replays"] == 4
    assert r0["graphed"] == r1["graphed"]  # the replicas stay identical


@pytest.mark.slow
def test_learner_graph_capture_failure_on_one_rank_fails_every_rank(ranks: RankPool) -> None:
    r0, r1 = ranks.run("sc_graph_twin", fail_rank=1)
    assert "another rank" in r0["error"]
    assert "operation not permitted" in r1["error"]
    assert r0["stats"]["state"] == r1["stats"]["state"] == "failed"


def test_a_rank_late_past_the_grace_window_fails_the_run_on_every_rank(tmp_path: Path) -> None:
    """The ranks meet at the end of a run; one that never arrives in time (stuck or dead) must
    fail the run with a clear error instead of leaving the others blocked in the final gather.
    A fresh pair of ranks: a timed-out barrier leaves its process group unusable."""
    pool = RankPool(WORLD, tmp_path / "store")
    try:
        on_time = pool.run("sc_finish", late_rank=None, grace_s=20.0, delay_s=0.0)
        assert [r["error"] for r in on_time] == [None, None]
        late = pool.run("sc_finish", late_rank=1, grace_s=1.0, delay_s=12.0)
    finally:
        pool.close()
    first = late[0]
    assert first["error"] == "the data-parallel ranks did not all finish within 1 s of each other"
    # gloo names the rank that did not arrive: "[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 1000 ms"
    assert re.search(r"\bRanks? 1 failed to pass monitoredBarrier\b", first["detail"]), first["detail"]
    # Rank 0 gave up at the 1 s grace window, not when rank 1 came 12 s late (wide margins for a loaded host).
    assert 0.9 <= first["waited_s"] < 7.0, first["waited_s"]
    assert late[1]["error"] is not None
