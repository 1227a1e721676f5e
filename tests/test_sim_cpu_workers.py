"""The CPU backend's worker processes: same physics as in-process, pinning, failures, no orphans."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests.sim_models import small_humanoid_xml
from unilab.errors import UnilabError
from unilab.sim.mujoco_cpu import MujocoCpuBackend

DECIMATION = 4


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _rollout(workers: int, num_envs: int, steps: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    out = []
    with MujocoCpuBackend(small_humanoid_xml(), num_envs, DECIMATION, None, workers) as b:
        start_q = b.state.qpos.clone()
        for k in range(steps):
            s = b.step(torch.rand(num_envs, b.dims.nu, generator=g) - 0.5)
            if k == steps // 2:  # a masked reset in the middle, touching both slices
                mask = torch.zeros(num_envs, dtype=torch.bool)
                mask[[0, num_envs - 1]] = True
                b.reset(mask, start_q, torch.full((num_envs, b.dims.nv), 0.1))
            out.append({f: getattr(s, f).clone() for f in ("qpos", "qvel", "xpos", "cvel", "sensordata")})
    return out


def test_two_workers_step_exactly_like_one():
    """5 worlds (slices of 3 and 2): every field bitwise equal to the in-process backend, every step."""
    one = _rollout(workers=1, num_envs=5, steps=6)
    two = _rollout(workers=2, num_envs=5, steps=6)
    for k, (a, b) in enumerate(zip(one, two, strict=True)):
        for f in a:
            assert torch.equal(a[f], b[f]), f"{f} differs at step {k}"


def test_workers_are_pinned_to_their_cpus_and_gone_after_close():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two CPUs in this process's affinity set")
    b = MujocoCpuBackend(small_humanoid_xml(), 4, DECIMATION, cpu_ids=cpus[::-1], workers=2)
    pids = b.worker_pids()
    assert [os.sched_getaffinity(p) for p in pids] == [{cpus[1]}, {cpus[0]}]
    assert os.sched_getaffinity(0) >= set(cpus)  # the parent keeps its own affinity
    # Once every worker has the block mapped its name is gone: a kill -9 of everything leaves no
    # /dev/shm entry behind, and the workers still share the parent's state.
    shm = Path("/dev/shm") / b._res.shm.name  # type: ignore[union-attr]
    assert not shm.exists()
    before = b.state.qpos.clone()
    b.step(torch.zeros(4, b.dims.nu))
    assert not torch.equal(b.state.qpos, before)  # the workers' steps reached the parent's view
    qpos, last = b.state.qpos, b.state.qpos.clone()
    b.close()
    b.close()  # idempotent
    assert _wait_gone(pids, 1.0) == []
    assert not shm.exists()
    del b
    assert torch.equal(qpos, last)  # state tensors stay readable after close (the mapping outlives it)


def test_a_single_pinned_worker_runs_in_its_own_process():
    cpu = max(os.sched_getaffinity(0))
    mine = os.sched_getaffinity(0)
    with MujocoCpuBackend(small_humanoid_xml(), 3, DECIMATION, cpu_ids=[cpu], workers=1) as b:
        (pid,) = b.worker_pids()
        assert pid != os.getpid() and os.sched_getaffinity(pid) == {cpu}
        b.step(torch.zeros(3, b.dims.nu))
    assert os.sched_getaffinity(0) == mine
    assert _wait_gone([pid], 1.0) == []


def test_a_killed_worker_surfaces_as_a_clear_error_and_takes_the_others_down():
    # A step timeout far above the bound below: the death must be seen as a death, not waited out.
    step_timeout_s = 600.0
    b = MujocoCpuBackend(small_humanoid_xml(), 4, DECIMATION, None, workers=2, step_timeout_s=step_timeout_s)
    ctrl = torch.zeros(4, b.dims.nu)
    b.step(ctrl)
    pids = b.worker_pids()
    shm = Path("/dev/shm") / b._res.shm.name  # type: ignore[union-attr]
    os.kill(pids[1], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(UnilabError) as info:
        b.step(ctrl)
    assert time.monotonic() - t0 < step_timeout_s / 10  # promptly, with room for a loaded host
    msg = info.value.summary
    assert "did not finish" not in msg, msg  # not the step timeout's error
    assert f"physics worker 1 (pid {pids[1]}" in msg and "SIGKILL" in msg and "exit code -9" in msg, msg
    assert _wait_gone(pids, 5.0) == []  # the surviving worker was shut down too
    assert not shm.exists()
    with pytest.raises(UnilabError, match="unusable after an earlier failure"):
        b.step(ctrl)
    b.close()


def test_a_worker_exception_is_reported_with_its_traceback():
    b = MujocoCpuBackend(small_humanoid_xml(), 4, DECIMATION, None, workers=2)
    pids = b.worker_pids()
    os.write(b._res.workers[0].cmd_fd, b"x")  # a command the worker does not know: it raises
    with pytest.raises(UnilabError) as info:
        b.step(torch.zeros(4, b.dims.nu))
    err = info.value
    assert "physics worker 0" in err.summary and "exit code 4" in err.summary, err.summary
    assert "RuntimeError: unknown command b'x'" in err.detail
    assert _wait_gone(pids, 5.0) == []
    b.close()


def test_an_interrupted_step_closes_the_backend_instead_of_desynchronising_it():
    """Ctrl-C while the workers step: their late replies must never be taken for the next step's.

    The signal is raised from inside the step's wait for the workers' replies (its first poll, once
    both workers have their step command), so it lands mid-step on any host, fast or loaded: a timer
    could fire before the step starts or after it ends."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    b = MujocoCpuBackend(small_humanoid_xml(), 1024, DECIMATION, None, workers=2)
    pids = b.worker_pids()
    b.step(torch.zeros(1024, b.dims.nu))  # a normal step first: the interrupt hits a working backend
    real_poll = b._poll
    polls = [0]

    class InterruptingPoll:
        def poll(self, timeout_ms: int) -> list[tuple[int, int]]:
            polls[0] += 1
            if polls[0] == 1:
                signal.raise_signal(signal.SIGALRM)  # the handler runs here, in the wait
            return real_poll.poll(timeout_ms)

    b._poll = InterruptingPoll()  # type: ignore[assignment]
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            b.step(torch.zeros(1024, b.dims.nu))
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert polls[0] == 1  # it landed in the step's wait, and nothing waited on after it
    with pytest.raises(UnilabError, match="unusable after an earlier failure") as info:
        b.step(torch.zeros(1024, b.dims.nu))
    assert "interrupted during step" in info.value.detail
    assert _wait_gone(pids, 5.0) == []
    b.close()


def test_workers_die_with_their_parent(tmp_path):
    """SIGKILL the parent (no cleanup runs at all): its workers must not outlive it."""
    script = tmp_path / "parent.py"
    (tmp_path / "humanoid.xml").write_text(small_humanoid_xml())
    script.write_text(
        textwrap.dedent(
            """
            import os, sys, time
            def main():
                from pathlib import Path
                from unilab.sim.mujoco_cpu import MujocoCpuBackend
                xml = (Path(__file__).parent / "humanoid.xml").read_text()
                b = MujocoCpuBackend(xml, 4, 4, None, workers=2)
                print(" ".join(map(str, b.worker_pids())), flush=True)
                time.sleep(120)
            if __name__ == "__main__":
                main()
            """
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.kill()
        proc.wait(10)
        assert _wait_gone(pids, 5.0) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_bad_worker_arguments_are_refused():
    xml = small_humanoid_xml()
    with pytest.raises(UnilabError, match="one CPU per worker"):
        MujocoCpuBackend(xml, 4, DECIMATION, cpu_ids=[0], workers=2)
    with pytest.raises(UnilabError, match="not in this process's CPU set"):
        MujocoCpuBackend(xml, 4, DECIMATION, cpu_ids=[0, 4096], workers=2)
    with pytest.raises(UnilabError, match="at least one world"):
        MujocoCpuBackend(xml, 2, DECIMATION, None, workers=3)


def test_diagnostics_report_workers_and_mujoco_warnings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the workers inherit it
    for workers in (2, 1):  # worker processes, and the in-process stepper
        with MujocoCpuBackend(small_humanoid_xml(), 4, DECIMATION, None, workers=workers) as b:
            b.step(torch.full((4, b.dims.nu), float("nan")))  # MuJoCo warns about bad ctrl and zeroes it
            diag = b.diagnostics()
            assert diag["workers"] == workers and diag["worker_pids"] == b.worker_pids()
            assert diag["mujoco_warnings"]["badctrl"] >= 4
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # counted, not written into the user's directory


_STEPPER = textwrap.dedent(
    """
    import sys, time, torch
    from tests.sim_models import small_humanoid_xml
    from unilab.sim.mujoco_cpu import MujocoCpuBackend
    b = MujocoCpuBackend(small_humanoid_xml(), 4, 4, None, workers=2, step_timeout_s=2.0)
    ctrl = torch.zeros(4, b.dims.nu)
    print("ready", *b.worker_pids(), flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        b.step(ctrl)
    b.close()
    print("done", flush=True)
    """
)


def _stepper(seconds: float) -> tuple[subprocess.Popen[str], list[int]]:
    """A process stepping a two-worker backend (a 2 s step timeout) for ``seconds``, in its own group."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _STEPPER, str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[:1] == ["ready"], proc.stderr.read() if proc.stderr else first
    return proc, [int(p) for p in first[1:]]


def test_a_suspended_job_goes_on_stepping_when_it_is_continued():
    # Ctrl-Z (or SIGSTOP of the job) stops the learner and its workers together for longer than
    # the step timeout: that is not a hung worker, and the run must go on after `fg`.
    proc, _ = _stepper(12.0)
    time.sleep(2.0)
    os.killpg(proc.pid, signal.SIGSTOP)
    time.sleep(8.0)  # four step timeouts
    os.killpg(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.strip() == "done", err


def test_a_worker_stopped_alone_is_still_reported_after_the_step_timeout():
    proc, workers = _stepper(30.0)
    time.sleep(1.0)
    os.kill(workers[1], signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the failed backend shut its workers down
            os.kill(workers[1], signal.SIGCONT)
    assert proc.returncode != 0 and "did not finish step within 2 s" in err, err
