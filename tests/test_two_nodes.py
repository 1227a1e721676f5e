"""Data parallel across nodes, as docs/data-parallel.md starts it: two torchrun agents with
`--nnodes 2`, one CPU rank each, meeting through a c10d rendezvous on loopback. The run finishes
with identical parameters on both ranks; when one node is lost (its agent and every process under
it SIGKILLed) the survivor ends within 60 s naming the lost rank, leaves no process behind, and the
run resumes on two nodes again."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_apply import _env, leftover_pids

pytestmark = pytest.mark.slow

DP = [
    "task.num_envs=16",
    "algo.warmup_env_steps=640",
    "algo.batch_size=64",
    "run.log_every_seconds=0.5",
    "run.checkpoint_every_env_steps=960",
    "run.total_env_steps=9600",
]


def _saved_plan(tmp_path: Path) -> Path:
    """The two-rank CPU plan both nodes run, saved as docs/data-parallel.md saves it."""
    plan = tmp_path / "plan.toml"
    sets = [a for s in DP for a in ("--set", s)]
    p = subprocess.run(
        [sys.executable, "-m", "unilab", "plan", str(ROOT / "specs/g1_dp2_cpu.toml"), *sets, "--out", str(plan)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    return plan


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node(tmp_path: Path, plan: Path, port: int, mark: str, *args: str) -> subprocess.Popen[str]:
    """One node's torchrun agent, in a session of its own (a node's processes die together)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", mark,
        "-m", "unilab.rank", str(plan), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(p))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _lose_node(agent: subprocess.Popen[str]) -> None:
    """SIGKILL a node: its agent and every process under it, as a lost machine ends them."""
    victims = [agent.pid, *_descendants(agent.pid)]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    agent.communicate(timeout=30)


def _wait_for(path_glob: str, root: Path, timeout: float) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(path_glob))
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"nothing matched {path_glob} within {timeout} s")


def test_two_nodes_train_and_a_lost_node_ends_the_run_cleanly_and_it_resumes(tmp_path: Path) -> None:
    plan = _saved_plan(tmp_path)
    run_dir, mark = tmp_path / "run", uuid.uuid4().hex
    port = _free_port()
    nodes = [_node(tmp_path, plan, port, mark, "--run-dir", str(run_dir)) for _ in range(2)]
    try:
        _wait_for("checkpoints/ckpt-*.pt", run_dir, timeout=240)
        ranks = json.loads((run_dir / "manifest.json").read_text())["ranks"]
        lost_pid = ranks[1]["learner_pid"]
        lost = next(n for n in nodes if lost_pid in _descendants(n.pid))
        survivor = next(n for n in nodes if n is not lost)
        _lose_node(lost)
        t0 = time.monotonic()
        _out, err = survivor.communicate(timeout=120)
        assert time.monotonic() - t0 < 60, err[-3000:]
        assert survivor.returncode != 0
        assert "rank 1" in err, err[-3000:]
    finally:
        for n in nodes:
            if n.poll() is None:
                _lose_node(n)
    assert leftover_pids(mark, grace=30) == []
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "failed" and m["first_error"]["where"] == "rank1", m["first_error"]

    # The run continues on two nodes from its last checkpoint and finishes in step.
    mark2, port2 = uuid.uuid4().hex, _free_port()
    nodes = [_node(tmp_path, plan, port2, mark2, "--resume", str(run_dir)) for _ in range(2)]
    try:
        results = [n.communicate(timeout=300) for n in nodes]
    finally:
        for n in nodes:
            if n.poll() is None:
                _lose_node(n)
    assert [n.returncode for n in nodes] == [0, 0], [err[-2000:] for _out, err in results]
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "succeeded" and m["counters"]["env_steps"] >= 9600
    assert m["data_parallel"]["params_identical"] and len({r["param_digest"] for r in m["ranks"]}) == 1
    assert [s["ended"] for s in m["sessions"]] == ["failed", "succeeded"]
    assert leftover_pids(mark2, grace=30) == []


def test_a_rank_whose_agent_alone_is_killed_ends_with_it(tmp_path: Path) -> None:
    """kill -9 of one node's torchrun agent, not of its rank: the rank must not train on with nobody
    above it; it ends with its agent, and the other node's rank names it lost."""
    plan = _saved_plan(tmp_path)
    run_dir, mark = tmp_path / "run", uuid.uuid4().hex
    nodes = [_node(tmp_path, plan, _port := _free_port(), mark, "--run-dir", str(run_dir))]
    nodes.append(_node(tmp_path, plan, _port, mark, "--run-dir", str(run_dir)))
    try:
        _wait_for("checkpoints/ckpt-*.pt", run_dir, timeout=240)
        lost_pid = json.loads((run_dir / "manifest.json").read_text())["ranks"][1]["learner_pid"]
        agent = next(n for n in nodes if lost_pid in _descendants(n.pid))
        under = _descendants(agent.pid)
        os.kill(agent.pid, signal.SIGKILL)
        agent.communicate(timeout=30)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in under) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [pid for pid in under if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]
        assert alive == [], f"processes of the killed agent still running: {alive}"
        survivor = next(n for n in nodes if n is not agent)
        _out, err = survivor.communicate(timeout=120)
        assert survivor.returncode != 0 and "rank 1 was lost" in err, err[-3000:]
    finally:
        for n in nodes:
            if n.poll() is None:
                _lose_node(n)
    assert leftover_pids(mark, grace=30) == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
