"""Data-parallel launch: one process per rank through torch.distributed's elastic launcher (c10d
rendezvous on localhost, no restarts), or through `torchrun ... -m unilab.rank PLAN.toml` across
nodes. Each rank sets its device and NCCL environment from the plan before any collective, joins
the process group and runs `unilab.run.rank_run.run_rank`."""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from unilab.errors import EXIT_INTERRUPTED, UnilabError
from unilab.manifest.models import FirstError, Manifest
from unilab.plan.models import Plan
from unilab.plan.render import load_plan
from unilab.records.manifest_io import utc_now, write_manifest
from unilab.records.run_dir import RunDir
from unilab.run.rank_env import prepare_rank_env
from unilab.run.rank_run import RankJob, run_rank
from unilab.run.run_dir import resume_command
from unilab.run.terminal import terminal_may_go
from unilab.stop import STOP_SIGNALS, StopFlag, signals_via_helper_thread

COLLECTIVE_TIMEOUT = timedelta(minutes=10)  # a rank's first collective waits for every collector to build


def check_world_size(plan: Plan, world: int) -> None:
    """The launcher started as many rank processes as the plan has ranks."""
    n = plan.topology.world_size
    if world != n:
        raise UnilabError(
            f"the plan has {n} rank{'s' if n != 1 else ''}, the launcher started {world}",
            fix=f"launch with --nnodes N --nproc-per-node M where N*M = {n}",
        )


@record
def rank_entry(
    plan_path: str, run_dir: str | None, resume_checkpoint: str | None, progress: bool, make_dir: bool = False
) -> int:
    """The entry point of every rank process (decorated with @record: an exception becomes the
    elastic error file the launcher reports). `make_dir` (rank 0 under torchrun): create `run_dir`
    once the process group has formed, i.e. once every rank has passed its node's checks."""
    # Out of the terminal's process group: a Ctrl-C reaches the launcher, which forwards one SIGINT
    # to every rank, instead of two (the terminal's, then the launcher's) cutting a graceful stop short.
    try:
        os.setpgid(0, 0)
    except OSError:
        pass

    # `launch_ranks` starts the ranks with the stop signals blocked, so that a Ctrl-C while they
    # import torch is not a traceback per rank; from here on a stop signal sets the flag.
    stop = StopFlag()
    stop.install()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if stop():  # stopped while starting: nothing to record, the launcher reports the interruption
        os._exit(EXIT_INTERRUPTED)
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    plan = load_plan(Path(plan_path))
    check_world_size(plan, world)
    mps = prepare_rank_env(plan, rank)  # before set_device: CUDA reads the environment once
    if plan.ranks[rank].device == "cuda":
        torch.cuda.set_device(0)  # the only visible GPU: this rank's, by UUID
    dist.init_process_group(backend=plan.topology.process_group_backend, timeout=COLLECTIVE_TIMEOUT)
    made: list[Path] = []
    try:
        if make_dir and run_dir:
            from unilab.run.rank_dir import make_run_dir

            made = make_run_dir(plan, Path(run_dir))
        job = RankJob(
            plan=plan,
            rank=rank,
            run_dir=Path(run_dir) if run_dir and rank == 0 else None,
            resume_checkpoint=Path(resume_checkpoint) if resume_checkpoint else None,
            progress=progress,
            mps=mps,
        )
        with terminal_may_go():  # a closed pipe or hung-up terminal must not end the rank
            code = run_rank(job, stop)
    finally:
        stop.restore()
        dist.destroy_process_group()
        if make_dir and run_dir:
            from unilab.run.rank_dir import drop_unstarted_run_dir

            drop_unstarted_run_dir(Path(run_dir), made)
    if code == EXIT_INTERRUPTED and stop.signal is not None:
        # The signal came from the launcher shutting the ranks down after a Ctrl-C or SIGTERM (it
        # forwards what it got), or reached the launcher too: it no longer reads their return
        # values, and returning would wait for it to do so until it SIGKILLs us (30 s). The run is
        # already recorded (manifest, final checkpoint), so leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def launch_ranks(plan: Plan, run_dir: Path, resume_checkpoint: Path | None, progress: bool) -> int:
    """Run every rank on this node under the elastic launcher; returns the exit code. A failed rank
    is reported with its first error (from its error file) and the run's manifest says so."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=plan.topology.world_size,
        run_id=run_dir.name,
        rdzv_backend="c10d",
        # Port 0: the rendezvous store binds a free port itself (torchrun's documented single-node
        # form), with no window in which another process can take a port picked beforehand.
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.2,
        start_method="spawn",
    )
    args = (
        str(RunDir(run_dir).plan),
        str(run_dir),
        str(resume_checkpoint) if resume_checkpoint else None,
        progress,
    )
    _quiet_launcher_logs()
    try:
        # The ranks inherit the blocked stop signals and unblock them in rank_entry; this process
        # still gets them, through a helper thread (unilab.stop.signals_via_helper_thread).
        # multiprocessing's resource tracker unblocks SIGINT and SIGTERM after starting itself:
        # started first, it leaves the block alone.
        resource_tracker.ensure_running()
        with signals_via_helper_thread(*STOP_SIGNALS):
            results = elastic_launch(cfg, rank_entry)(*args)
    except ChildFailedError as exc:
        if all(f.exitcode == EXIT_INTERRUPTED for f in exc.failures.values()):
            # A stop request that reached one rank directly (not through this launcher): every rank
            # stopped after the same sync and recorded the run as interrupted; that rank left with
            # os._exit(130), which the launcher counts as a failure. It is an interruption.
            return EXIT_INTERRUPTED
        rank, failure = exc.get_first_failure()
        message = _failure_message(failure)
        _record_failure(run_dir, f"rank{rank}", message)
        raise UnilabError(
            f"rank {rank} failed: {message}",
            detail=f"(pid {failure.pid}, exit code {failure.exitcode})",
            fix=f"read events.jsonl and the manifest in {run_dir}; if it holds a checkpoint, resume with: "
            f"{resume_command(run_dir)}",
        ) from None
    except SignalException:
        return 130
    return max((int(c or 0) for c in results.values()), default=0)


def _quiet_launcher_logs() -> None:
    """The elastic launcher logs a failed rank's whole traceback (and its shutdown steps) to
    stderr; unilab reports the first failure itself, in one paragraph, from the rank's error file.
    UNILAB_DEBUG=1 keeps torch's logs."""
    if os.environ.get("UNILAB_DEBUG"):
        return
    import logging

    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _failure_message(failure: Any) -> str:
    data = failure.error_file_data
    if isinstance(data, dict):
        msg = data.get("message", data)
        if isinstance(msg, dict):
            msg = msg.get("message", str(msg))
        text = str(msg).strip()
        if text and text != "<NONE>":  # torch's placeholder when the rank left no error file
            return text.splitlines()[0]
    if failure.exitcode is not None and failure.exitcode < 0:
        return f"killed by {signal.Signals(-failure.exitcode).name}"
    return failure.message or f"exited with code {failure.exitcode}"


def _record_failure(run_dir: Path, where: str, message: str) -> None:
    """The launcher knows which rank failed first; put that in the manifest (rank 0 may have
    recorded only the secondary error it saw when its peer vanished)."""

    path = RunDir(run_dir).manifest
    if not path.exists():
        return
    try:
        m = Manifest.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:  # ValidationError is a ValueError
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"warning: could not record the failure in {path}: it cannot be read ({why}); "
            f"its first_error may name a secondary error, the first failure was {where}: {message}",
            file=sys.stderr,
        )
        return
    fixed = m.model_copy(
        update={
            "status": "failed",
            "first_error": FirstError(where=where, message=message),
            "updated_at": utc_now(),
            "finished_at": utc_now(),
        }
    )
    try:
        write_manifest(path, fixed, None)
    except UnilabError as exc:
        print(f"warning: could not record the failure in {path}: {exc.summary}", file=sys.stderr)
