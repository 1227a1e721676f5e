"""The collector <-> learner channel of one rank: preallocated shared-memory tensors and two token
pipes (one byte per post). Nothing is pickled per step. Pipes rather than multiprocessing
semaphores: a pipe leaves nothing behind however its processes end, where a named semaphore of the
spawn start method stays in /dev/shm after a kill -9 of the whole process group.

K = 1 protocol (one sync per env step):

    collector: reset -> obs[0] -> post TOKEN_OBS
    learner:   wait TOKEN_OBS -> action[t] = policy(obs[t % 2]) -> post TOKEN_STEP -> gradient
               updates (overlapping the physics step) -> wait TOKEN_OBS -> store transition t
    collector: wait TOKEN_STEP -> env.step(action) -> next_obs, reward, done, obs[(t + 1) % 2]
               -> post TOKEN_OBS

Observations are double-buffered: the collector writes obs[t+1] into the other slot, so the
learner's obs[t] (the transition's first element) is never overwritten before it is stored.
"""

from __future__ import annotations

import json
import select
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from unilab.collect.timing import PHASES

TOKEN_OBS = b"o"  # collector -> learner: the next observation is in place
TOKEN_STEP = b"s"  # learner -> collector: the action is in place, step
TOKEN_QUIT = b"q"  # learner -> collector: stop


class TokenWait:
    """Waits on one token pipe's read end; the poll object is made once (the wait runs every sync)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def ready(self, timeout_s: float) -> bool:
        """Whether a token (or end of file: the other side is gone) is there within ``timeout_s``."""
        return bool(self._poll.poll(timeout_s * 1000.0))


# Per-sync counters the collector publishes (float64 slots of `stats`). STAT_SEQ is odd while the
# collector updates the counters and `episode_terms` (a sequence lock: see `read_counters`).
STAT_SYNCS, STAT_ENV_STEPS, STAT_EPISODES, STAT_RETURN_SUM, STAT_LENGTH_SUM, STAT_NONFINITE, STAT_WAIT_S = range(7)
STAT_SEQ = 7
NUM_STATS = 8
# A counter update takes microseconds; a reader waits this long for one to end (its writer may be
# descheduled mid-update on a busy machine) before it takes the copy as a dead collector left it.
SEQ_READ_TIMEOUT_S = 2.0
# The collector publishes its learning-health sums (`SharedBuffers.health`) every this many syncs,
# not every sync: reading them is a host read of device sums (a device sync on CUDA), and a mean
# over thousands of env steps loses nothing by ending up to this many syncs early.
HEALTH_PUBLISH_SYNCS = 32
GRAPH_EVIDENCE_BYTES = 64 * 1024
WARNINGS_BYTES = 4 * 1024


def write_evidence(buf: torch.Tensor, evidence: dict[str, Any]) -> None:
    """JSON into a length-prefixed byte buffer; an oversize record keeps its counters, not its carrier list."""
    text = json.dumps(evidence, sort_keys=True).encode()
    if len(text) + 4 > buf.numel():
        evidence = {**evidence, "carriers": [f"{len(evidence.get('carriers', []))} carriers (list too long)"]}
        text = json.dumps(evidence, sort_keys=True).encode()
    payload = len(text).to_bytes(4, "big") + text
    buf[: len(payload)].copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))


def read_evidence(buf: torch.Tensor) -> dict[str, Any] | None:
    raw = bytes(buf[:4].tolist())
    n = int.from_bytes(raw, "big")
    if n == 0:
        return None
    return json.loads(bytes(buf[4 : 4 + n].tolist()))


@dataclass
class SharedBuffers:
    obs: torch.Tensor  # [2, N, D]
    action: torch.Tensor  # [N, A]
    next_obs: torch.Tensor  # [N, D] the step's own next observation (terminal obs for ended worlds)
    reward: torch.Tensor  # [N]
    terminated: torch.Tensor  # [N] bool
    truncated: torch.Tensor  # [N] bool
    nonfinite: torch.Tensor  # [N] bool: worlds whose step was non-finite (reset; transition not stored)
    stats: torch.Tensor  # [NUM_STATS] float64, cumulative
    # Over completed episodes, cumulative: [0] episodes that terminated (not truncated), then each
    # reward term's sum (weighted and scaled by the step, as in the return), in `Hello.reward_names` order.
    episode_terms: torch.Tensor  # [1 + reward terms] float64
    # Learning-health sums, cumulative, refreshed every HEALTH_PUBLISH_SYNCS syncs under the
    # sequence lock: [0] env steps they cover, then per `Hello.health_names` the sum over those env
    # steps (a mean per env step is a sum's increase over the env steps' increase).
    health: torch.Tensor  # [1 + health names] float64
    phase_s: torch.Tensor  # [len(PHASES)] float64, cumulative wall seconds per collector phase
    phase_cpu_s: torch.Tensor  # [len(PHASES)] float64, cumulative collector-thread CPU seconds per phase
    physics_replays: torch.Tensor  # [1] int64, graph replays of the physics backend
    # The update-state graph's evidence (unilab.collect.update_graph), JSON, refreshed with the
    # physics replays: [0:4] byte length (big-endian), then the UTF-8 text; all zero when off.
    collector_graph: torch.Tensor  # [GRAPH_EVIDENCE_BYTES] uint8
    # The physics backend's warning counts ({kind: count}, only kinds seen), JSON, the same way.
    physics_warnings: torch.Tensor  # [WARNINGS_BYTES] uint8

    @staticmethod
    def allocate(
        num_envs: int, obs_dim: int, act_dim: int, num_reward_terms: int, num_health: int = 0
    ) -> SharedBuffers:
        def z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype).share_memory_()

        return SharedBuffers(
            obs=z(2, num_envs, obs_dim),
            action=z(num_envs, act_dim),
            next_obs=z(num_envs, obs_dim),
            reward=z(num_envs),
            terminated=z(num_envs, dtype=torch.bool),
            truncated=z(num_envs, dtype=torch.bool),
            nonfinite=z(num_envs, dtype=torch.bool),
            stats=z(NUM_STATS, dtype=torch.float64),
            episode_terms=z(1 + num_reward_terms, dtype=torch.float64),
            health=z(1 + num_health, dtype=torch.float64),
            phase_s=z(len(PHASES), dtype=torch.float64),
            phase_cpu_s=z(len(PHASES), dtype=torch.float64),
            physics_replays=z(1, dtype=torch.int64),
            collector_graph=z(GRAPH_EVIDENCE_BYTES, dtype=torch.uint8),
            physics_warnings=z(WARNINGS_BYTES, dtype=torch.uint8),
        )


@dataclass(frozen=True)
class Hello:
    """The collector's first message: what it built and where it runs (manifest evidence)."""

    pid: int
    cpu_ids_applied: list[int]
    physics_workers: int
    obs_dim: int
    act_dim: int
    num_envs: int
    reward_names: list[str]
    # (name, columns) of each observation term, in observation order: recorded in checkpoints so
    # that an exported policy can say what its input vector holds.
    obs_terms: list[tuple[str, int]]
    buffers: SharedBuffers
    physics_graph_enabled: bool
    physics_graph_disable_reason: str | None
    # The learning-health figures of `SharedBuffers.health`, in order (Collector.health_names).
    health_names: list[str] = field(default_factory=list)


def obs_terms_state(hello: Hello | None) -> list[list[str | int]]:
    """The observation layout as checkpoint state: plain lists, loadable with weights_only=True."""
    return [[name, dim] for name, dim in hello.obs_terms] if hello is not None else []


def publish_sync(
    stats: torch.Tensor, episode_terms: Any, num_envs: int, completed: list[float], nonfinite_total: int
) -> bool:
    """Add one sync to the shared counters: ``completed`` is the collector's [episodes, return sum,
    length sum, terminated, reward term sums...] since the last sync. Under the sequence lock, so a
    reader never pairs counters of two syncs. True when episodes completed (the caller clears them)."""
    count, ret_sum, len_sum, *term_sums = completed
    stats[STAT_SEQ] += 1  # odd: being updated
    stats[STAT_SYNCS] += 1
    stats[STAT_ENV_STEPS] += num_envs
    if count:
        stats[STAT_EPISODES] += count
        stats[STAT_RETURN_SUM] += ret_sum
        stats[STAT_LENGTH_SUM] += len_sum
        episode_terms += term_sums  # terminated count, then the reward terms' sums
    stats[STAT_NONFINITE] = nonfinite_total
    stats[STAT_SEQ] += 1
    return bool(count)


def publish_health(stats: torch.Tensor, health: Any, sums: list[float]) -> None:
    """Add the collector's learning-health sums since the last publication ([env steps, *sums], in
    `Hello.health_names` order) to the shared totals, under the sequence lock (`read_health`)."""
    stats[STAT_SEQ] += 1  # odd: being updated
    health += sums
    stats[STAT_SEQ] += 1


def read_counters(bufs: SharedBuffers) -> tuple[list[float], list[float]]:
    """`stats` and `episode_terms` as of one sync. A reader may come while the collector is between
    two updates (a stop that interrupted the wait for its step): it retries until the sequence
    number is even and unchanged over the copy, so an episode count is never paired with the reward
    sums of another sync. A collector that died mid-update leaves the last copy."""
    stats, terms = _read_locked(bufs, bufs.stats, bufs.episode_terms)
    return stats, terms


def read_health(bufs: SharedBuffers) -> list[float]:
    """`health` as of one publication (its env steps paired with its sums), as `read_counters` reads."""
    return _read_locked(bufs, bufs.health)[0]


def _read_locked(bufs: SharedBuffers, *tensors: torch.Tensor) -> list[list[float]]:
    """Copies of `tensors` taken while the sequence number was even and unchanged (see `read_counters`)."""
    seq = bufs.stats[STAT_SEQ : STAT_SEQ + 1]
    deadline = time.monotonic() + SEQ_READ_TIMEOUT_S
    while True:
        before = seq.item()
        stats = bufs.stats.tolist()
        copies = [stats if t is bufs.stats else t.tolist() for t in tensors]
        if before % 2 == 0 and stats[STAT_SEQ] == before and seq.item() == before:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(1e-4)
    return copies
