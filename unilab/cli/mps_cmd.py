"""`unilab mps start|stop|status|env`."""

from __future__ import annotations

import argparse
import shlex
import signal
import time

from unilab.errors import UnilabError
from unilab.host import probe
from unilab.host.mps_registry import probe_service, state_directory
from unilab.mps import service

EXIT_OK, EXIT_ERROR = 0, 1


def _state(args: argparse.Namespace):

    return state_directory()


def _cmd_start(args: argparse.Namespace) -> int:

    state = _state(args)
    svc = service.start(probe.probe_host(), args.gpus, args.name, state)
    print(f"MPS service {svc.name} running: GPU {svc.gpu_uuid}, daemon pid {svc.daemon_pid}, pipe {svc.pipe_directory}")
    if args.daemon:
        return EXIT_OK
    # Foreground: keep the service for as long as this command runs (a tmux pane, a job step).
    print("press Ctrl-C to stop it (start with --daemon to leave it running)", flush=True)
    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.append(True))

    entry = service.find(args.name, state)
    while not stopping and probe_service(entry).daemon_alive:
        time.sleep(0.5)
    if not stopping:
        raise UnilabError(f"MPS daemon of {args.name} exited on its own", fix=f"read its log in {entry.log_directory}")
    service.stop(args.name, state)
    print(f"MPS service {args.name} stopped")
    return EXIT_OK


def _cmd_stop(args: argparse.Namespace) -> int:

    svc = service.stop(args.name, _state(args))
    if svc.daemon_alive:
        print(f"MPS service {svc.name} stopped (was pid {svc.daemon_pid})")
    else:  # stop() only unregistered it
        print(f"MPS service {svc.name} was not running (pid {svc.daemon_pid} had exited); unregistered it")
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    import shutil

    if shutil.which(service.CONTROL_BINARY) is None:
        raise UnilabError(
            f"{service.CONTROL_BINARY} is not on PATH: the NVIDIA MPS tools are not installed here",
            fix="install the NVIDIA driver's MPS tools (e.g. the nvidia-utils package) on this GPU host; "
            'without MPS, plan with training.cuda_process_sharing = "none"',
        )
    services = service.status(_state(args))
    if not services:
        print("no MPS services registered (start one with: unilab mps start --gpus 0 --name train-gpu0 --daemon)")
        return EXIT_OK
    bad = 0
    for s in services:
        ok = s.control_socket_exists and s.daemon_alive
        bad += not ok
        print(
            f"{s.name}  {s.gpu_uuid}  pid {s.daemon_pid}  {'running' if ok else 'NOT running'}  pipe {s.pipe_directory}"
        )
    return EXIT_OK if not bad else EXIT_ERROR


def _cmd_env(args: argparse.Namespace) -> int:

    entry = service.find(args.name, _state(args))
    live = probe_service(entry)
    if not (live.daemon_alive and live.control_socket_exists):  # clients would silently run without MPS
        raise UnilabError(
            f"MPS service {args.name} is registered but not running (daemon pid {live.daemon_pid})",
            detail="CUDA processes given its environment would run without MPS and not say so",
            fix=f"unilab mps stop --name {args.name}; "
            f"unilab mps start --gpus {entry.gpu_uuid} --name {args.name} --daemon",
        )
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        print(f"export {k}={shlex.quote(service.service_env(entry, {})[k])}")
    return EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mps",
        help="start, stop and inspect NVIDIA MPS daemons (one per GPU)",
        description="Manage one NVIDIA MPS control daemon per GPU, each with its own pipe and log "
        "directories under $UNILAB_STATE_DIR/mps/NAME (else $XDG_STATE_HOME/unilab/mps/NAME, "
        "$XDG_STATE_HOME defaulting to ~/.local/state). "
        "Training never starts or stops daemons; plans refer to these services by GPU UUID.",
    )
    msub = p.add_subparsers(dest="mps_command", metavar="ACTION", required=True)
    sp = msub.add_parser("start", help="start a daemon for one GPU and register it")
    sp.add_argument("--gpus", required=True, metavar="GPU", help="NVML index or UUID of the GPU (one GPU)")
    sp.add_argument("--name", required=True, help="service name, e.g. train-gpu0")
    sp.add_argument(
        "--daemon",
        action="store_true",
        help="return once the daemon runs (default: stay in the foreground, stop it on Ctrl-C)",
    )
    sp.set_defaults(func=_cmd_start)
    sp = msub.add_parser("stop", help="send `quit` to a service's daemon, wait, unregister")
    sp.add_argument("--name", required=True)
    sp.set_defaults(func=_cmd_stop)
    sp = msub.add_parser("status", help="list registered services (exit 1 if any is not running)")
    sp.set_defaults(func=_cmd_status)
    sp = msub.add_parser("env", help="print the environment a CUDA client needs to use a service")
    sp.add_argument("--name", required=True)
    sp.set_defaults(func=_cmd_env)
