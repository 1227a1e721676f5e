"""The W&B mirror (`[run.wandb]`) with the real wandb package in offline mode: the run's scalars,
its plan as config and its final manifest land in RUN_DIR/wandb/, and an online request that
cannot be honoured is refused before anything runs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

SMALL = [
    "--set",
    "run.total_env_steps=3200",
    "--set",
    "algo.warmup_env_steps=320",
    "--set",
    "algo.batch_size=64",
    "--set",
    "run.log_every_seconds=0.5",
]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**env, "HOME": str(home), "UNILAB_STATE_DIR": str(tmp_path / "state"), **extra}


def _apply(tmp_path: Path, *sets: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unilab", "apply", str(ROOT / "specs" / "cartpole.toml"), *SMALL, *sets, "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _records(path: Path) -> list[Any]:
    """The records of a W&B run file: W&B's 7-byte header, then LevelDB log blocks of 32 KiB whose
    chunks (crc32, length, type) carry protobuf Records (first/middle/last chunks are joined)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, out, cur = path.read_bytes(), 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        cur, pos = cur + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(cur)
            out.append(record)
            cur = b""
    return out


def test_offline_mirror_holds_the_scalars_config_and_final_manifest(tmp_path: Path) -> None:
    r = _apply(tmp_path, "--set", 'run.wandb={mode="offline", project="unilab-test", tags=["ci"]}', env=_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    (local,) = (run_dir / "wandb").glob("offline-run-*")
    (run_file,) = local.glob("run-*.wandb")
    records = _records(run_file)

    history = [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
        for rec in records
        if rec.WhichOneof("record_type") == "history"
    ]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    iterations = [e for e in events if e["event"] == "iteration"]
    assert len(history) == len(iterations) > 0
    assert [h["env_steps"] for h in history] == [e["env_steps"] for e in iterations]  # the x axis
    returns = [h for h in history if "episode/return" in h]
    assert returns and all("learner/critic_loss" in h and "perf/env_steps_per_s" in h for h in history)
    assert returns[-1]["episode/return"] == pytest.approx(
        [e for e in iterations if e["episode_return"] is not None][-1]["episode_return"]
    )

    (run,) = [rec.run for rec in records if rec.WhichOneof("record_type") == "run"]
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert config["plan_id"] == manifest["plan_id"] and run.project == "unilab-test" and list(run.tags) == ["ci"]
    assert (local / "files" / "manifest.json").read_text() == (run_dir / "manifest.json").read_text()
    assert manifest["status"] == "succeeded"
    assert any(e["event"] == "wandb_mirror" and e["mode"] == "offline" for e in events)


def test_online_without_an_api_key_is_refused_before_the_run(tmp_path: Path) -> None:
    r = _apply(tmp_path, "--set", 'run.wandb={mode="online"}', env=_env(tmp_path))
    assert r.returncode == 1
    assert "run.wandb.mode = online, but no W&B API key is configured" in r.stderr
    assert 'run.wandb.mode = "offline"' in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_auto_goes_offline_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from unilab.records.wandb_mirror import choose_mode

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    why = "no W&B API key is configured (WANDB_API_KEY or `wandb login`)"
    assert choose_mode("auto") == ("offline", why)
    assert choose_mode("offline") == ("offline", "run.wandb.mode = offline")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    assert choose_mode("auto") == ("offline", "http://127.0.0.1:9 does not answer")


def _remote_addresses(trace: str) -> list[str]:
    """The non-loopback IPv4/IPv6 addresses an strace log of connect/sendto/sendmsg calls names."""
    import re

    found = re.findall(r'sin_addr=inet_addr\("([\d.]+)"\)|inet_pton\(AF_INET6, "([0-9a-f:.]+)"', trace)
    addrs = [a or b for a, b in found]
    return [a for a in addrs if not (a.startswith("127.") or a in ("::1", "0.0.0.0") or a.startswith("::ffff:127."))]


def test_offline_means_nothing_leaves_the_machine(tmp_path: Path) -> None:
    """Every process of an offline-mirrored run, traced: no connection and no DNS query beyond loopback
    (the wandb SDK would otherwise probe W&B's server for its usage telemetry at the end of the run)."""
    import shutil

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("needs strace to watch the run's network calls")
    log = tmp_path / "net.trace"
    cmd = [
        strace, "-f", "-e", "trace=connect,sendto,sendmsg,sendmmsg", "-e", "signal=none", "-o", str(log),
        sys.executable, "-m", "unilab", "apply", str(ROOT / "specs" / "cartpole.toml"), *SMALL,
        "--set", 'run.wandb={mode="offline"}', "--quiet",
    ]  # fmt: skip
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert list((next((tmp_path / "runs").iterdir()) / "wandb").glob("offline-run-*"))
    trace = log.read_text(errors="replace")
    assert "connect(" in trace  # the trace saw the run's own (local) connections
    assert _remote_addresses(trace) == [], [ln for ln in trace.splitlines() if "AF_INET" in ln][:5]
