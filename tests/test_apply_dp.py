"""Data-parallel applies on CPU: two gloo ranks through the elastic launcher and through torchrun,
and the failure of one rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from tests.conftest import ROOT
from tests.test_apply import _env, _wait_for_checkpoint, leftover_pids

pytestmark = pytest.mark.slow

DP = [
    "--set",
    "task.num_envs=16",
    "--set",
    "algo.warmup_env_steps=640",
    "--set",
    "algo.batch_size=64",
    "--set",
    "run.log_every_seconds=0.5",
    "--set",
    "run.checkpoint_every_env_steps=960",
]


def test_two_cpu_ranks_finish_with_identical_parameters(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "unilab",
            "apply",
            str(ROOT / "specs/g1_dp2_cpu.toml"),
            "--quiet",
            *DP,
            "--set",
            "run.total_env_steps=3200",
        ],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (run_dir,) = list((tmp_path / "runs").iterdir())
    m = json.loads((run_dir / "manifest.json").read_text())
    jsonschema.validate(m, json.loads((ROOT / "schemas/manifest.v1.json").read_text()))
    assert m["status"] == "succeeded" and m["topology"]["world_size"] == 2
    assert m["counters"]["env_steps"] == 3200 and m["counters"]["dropped_transitions"] == 0
    digests = [rk["param_digest"] for rk in m["ranks"]]
    assert len(digests) == 2 and digests[0] == digests[1] and m["data_parallel"]["params_identical"]
    assert m["data_parallel"]["grad_syncs"] > 0 and m["data_parallel"]["wire_dtype"] == "float32"
    assert [rk["collector_cpu_ids_applied"] for rk in m["ranks"]] == [[0], [1]]
    assert len({rk["learner_pid"] for rk in m["ranks"]}) == 2
    assert leftover_pids(mark) == []


def test_torchrun_entry_runs_two_ranks(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "unilab",
            "plan",
            str(ROOT / "specs/g1_dp2_cpu.toml"),
            *DP,
            "--set",
            "run.total_env_steps=1920",
            "--out",
            str(plan),
        ],
        check=True,
        cwd=tmp_path,
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "127.0.0.1:0",
            "-m",
            "unilab.rank",
            str(plan),
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(tmp_path, uuid.uuid4().hex),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert m["status"] == "succeeded" and m["data_parallel"]["params_identical"]


def _long_dp_apply(tmp_path: Path, mark: str, **popen: Any) -> subprocess.Popen[str]:
    """A two-rank apply far longer than any test waits, for tests that stop it from outside."""
    cmd = [sys.executable, "-m", "unilab", "apply", str(ROOT / "specs/g1_dp2_cpu.toml"), "--quiet", *DP]
    return subprocess.Popen(
        [*cmd, "--set", "run.total_env_steps=200000"],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def test_sigkill_of_rank1_fails_the_run_naming_it(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    proc = _long_dp_apply(tmp_path, mark)
    run_dir = _wait_for_checkpoint(tmp_path, timeout=180)
    rank1 = json.loads((run_dir / "manifest.json").read_text())["ranks"][1]["learner_pid"]
    os.kill(rank1, signal.SIGKILL)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=90)
    assert time.monotonic() - t0 < 45  # noticed at once, not after the collective timeout (10 minutes)
    assert proc.returncode == 1
    assert "rank 1 failed" in err and "SIGKILL" in err and "Traceback" not in err
    assert "torch/distributed" not in err  # one unilab paragraph, not the launcher's log of the traceback
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "failed" and m["first_error"]["where"] == "rank1"
    time.sleep(1.0)
    assert leftover_pids(mark) == []
    blob = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert blob["env_steps"] > 0


def test_ctrl_c_stops_two_ranks_promptly_and_records_the_interruption(tmp_path: Path) -> None:
    """A terminal Ctrl-C (SIGINT to the whole process group) reaches the launcher and, forwarded
    once, every rank: they stop after the same sync, write the manifest and exit, instead of the
    launcher's 30 s wait and SIGKILL."""
    mark = uuid.uuid4().hex
    proc = _long_dp_apply(tmp_path, mark, start_new_session=True)
    run_dir = _wait_for_checkpoint(tmp_path, timeout=180)
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=90)
    assert time.monotonic() - t0 < 25, err  # the launcher would SIGKILL the ranks after 30 s
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "torch/distributed" not in err
    assert "run interrupted" in out
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["first_error"] is None
    assert m["data_parallel"]["params_identical"]
    time.sleep(1.0)
    assert leftover_pids(mark) == []


def _rank_processes(launcher: int) -> list[int]:
    """The launcher's children that run a rank."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"PPid:\t{launcher}\n" in status and b"spawn_main" in cmd:  # the resource tracker runs its own main
            out.append(int(pid))
    return out


def test_ctrl_c_while_the_ranks_import_torch_prints_no_traceback(tmp_path: Path) -> None:
    """The ranks spend their first seconds importing torch, still in the terminal's process group;
    a Ctrl-C then used to print each rank's KeyboardInterrupt traceback. The launcher starts them
    with the stop signals blocked, and they take them up once they can stop cleanly."""
    mark = uuid.uuid4().hex
    proc = _long_dp_apply(tmp_path, mark, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_rank_processes(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert len(_rank_processes(proc.pid)) == 2
    time.sleep(0.8)  # past the interpreter's start-up, into torch's import (about 2 s here)
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    time.sleep(1.0)
    assert leftover_pids(mark) == []


@pytest.mark.parametrize("delay_s", [0.6, 0.8, 1.0, 1.2])
def test_ctrl_c_while_the_launcher_imports_torch_stops_the_run(tmp_path: Path, delay_s: float) -> None:
    """Before any rank exists the launcher itself imports torch (about 1 s after the start here).
    A KeyboardInterrupt raised inside that import was at times swallowed by it, and the run went
    on as if no Ctrl-C had come; the stop is now held until the import is done, then honoured."""
    mark = uuid.uuid4().hex
    proc = _long_dp_apply(tmp_path, mark, start_new_session=True)
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the run went on after a Ctrl-C {delay_s} s into it")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "internal error" not in err, err
    time.sleep(1.0)
    assert leftover_pids(mark) == []


def test_a_stop_request_to_one_rank_stops_every_rank(tmp_path: Path) -> None:
    """docs/data-parallel.md: a stop request on any rank stops all of them after the same sync.
    Only rank 1 gets the signal here (it runs in its own process group)."""
    mark = uuid.uuid4().hex
    proc = _long_dp_apply(tmp_path, mark)
    run_dir = _wait_for_checkpoint(tmp_path, timeout=180)
    rank1 = json.loads((run_dir / "manifest.json").read_text())["ranks"][1]["learner_pid"]
    os.kill(rank1, signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["first_error"] is None
    assert m["data_parallel"]["params_identical"]  # both ranks stopped after the same sync
    assert leftover_pids(mark, grace=30) == []
