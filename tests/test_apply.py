"""`unilab apply` as a user runs it: real processes, real physics, real files; and its faults."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

SMALL = [
    "--set",
    "task.num_envs=16",
    "--set",
    "run.total_env_steps=1600",
    "--set",
    "algo.warmup_env_steps=320",
    "--set",
    "algo.batch_size=64",
    "--set",
    "run.log_every_seconds=0.5",
    "--set",
    "run.checkpoint_every_env_steps=480",
]


def _env(tmp_path: Path, mark: str) -> dict[str, str]:
    return {**os.environ, "UNILAB_TEST_MARK": mark, "UNILAB_STATE_DIR": str(tmp_path / "state")}


def apply(tmp_path: Path, *args: str, mark: str = "", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "unilab", "apply", *args, "--quiet"]
    return subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=_env(tmp_path, mark or uuid.uuid4().hex)
    )


UNILAB = [sys.executable, "-m", "unilab"]
APPLY = [*UNILAB, "apply"]


def apply_in_background(
    tmp_path: Path, spec: Path, mark: str, total_env_steps: int, new_session: bool = False
) -> subprocess.Popen[str]:
    """A small G1 apply left running, for tests that stop, kill or race it from outside
    (``new_session``: in a process group of its own, for signals to the whole group)."""
    return subprocess.Popen(
        [*APPLY, str(spec), *SMALL, "--quiet", "--set", f"run.total_env_steps={total_env_steps}"],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


def spec_copy(tmp_path: Path, name: str = "g1.toml") -> Path:
    p = tmp_path / name
    p.write_text((ROOT / "specs" / name).read_text())
    return p


def marked_pids(mark: str) -> list[int]:
    """Processes still alive that inherited this test's marker (children of an apply)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"UNILAB_TEST_MARK={mark}".encode() in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def leftover_pids(mark: str, grace: float = 15.0) -> list[int]:
    """Marked processes still alive `grace` seconds after an apply ended. Python's resource tracker
    exits by itself once the apply that started it has gone (it reads end-of-file), a moment after
    the apply's own exit; a process that outlives the grace period is a real leak."""
    deadline = time.monotonic() + grace
    while (pids := marked_pids(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


def only_run_dir(tmp_path: Path) -> Path:
    (run_dir,) = list((tmp_path / "runs").iterdir())
    return run_dir


def test_apply_leaves_a_complete_run_directory_and_resumes(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    r = apply(tmp_path, str(spec), *SMALL, mark=mark)
    assert r.returncode == 0, r.stderr
    assert "run succeeded" in r.stdout and "run directory: runs/g1-walk-" in r.stdout
    run_dir = only_run_dir(tmp_path)
    assert {"plan.toml", "manifest.json", "events.jsonl", "tensorboard", "checkpoints"} <= {
        p.name for p in run_dir.iterdir()
    }
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))

    manifest = json.loads((run_dir / "manifest.json").read_text())
    schema = json.loads((ROOT / "schemas" / "manifest.v1.json").read_text())
    jsonschema.validate(manifest, schema)  # plain jsonschema against the committed schema
    assert manifest["status"] == "succeeded" and manifest["first_error"] is None
    c = manifest["counters"]
    assert c["env_steps"] == 1600 and c["dropped_transitions"] == 0 and c["transitions_produced"] == 1600
    assert c["updates"] > 0
    # The CPU layout, threads and precision the plan chose are the ones that ran.
    plan = tomllib.loads((run_dir / "plan.toml").read_text())
    rank, planned = manifest["ranks"][0], plan["ranks"][0]
    assert rank["collector_cpu_ids_applied"] == planned["collector_cpu_ids"]
    assert rank["learner_cpu_ids_planned"] == planned["learner_cpu_ids"]
    if planned["learner_cpu_ids"]:
        assert rank["learner_cpu_ids_applied"] == planned["learner_cpu_ids"]
    assert rank["torch_threads"] == planned["torch_threads"]
    assert rank["learner_precision"] == plan["learner"]["precision"]["effective"]
    assert rank["learner_allocator"] == "glibc heap kept (mallopt)"
    on_shared = manifest["timing"]["learner_updates_on_shared_cpus"]
    if set(planned["learner_cpu_ids"]) & set(planned["collector_cpu_ids"]):
        assert 0.0 <= on_shared <= 1.0  # the share of updates run while the collector waited
    else:
        assert on_shared == 0.0
    assert set(manifest["timing"]["collector_phases_us"]) >= {"physics_step", "reward", "observation"}

    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert {"iteration", "checkpoint_saved", "manifest", "collector_started"} <= set(kinds)
    assert all(e["run_id"] == run_dir.name and e["rank"] == 0 for e in events)
    assert [e for e in events if e["event"] == "manifest"][-1]["manifest"] == manifest

    ckpts = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
    blob = torch.load(ckpts[-1], weights_only=True)
    assert blob["env_steps"] == 1600 and blob["plan_id"] == manifest["plan_id"]
    # The G1 under random and early-policy actions stays within MuJoCo's limits: no warning recorded.
    assert manifest["backend"]["physics_warnings"] == {}
    v = subprocess.run(
        [sys.executable, "-m", "unilab", "manifest", "validate", str(run_dir)],  # the directory does
        capture_output=True,
        text=True,
    )
    assert v.returncode == 0, v.stderr
    assert v.stdout.startswith(f"{run_dir / 'manifest.json'}: valid manifest")
    n = len(manifest["checkpoints"])
    assert f"plan.toml has its plan_id, {n} of {n} checkpoints match their sha256" in v.stdout
    # Copied out of its run directory, the manifest is checked alone, and the line says so.
    alone = tmp_path / "copied.json"
    alone.write_text(json.dumps(manifest))
    v = subprocess.run([*UNILAB, "manifest", "validate", str(alone)], capture_output=True, text=True)
    assert v.returncode == 0 and "plan and checkpoints not checked" in v.stdout and "match" not in v.stdout, v.stdout
    # The same manifest, tampered with, is refused: the schema pins what the runtime writes.
    from unilab.errors import UnilabError
    from unilab.records.manifest_io import validate_manifest_file

    tampered = tmp_path / "tampered.json"
    for path, value, says in [
        (("counters", "env_steps"), -5, "counters/env_steps"),
        (("plan_id",), "nope", "plan_id"),
        (("started_at",), "yesterday", "started_at"),
        (("checkpoints", 0, "sha256"), "zz", "checkpoints/0/sha256"),
    ]:
        bad = json.loads(json.dumps(manifest))
        node = bad
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        tampered.write_text(json.dumps(bad))
        with pytest.raises(UnilabError, match=says) as exc:
            validate_manifest_file(tampered)
        assert "only `unilab apply` writes manifests" in exc.value.fix
    # Fields that contradict each other, and a run directory changed after the run, are refused too.
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    for edit, says in [
        (lambda m: m.update(first_error=None, status="failed"), "first_error is missing"),
        (lambda m: m.update(finished_at=None), "finished_at is missing"),
        (lambda m: m["counters"].update(env_steps=10), "past counters.env_steps"),
    ]:
        bad = json.loads(json.dumps(manifest))
        edit(bad)
        (copy / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(UnilabError, match=says):
            validate_manifest_file(copy / "manifest.json")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    validate_manifest_file(copy / "manifest.json")
    ckpt = copy / manifest["checkpoints"][-1]["path"]
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    with pytest.raises(UnilabError, match="does not have the recorded sha256"):
        validate_manifest_file(copy / "manifest.json")
    shutil.copy(run_dir / manifest["checkpoints"][-1]["path"], ckpt)
    plan_text = (copy / "plan.toml").read_text()
    (copy / "plan.toml").write_text(plan_text.replace(manifest["plan_id"], "sha256:" + "0" * 64))
    with pytest.raises(UnilabError, match=r"plan\.toml was edited: its plan_id does not match its content"):
        validate_manifest_file(copy / "manifest.json")
    other = subprocess.run([*UNILAB, "plan", str(ROOT / "specs" / "cartpole.toml")], capture_output=True, text=True)
    (copy / "plan.toml").write_text(other.stdout)  # a whole plan, but another run's
    with pytest.raises(UnilabError, match=r"plan\.toml has plan_id"):
        validate_manifest_file(copy / "manifest.json")
    assert leftover_pids(mark) == []

    # The exported policy (actor + normalizer) gives the torch actor's actions under onnxruntime.
    import numpy as np
    import onnxruntime as ort

    from unilab.records.policy import load_policy

    e = subprocess.run(
        [sys.executable, "-m", "unilab", "export", str(run_dir), "--format", "onnx"], capture_output=True, text=True
    )
    assert e.returncode == 0, e.stderr
    policy, obs_dim = load_policy(run_dir)
    obs = np.random.default_rng(0).normal(size=(8, obs_dim)).astype(np.float32) * 3
    sess = ort.InferenceSession(str(run_dir / "policy.onnx"))
    # The file states its shapes, as docs/running.md gives them: obs [batch, obs_dim], action
    # [batch, action_dim], 12 for g1.toml's legs (the joints `unilab.action_joints` names).
    assert [(i.name, i.shape[1]) for i in sess.get_inputs()] == [("obs", obs.shape[1])]
    assert [(o.name, o.shape) for o in sess.get_outputs()] == [("action", ["batch", 12])]
    got = sess.run(None, {"obs": obs})[0]
    want = policy(torch.from_numpy(obs)).detach().numpy()
    assert got.shape == (8, 12) and np.abs(got - want).max() < 1e-5
    # It carries what turns an action into joint targets, as the task the run trained did.
    from unilab.collect.build import build_collector
    from unilab.plan.render import load_plan

    meta = sess.get_modelmeta().custom_metadata_map
    plan = load_plan(run_dir / "plan.toml")
    assert meta["unilab.plan_id"] == plan.plan_id and float(meta["unilab.control_dt"]) == plan.task.control_dt
    from unilab.spec.load import load_spec

    spec_task = load_spec(spec).spec
    with build_collector(spec_task.task, spec_task.sim, spec_dir=tmp_path, num_envs=1, workers=1) as c:
        task = c.task
        assert json.loads(meta["unilab.joint_names"]) == list(task.layout.joint_names)
        assert len(json.loads(meta["unilab.action_joints"])) == task.num_actions == 12
        np.testing.assert_allclose(json.loads(meta["unilab.action_scale"]), task.action_scale.numpy(), rtol=1e-5)
        np.testing.assert_allclose(
            json.loads(meta["unilab.default_joint_pos"]), task.default_joint_pos.numpy(), atol=1e-6
        )
        # The PD loop and the limits the simulator put on it, which the robot's own loop must repeat.
        lay = task.layout
        for key, want in (("joint_kp", lay.kp), ("joint_kd", lay.kd), ("effort_limit", lay.effort_limit)):
            np.testing.assert_allclose(json.loads(meta[f"unilab.{key}"]), want, rtol=1e-5)
        np.testing.assert_allclose(json.loads(meta["unilab.target_range"]), lay.ctrl_range, rtol=1e-5)
        assert "unilab.reference_motion" not in meta  # g1_walk tracks no clip
        # And what each column of its input holds, term by term, as the task lays it out without
        # the critic's privileged terms (`task.privileged_observations`).
        privileged = set(plan.task.privileged_observations or ())
        layout, start = {}, 0
        for name, sl in task.observation_layout().items():
            if name not in privileged:
                layout[name] = [start, start + sl.stop - sl.start]
                start += sl.stop - sl.start
        assert json.loads(meta["unilab.observation_layout"]) == layout
        assert start == obs_dim

    # Resume: more steps of the same plan are a different plan, so resume with the saved plan's budget.
    r = apply(tmp_path, str(spec), *SMALL, "--resume", str(run_dir))
    assert r.returncode == 1 and "already finished" in r.stderr
    # A spec whose plan differs is refused by plan id.
    r = apply(tmp_path, str(spec), *SMALL, "--set", "run.seed=5", "--resume", str(run_dir))
    assert r.returncode == 1 and "was run with plan" in r.stderr and "Traceback" not in r.stderr


def test_a_finished_run_is_extended_with_a_larger_budget(tmp_path: Path) -> None:
    """`--resume RUN_DIR --set run.total_env_steps=N` trains a finished run further in its own
    directory: the plan changes in its budget alone (the diff is shown), the replaced plan stays
    beside it, the manifest's sessions name both plans, and every checkpoint still loads. Any
    other key, or a budget that does not grow, is refused and changes nothing."""
    spec = spec_copy(tmp_path, "cartpole.toml")
    small = ["--set", "algo.warmup_env_steps=256", "--set", "run.checkpoint_every_env_steps=1024"]
    r = apply(tmp_path, str(spec), *small, "--set", "run.total_env_steps=2048")
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "events.jsonl"}
    r = apply(tmp_path, "--resume", str(run_dir))
    assert r.returncode == 1 and "already finished" in r.stderr
    assert f"unilab apply --resume {run_dir} --set run.total_env_steps=N" in r.stderr, r.stderr
    for refused, says in (
        ("run.seed=3", "[resume.budget-only] run.seed: "),
        ("run.total_env_steps=1024", "does not extend run"),
        ("run.total_env_steps=many", "Input should be a valid integer"),
    ):
        r = apply(tmp_path, "--resume", str(run_dir), "--set", refused)
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    after = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != "events.jsonl"}
    assert after == before
    old_id = tomllib.loads((run_dir / "plan.toml").read_text())["plan_id"]

    r = apply(tmp_path, "--resume", str(run_dir), "--set", "run.total_env_steps=4096")
    assert r.returncode == 0, r.stderr
    assert "~ run.total_env_steps: 2048 -> 4096" in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("  ~ ")] == [
        "  ~ run.total_env_steps: 2048 -> 4096",
        "  ~ run.effective_env_steps: 2048 -> 4096",
    ], r.stderr
    m = json.loads((run_dir / "manifest.json").read_text())
    new_id = tomllib.loads((run_dir / "plan.toml").read_text())["plan_id"]
    assert new_id != old_id and m["plan_id"] == new_id and m["status"] == "succeeded"
    assert [s["plan_id"] for s in m["sessions"]] == [old_id, new_id]
    assert m["counters"]["env_steps"] == 4096
    assert (run_dir / f"plan.{old_id.removeprefix('sha256:')[:12]}.toml").is_file()
    steps = sorted(int(c.stem.split("-")[1]) for c in (run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert steps == [2048, 3072, 4096]  # run.checkpoint_keep = 3
    r = subprocess.run([*UNILAB, "manifest", "validate", str(run_dir)], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "3 of 3 checkpoints match" in r.stdout, r.stdout + r.stderr
    # A checkpoint of the plan before the extension still evaluates.
    r = subprocess.run(
        [*UNILAB, "eval", str(run_dir), "--episodes", "2", "--checkpoint", "ckpt-0000000002048.pt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "hangup"])
def test_resume_continues_counters(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C, SIGTERM as a scheduler, `timeout` or `docker stop` sends it, or SIGHUP from a closed
    SSH session, stops with a final checkpoint. Each goes to the whole process group, as a terminal
    or `kill -- -PGID` sends it: the collector and its physics workers leave the stop to the learner."""
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    proc = apply_in_background(tmp_path, spec, mark, total_env_steps=4800, new_session=True)
    run_dir = _wait_for_checkpoint(tmp_path)
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    # The run prints its resume command; it needs no spec or plan argument (the run's own plan).
    resume = [line.removeprefix("resume with: ") for line in out.splitlines() if line.startswith("resume with: ")]
    assert resume == [f"unilab apply --resume {run_dir.relative_to(tmp_path)}"], out
    done = manifest["counters"]["env_steps"]
    # Its rates end where its counters do (a stop between two log points logs once more).
    t = manifest["timing"]
    assert abs(t["env_steps_per_s"] * t["train_s"] - done) <= 0.01 * done, (t, done)
    assert leftover_pids(mark) == []
    # The final checkpoint holds the interrupted run's counters; resuming continues from them.
    blob = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert blob["env_steps"] == done
    r = apply(tmp_path, *resume[0].split()[2:])
    assert r.returncode == 0, r.stderr
    # The summary's counters are the whole run's, its time and rates this session's: it says which.
    assert r.stdout.startswith("run succeeded: 4,800 env steps, "), r.stdout
    assert f"(resumed from ckpt-{done:013d}.pt; this session " in r.stdout.splitlines()[0], r.stdout
    m2 = json.loads((run_dir / "manifest.json").read_text())
    assert m2["status"] == "succeeded" and m2["resumed_from"].endswith(f"ckpt-{done:013d}.pt")
    assert m2["counters"]["env_steps"] == 4800 and m2["counters"]["updates"] > manifest["counters"]["updates"]
    kinds = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert kinds.count("run_started") == 2 and "run_interrupted" in kinds and kinds[-1] == "run_finished"
    # The learner, its optimizers and the normalizer continue from the checkpoint (their counts go on
    # from it), and the random warm-up (320 env steps here) is not repeated: every sync of the resumed
    # session updated (`algo.updates_per_step` times) once the fresh replay buffer held one batch (64
    # transitions: 4 syncs of 16 envs) of n-step transitions (g1.toml's n_step = 3: the first appear 2
    # syncs later).
    final = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)["state"]
    before = blob["state"]
    resumed_updates = m2["counters"]["updates"] - manifest["counters"]["updates"]
    per_sync = tomllib.loads(spec.read_text())["algo"]["updates_per_step"]
    assert resumed_updates == per_sync * ((4800 - done) // 16 - (64 // 16 + 3 - 1))
    # Rates are this session's: updates and env steps since the resume, over the same time.
    t = m2["timing"]
    assert t["updates_per_s"] / t["env_steps_per_s"] == pytest.approx(resumed_updates / (4800 - done))
    lf, lb = final["learner"], before["learner"]
    assert lf["num_critic_updates"] == lb["num_critic_updates"] + resumed_updates
    for opt in ("actor_opt", "critic_opt"):
        assert float(lf[opt]["step"]) == float(lb[opt]["step"]) + resumed_updates, opt
    # One normalizer sample per env step: a restored normalizer ends at the run's total.
    assert float(before["normalizer"]["count"]) == done and float(final["normalizer"]["count"]) == 4800
    # The record keeps the checkpoints still on disk from before the resume, digests included.
    on_disk = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert sorted(Path(c["path"]).name for c in m2["checkpoints"]) == on_disk
    from unilab.records.manifest_io import validate_manifest_file

    validate_manifest_file(run_dir / "manifest.json")


def _wait_for_checkpoint(tmp_path: Path, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list((tmp_path / "runs").glob("*/checkpoints/ckpt-*.pt")) if (tmp_path / "runs").exists() else []
        if runs:
            return runs[0].parent.parent
        time.sleep(0.2)
    raise AssertionError("no checkpoint appeared")


def _manifest_with_a_checkpoint(run_dir: Path, timeout: float = 60) -> dict:
    """The run's manifest once it lists a checkpoint: the file is in place a moment before the
    manifest records it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = json.loads((run_dir / "manifest.json").read_text())
        if m["checkpoints"]:
            return m
        time.sleep(0.1)
    raise AssertionError("the manifest never listed the checkpoint")


def test_sigterm_while_the_run_starts_leaves_no_run_directory(tmp_path: Path) -> None:
    """Between the plan file and the manifest (imports, the collector's start) a SIGTERM ends the
    apply as a Ctrl-C there does: nothing ran, so no directory with only a plan is left behind."""
    mark = uuid.uuid4().hex
    proc = subprocess.Popen(
        [*APPLY, str(ROOT / "specs" / "cartpole.toml"), "--quiet"],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("runs/*/plan.toml")) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not list(tmp_path.glob("runs/*/manifest.json")), "the run started before the signal could be sent"
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert list(tmp_path.glob("runs/*")) == []
    assert leftover_pids(mark) == []


def test_a_closed_output_pipe_does_not_end_the_run(tmp_path: Path) -> None:
    """`unilab apply ... | head -1`: the reader has gone, the run goes on to its end and its record."""
    mark = uuid.uuid4().hex
    proc = subprocess.Popen(
        [*APPLY, str(ROOT / "specs" / "cartpole.toml"), "--set", "run.total_env_steps=3000"],
        cwd=tmp_path,
        env=_env(tmp_path, mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"sac on cartpole")
    proc.stdout.close()  # later progress lines and the summary meet a closed pipe
    assert proc.wait(timeout=300) == 0
    manifest = json.loads((only_run_dir(tmp_path) / "manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["counters"]["env_steps"] >= 3000
    assert leftover_pids(mark) == []


def _shm_mappings(pid: int) -> list[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:  # exited meanwhile
        return []
    return [line.split(None, 5)[-1] for line in maps if "/dev/shm/" in line]


def test_sigkill_of_the_collector_fails_fast_and_cleanly(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    proc = apply_in_background(tmp_path, spec, mark, total_env_steps=100000)
    run_dir = _wait_for_checkpoint(tmp_path)
    # Every shared block and channel of the run is unnamed once in use (mapped, not linked in
    # /dev/shm), so however its processes end, a kill -9 of all of them included, none is left behind.
    shm = [line for pid in marked_pids(mark) for line in _shm_mappings(pid)]
    assert shm and all(line.endswith("(deleted)") for line in shm), shm
    collector = json.loads((run_dir / "manifest.json").read_text())["ranks"][0]["collector_pid"]
    os.kill(collector, signal.SIGKILL)
    t0 = time.monotonic()
    _out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20  # noticed at once, not after a collective's timeout (minutes)
    assert proc.returncode == 1
    assert "rank0.collector failed" in err and "SIGKILL" in err and "Traceback" not in err
    assert "leaked shared_memory" not in err  # the tracker cleans up after the collector, silently
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["first_error"]["where"] == "rank0.collector"
    time.sleep(0.5)
    assert leftover_pids(mark) == []
    blob = torch.load(sorted((run_dir / "checkpoints").glob("*.pt"))[-1], weights_only=True)
    assert blob["env_steps"] > 0


def test_a_killed_apply_is_named_and_its_run_resumes_on_a_changed_host(tmp_path: Path) -> None:
    """kill -9 of the apply leaves a manifest that says `running` for ever: `manifest validate`
    refuses to call it valid, eval notes it, and neither changes a file. The run then resumes, as a
    requeued job does, on a host with another CPU set and another patch version of a package: a
    plain resume is refused and names --replan; with it the run is re-planned for this host, the
    changes shown, the counters continue, and the manifest lists both sessions with their plans,
    the first recorded as killed."""
    from importlib import metadata

    spec = spec_copy(tmp_path)
    kept = re.sub(r"(?m)^checkpoint_keep = .*\n", "", spec.read_text())  # the main job's own, if it has one
    spec.write_text(kept.replace("[run]\n", "[run]\ncheckpoint_keep = 50\n", 1))
    mark = uuid.uuid4().hex
    proc = apply_in_background(tmp_path, spec, mark, total_env_steps=4800)
    run_dir = _wait_for_checkpoint(tmp_path)
    first = _manifest_with_a_checkpoint(run_dir)
    assert [(s["pid"], s["ended"]) for s in first["sessions"]] == [(proc.pid, "running")]
    proc.kill()
    proc.communicate(timeout=30)
    assert leftover_pids(mark) == []
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    r = subprocess.run([*UNILAB, "manifest", "validate", str(run_dir)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "was killed without a word" in r.stderr and f"pid {proc.pid}" in r.stderr, r.stderr
    assert f"unilab apply --resume {run_dir}" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([*UNILAB, "eval", str(run_dir), "--episodes", "2"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "note: " in r.stderr and "was killed" in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before

    # The other host: one CPU of this one, and a MuJoCo one patch version on (a dist-info ahead of
    # site-packages is what importlib.metadata reports).
    major, minor, patch = metadata.version("mujoco").split("+")[0].split(".")[:3]
    newer = f"{major}.{minor}.{int(patch) + 1}"
    info = tmp_path / "site" / f"mujoco-{newer}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mujoco\nVersion: {newer}\n")
    env = {**_env(tmp_path, mark), "PYTHONPATH": os.pathsep.join([str(info.parent), os.environ.get("PYTHONPATH", "")])}
    cpu = min(os.sched_getaffinity(0))

    def resume(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*APPLY, "--resume", str(run_dir), "--quiet", *extra],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
        )  # fmt: skip

    r = resume()
    assert r.returncode == 1 and "was planned for other host facts" in r.stderr, r.stderr
    assert f"unilab apply --resume {run_dir} --replan" in r.stderr
    r = resume("--replan")
    assert r.returncode == 0, r.stderr
    assert "this resume records that apply as killed" in r.stderr, r.stderr
    assert "re-planned" in r.stderr and "~ host_facts.cpu.affinity: " in r.stderr, r.stderr
    assert f'~ host_facts.packages.mujoco: "{metadata.version("mujoco")}" -> "{newer}"' in r.stderr
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "succeeded" and m["counters"]["env_steps"] == 4800
    assert [s["ended"] for s in m["sessions"]] == ["killed", "succeeded"]
    old_id, new_id = first["plan_id"], m["plan_id"]
    assert old_id != new_id and [s["plan_id"] for s in m["sessions"]] == [old_id, new_id]
    assert m["sessions"][0]["pid"] == proc.pid and m["sessions"][1]["resumed_from"] is not None
    assert (run_dir / f"plan.{old_id.removeprefix('sha256:')[:12]}.toml").is_file()
    assert m["ranks"][0]["collector_cpu_ids_applied"] == [cpu]
    r = subprocess.run([*UNILAB, "manifest", "validate", str(run_dir)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    older = ["--checkpoint", Path(first["checkpoints"][0]["path"]).name]
    cmd = [*UNILAB, "eval", str(run_dir), "--episodes", "2", *older]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr  # a checkpoint of the run's first plan still evaluates


def test_a_replan_that_would_change_what_is_trained_is_refused(tmp_path: Path) -> None:
    from unilab.plan.diff import Change
    from unilab.plan.replan import trains_differently

    assert trains_differently(Change("changed", "host_facts.packages.torch", "2.13.0+cpu", "2.14.0+cpu"))
    assert not trains_differently(Change("changed", "host_facts.packages.torch", "2.13.0+cpu", "2.13.1+cpu"))
    assert trains_differently(Change("changed", "topology.world_size", 2, 1))
    assert trains_differently(Change("changed", "algo.batch_size", 256, 512))
    assert not trains_differently(Change("changed", "ranks[0].collector_cpu_ids", [1], [0]))
    assert not trains_differently(Change("changed", "learner.precision.effective", "bfloat16", "float32"))


def test_a_killed_physics_worker_fails_the_run_with_a_resume_command(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    proc = apply_in_background(tmp_path, spec, mark, total_env_steps=100000)
    run_dir = _wait_for_checkpoint(tmp_path)
    collector = json.loads((run_dir / "manifest.json").read_text())["ranks"][0]["collector_pid"]
    workers = Path(f"/proc/{collector}/task/{collector}/children").read_text().split()
    os.kill(int(workers[0]), signal.SIGKILL)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "physics worker 0" in err and "Traceback" not in err
    assert "check what killed it" in err  # the worker left no report to point at
    assert f"resume with: unilab apply --resume {run_dir.relative_to(tmp_path)}" in err, err
    time.sleep(0.5)
    assert leftover_pids(mark) == []


def test_corrupt_checkpoint_is_refused_and_kept(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    assert apply(tmp_path, str(spec), *SMALL).returncode == 0
    run_dir = only_run_dir(tmp_path)
    ckpt = sorted((run_dir / "checkpoints").glob("*.pt"))[-1]
    good = ckpt.read_bytes()
    ckpt.write_bytes(good[:100])
    before = {p.name: p.stat().st_size for p in run_dir.rglob("*") if p.is_file()}
    r = apply(tmp_path, str(run_dir / "plan.toml"), "--resume", str(run_dir))
    assert r.returncode == 1 and "is corrupt or unreadable" in r.stderr and "Traceback" not in r.stderr
    assert {p.name: p.stat().st_size for p in run_dir.rglob("*") if p.is_file()} == before
    # A checkpoint that still loads but is not the file the run saved (a byte appended) is refused by
    # the sha256 its manifest recorded, for export as for resume.
    ckpt.write_bytes(good + b"\0")
    for args in (
        ["export", str(run_dir), "--format", "onnx"],
        ["apply", str(run_dir / "plan.toml"), "--resume", str(run_dir)],
    ):
        r = subprocess.run([sys.executable, "-m", "unilab", *args], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 1 and "does not have the sha256 the run recorded" in r.stderr, r.stderr


def test_missing_motion_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path, "g1_motion_tracking.toml")
    r = apply(tmp_path, str(spec), "--set", 'task.motion="clips/none.npz"')
    assert r.returncode == 1 and "task.motion" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_stale_saved_plan_is_refused(tmp_path: Path) -> None:
    facts = json.loads(
        subprocess.run(
            [sys.executable, "-m", "unilab", "host", "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    facts["packages"]["mujoco"] = "4.0.999"  # a tested release (sim.tested-versions), not the one installed
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    plan = tmp_path / "plan.toml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "unilab",
            "plan",
            str(ROOT / "specs/g1.toml"),
            "--host-facts",
            str(tmp_path / "facts.json"),
            "--out",
            str(plan),
        ],
        check=True,
        capture_output=True,
    )
    r = apply(tmp_path, str(plan))
    assert r.returncode == 1
    assert "is stale: packages.mujoco: planned '4.0.999', now" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_what_a_run_prints_without_quiet(tmp_path: Path) -> None:
    """The terminal output a user reads: the layout at start, progress lines (one per interval when
    stderr is not a terminal), and the summary with the run directory; --quiet keeps only the summary."""
    spec = tmp_path / "cartpole.toml"
    spec.write_text((ROOT / "specs" / "cartpole.toml").read_text())
    sets = ["--set", "run.total_env_steps=3000", "--set", "run.log_every_seconds=0.2"]
    cmd = [sys.executable, "-m", "unilab", "apply", str(spec), *sets]
    loud = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env(tmp_path, "loud"))
    assert loud.returncode == 0, loud.stderr
    assert "rank 0 (cpu): " in loud.stderr and "collector on CPUs" in loud.stderr
    progress = [ln for ln in loud.stderr.splitlines() if "env steps" in ln and "ETA" in ln]
    assert progress and "\r" not in loud.stderr  # not a terminal: whole lines, no carriage returns
    assert progress[-1].lstrip().startswith("100.0%"), progress[-1]
    out = loud.stdout.splitlines()
    assert out[0].startswith("run succeeded: 3,0") and out[-1].startswith("run directory: runs/cartpole")
    assert re.search(r"mean episode return -?[0-9.]+, length [0-9]+ steps, over the last [0-9]+ episodes?", loud.stdout)
    run_dir_text = out[-1].removeprefix("run directory: ")
    assert out[-2] == f"next: unilab eval {run_dir_text} --video {run_dir_text}/eval.mp4   (score and film the policy)"
    # Each iteration record breaks the episodes' return into its reward terms (they add up to it)
    # and says how many episodes terminated rather than timed out.
    run_dir = tmp_path / out[-1].removeprefix("run directory: ")
    events = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines()]
    last = [e for e in events if e["event"] == "iteration" and e["episode_return"] is not None][-1]
    assert last["episode_reward"] and 0.0 <= last["terminated_fraction"] <= 1.0
    assert abs(sum(last["episode_reward"].values()) - last["episode_return"]) < 1e-3 * max(1.0, last["episode_return"])
    # An interval in which no episode ended carries no episode figures (not the previous ones again).
    its = [e for e in events if e["event"] == "iteration"]
    for before, after in itertools.pairwise(its):
        if after["episodes"] == before["episodes"]:
            assert after["episode_return"] is None and after["episode_reward"] == {}, after
    # The rates are over the training loop, which the summary names beside the whole wall time.
    m = json.loads((tmp_path / out[-1].removeprefix("run directory: ") / "manifest.json").read_text())
    t = m["timing"]
    assert 0 < t["train_s"] <= t["wall_s"]
    assert f"in {t['wall_s']:.0f} s ({t['train_s']:.0f} s training: {t['env_steps_per_s']:,.0f} env steps/s" in out[0]
    quiet = subprocess.run(
        [*cmd, "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env(tmp_path, "quiet")
    )
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert quiet.stdout.splitlines()[0].startswith("run succeeded")


def test_a_collector_that_cannot_start_leaves_no_run_directory(tmp_path: Path) -> None:
    """A robot file the plan accepts (its checks read the XML) but MuJoCo cannot compile fails when
    the collector builds the model: the collector's own error and fix reach the user, and nothing
    ran, so no run directory is kept and nothing says to resume one."""
    from unilab.robot.model import BUILTIN_MJCF

    bad = tmp_path / "g1.xml"
    text = BUILTIN_MJCF.read_text()
    target = '<geom name="head_collision" class="trunk" type="sphere" size="0.06"'
    assert target in text
    bad.write_text(text.replace(target, target.replace('size="0.06"', 'size="-0.06"')))
    r = apply(tmp_path, str(spec_copy(tmp_path)), "--set", f'task.robot_mjcf="{bad}"')
    assert r.returncode == 1
    assert r.stderr.startswith("error: rank0.collector failed: MuJoCo cannot compile robot MJCF"), r.stderr
    assert "must be positive" in r.stderr and "fix: correct the file" in r.stderr
    assert "mujoco.MjModel.from_xml_path(" in r.stderr  # a check that runs on a headless server
    assert "Traceback" not in r.stderr and "resume" not in r.stderr and r.stderr.count("fix:") == 1
    assert not (tmp_path / "runs").exists()  # run.output_dir too: this run made it, and it is empty


def test_a_run_directory_in_use_is_not_resumed_twice(tmp_path: Path) -> None:
    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    proc = apply_in_background(tmp_path, spec, mark, total_env_steps=100000)
    run_dir = _wait_for_checkpoint(tmp_path)
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    r = apply(tmp_path, str(run_dir / "plan.toml"), "--resume", str(run_dir))
    assert r.returncode == 1 and f"run directory {run_dir} is in use by another unilab apply" in r.stderr, r.stderr
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    # The refused resume wrote nothing: one session in the events, and every checkpoint the manifest
    # lists has the bytes the running apply saved (its own pruning may have removed `before`'s).
    kinds = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert kinds.count("run_started") == 1, kinds
    from unilab.records.manifest_io import validate_manifest_file

    _m, report = validate_manifest_file(run_dir)
    assert report.checkpoints_verified >= 1 and before
    assert leftover_pids(mark) == []


def test_a_stop_before_the_first_observation_leaves_the_resumed_checkpoint_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A stop that lands while a resumed run's collector is still starting used to write an empty
    checkpoint under the name of the one it resumed from; the next resume then failed."""
    from unilab.cli.main import main
    from unilab.collect.collector_client import CollectorClient
    from unilab.records.checkpoint import load_checkpoint

    spec = spec_copy(tmp_path)
    mark = uuid.uuid4().hex
    proc = apply_in_background(tmp_path, spec, mark, total_env_steps=100000)
    run_dir = _wait_for_checkpoint(tmp_path)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    ckpts = run_dir / "checkpoints"
    before = {p.name: p.read_bytes() for p in ckpts.iterdir()}

    monkeypatch.setattr(CollectorClient, "wait_obs", lambda self, should_stop: False)  # as if stopped now
    monkeypatch.chdir(tmp_path)
    cpus = os.sched_getaffinity(0)
    assert main(["apply", "--resume", str(run_dir.relative_to(tmp_path)), "--quiet"]) == 130
    # The learner pinned this process to its CPUs for the run, not for whatever runs next here.
    assert os.sched_getaffinity(0) == cpus
    capsys.readouterr()
    assert {p.name: p.read_bytes() for p in ckpts.iterdir()} == before
    newest = sorted(ckpts.glob("ckpt-*.pt"))[-1]
    assert "learner" in load_checkpoint(newest, plan_id=None)["state"]

    # A unilab whose task builds other observations than the checkpoint's policy read (an upgrade)
    # refuses the resume in one paragraph; the run stays as it was, and its log closes the session.
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    start = CollectorClient.start

    def start_with_other_layout(self: CollectorClient) -> Any:
        hello = start(self)
        return dataclasses.replace(hello, obs_terms=list(reversed(hello.obs_terms)))

    monkeypatch.setattr(CollectorClient, "start", start_with_other_layout)
    manifest = (run_dir / "manifest.json").read_bytes()
    assert main(["apply", "--resume", str(run_dir.relative_to(tmp_path)), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "error: the checkpoint to resume: the checkpoint's policy read another observation layout" in err, err
    assert "Traceback" not in err and err.count("fix:") == 1 and "unilab apply --resume" in err
    assert (run_dir / "manifest.json").read_bytes() == manifest
    assert {p.name: p.read_bytes() for p in ckpts.iterdir()} == before
    last = json.loads((run_dir / "events.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "run_not_started" and last["status"] == "failed"
    assert "another observation layout" in last["first_error"]["message"]
