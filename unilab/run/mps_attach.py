"""MPS in a run: before anything is built, re-check each rank's planned MPS service (control
socket, daemon alive, the GPU it serves) and give the rank's processes its environment; after
CUDA has initialised, confirm that an MPS server actually runs for it. CUDA clients that cannot
reach a daemon silently run without MPS, so a run that asked for MPS and did not get it fails.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from dataclasses import dataclass

from unilab.errors import UnilabError
from unilab.host.mps_registry import CONTROL_BINARY, CONTROL_TIMEOUT_S, find_entry, probe_service
from unilab.plan.models import Plan


@dataclass(frozen=True)
class MpsAttachment:
    rank: int
    service: str
    gpu_uuid: str
    pipe_directory: str
    daemon_pid: int | None
    server_pids: tuple[int, ...] = ()
    log_directory: str | None = None  # the service's, as registered

    @property
    def validated(self) -> bool:
        return bool(self.server_pids)


def _refuse(service: str, condition: str, gpu_hint: str) -> UnilabError:
    return UnilabError(
        f"MPS service {service!r} cannot be used: {condition}",
        detail='the plan asked for cuda_process_sharing = "mps"; without the daemon CUDA would silently run '
        "without MPS, so the run stops instead",
        fix=f"unilab mps stop --name {service}; unilab mps start --gpus {gpu_hint} --name {service} --daemon; re-plan",
    )


def revalidate(plan: Plan, rank: int) -> MpsAttachment | None:
    """Check the rank's planned service now, before any env, learner or collector is built."""
    rp = plan.ranks[rank]
    if plan.cuda_process_sharing.effective != "mps" or rp.mps is None:
        return None
    name, uuid = rp.mps.service, rp.gpu_uuid or ""
    entry = find_entry(name)
    if entry is None:
        raise _refuse(name, "it is no longer registered", uuid)
    facts = probe_service(entry)
    if facts.gpu_uuid != uuid:
        raise _refuse(name, f"it now serves GPU {facts.gpu_uuid}, the plan's rank {rank} runs on {uuid}", uuid)
    if facts.pipe_directory != rp.mps.pipe_directory:
        raise _refuse(name, f"its pipe directory is now {facts.pipe_directory}, planned {rp.mps.pipe_directory}", uuid)
    if not facts.control_socket_exists:
        raise _refuse(name, f"control socket {facts.pipe_directory}/control does not exist", uuid)
    if not facts.daemon_alive:
        raise _refuse(name, f"daemon pid {facts.daemon_pid} is not running", uuid)
    return MpsAttachment(rank, name, uuid, facts.pipe_directory, facts.daemon_pid, log_directory=entry.log_directory)


def apply_env(att: MpsAttachment, entry_log_dir: str | None = None) -> None:
    """The rank's processes (this one and the collector it starts) become clients of the service:
    set before CUDA initialises, inherited by children."""
    os.environ["CUDA_VISIBLE_DEVICES"] = att.gpu_uuid
    os.environ["CUDA_MPS_PIPE_DIRECTORY"] = att.pipe_directory
    if entry_log_dir:
        os.environ["CUDA_MPS_LOG_DIRECTORY"] = entry_log_dir


def server_pids(pipe_directory: str) -> tuple[int, ...]:
    """PIDs of the MPS servers the control daemon runs (`get_server_list`)."""
    return _ask_pids(pipe_directory, "get_server_list")


def client_pids(pipe_directory: str, server_pid: int) -> tuple[int, ...]:
    """PIDs of the CUDA processes connected to one MPS server (`get_client_list PID`)."""
    return _ask_pids(pipe_directory, f"get_client_list {server_pid}")


def _ask_pids(pipe_directory: str, command: str) -> tuple[int, ...]:
    """Send one command to the control daemon and read back the PIDs it lists."""
    verb = command.split()[0]
    binary = shutil.which(CONTROL_BINARY)
    if binary is None:
        raise UnilabError(
            f"{CONTROL_BINARY} is not on PATH, so the MPS attachment cannot be confirmed",
            fix='install the NVIDIA MPS tools, or plan with cuda_process_sharing = "none"',
        )
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": pipe_directory}
    try:
        r = subprocess.run(
            [binary], input=f"{command}\n", env=env, capture_output=True, text=True, timeout=CONTROL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise UnilabError(
            f"`{verb}` to the MPS daemon at {pipe_directory} did not answer within {CONTROL_TIMEOUT_S:g} s",
            detail="the MPS attachment cannot be confirmed, so the run stops",
            fix="check the daemon (unilab mps status, its log); restart it with unilab mps stop/start and re-plan",
        ) from None
    except OSError as exc:
        raise UnilabError(
            f"cannot run {binary}: {exc.strerror or exc}",
            detail="the MPS attachment cannot be confirmed, so the run stops",
            fix="reinstall the NVIDIA MPS tools (the binary must be executable), or plan with "
            'cuda_process_sharing = "none"',
        ) from None
    if r.returncode != 0:
        raise UnilabError(
            f"`{verb}` to the MPS daemon at {pipe_directory} failed: {(r.stderr or r.stdout).strip()[:200]}",
            fix="unilab mps status",
        )
    return tuple(int(tok) for tok in r.stdout.split() if tok.isdigit())


def confirm_attached(att: MpsAttachment) -> MpsAttachment:
    """After this process's CUDA context exists: the daemon must run a server and list this process
    among its clients (a process whose CUDA initialised before it had the MPS environment runs
    without MPS, even when the rank's collector is a client)."""
    pids = server_pids(att.pipe_directory)
    if not pids:
        raise UnilabError(
            f"rank {att.rank}: CUDA is initialised but MPS service {att.service!r} runs no server: the process "
            "is not an MPS client",
            detail=f"daemon pid {att.daemon_pid}, pipe directory {att.pipe_directory}",
            fix="check the daemon log (unilab mps status), restart the service, re-plan",
        )
    me = os.getpid()
    if not any(me in client_pids(att.pipe_directory, server) for server in pids):
        raise UnilabError(
            f"rank {att.rank}: the learner (pid {me}) is not a client of MPS service {att.service!r}",
            detail=f"server pids {', '.join(map(str, pids))} list other clients; the learner's CUDA context "
            "was made without the MPS environment",
            fix='report this as a bug with the rank\'s events.jsonl; meanwhile plan with cuda_process_sharing = "none"',
        )
    return dataclasses.replace(att, server_pids=pids)
