"""Entry point of one rank under torchrun, for runs across nodes:

    torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        -m unilab.rank PLAN.toml [--run-dir DIR] [--resume RUN_DIR]

Every node runs it with the same saved plan (compiled for the cluster with --host-facts); GPU ranks
run on the node whose GPUs the plan pins by UUID. Each rank checks that its node has the planned
package versions, its planned GPU, the CPUs it is pinned to and the planned input files (by sha256). Rank
0 creates the run directory (or uses --run-dir, which must not hold a run yet) once every rank has
joined, holds its lock as `unilab apply` does, and records the run; the other ranks write nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from unilab.cli.args import path_arg
from unilab.errors import UnilabError
from unilab.host import probe
from unilab.inputfile import file_error
from unilab.lifetime import die_with_parent
from unilab.plan.fingerprint import compare_fingerprint
from unilab.plan.inputs import check_planned_inputs
from unilab.records.progress import cpu_ranges

if TYPE_CHECKING:
    from unilab.plan.models import Plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m unilab.rank", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("plan", type=path_arg, metavar="PLAN.toml")
    ap.add_argument("--run-dir", type=path_arg, help="rank 0's run directory (default: a new one under run.output_dir)")
    ap.add_argument("--resume", type=path_arg, metavar="RUN_DIR", help="continue RUN_DIR from its last checkpoint")
    args = ap.parse_args(argv)
    try:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise UnilabError(
                "unilab.rank runs under torchrun (RANK and WORLD_SIZE are not set)",
                fix="use `unilab apply PLAN.toml` on one node, or launch with torchrun",
            )
        # A rank ends with its torchrun agent: killed alone (kill -9 of the agent), it would leave
        # the rank training on with nobody to report it, for as long as its collectives succeed.
        die_with_parent(os.getppid())
        from unilab.plan.inputs import check_init_from
        from unilab.plan.render import load_plan
        from unilab.run.launch import check_world_size, rank_entry
        from unilab.run.rank_dir import check_run_dir_free
        from unilab.run.run_dir import new_run_dir, resolve_resume
        from unilab.run.run_lock import lock_run_dir

        plan = load_plan(args.plan)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        check_world_size(plan, world)  # before rank 0 creates anything
        check_node(plan, rank)
        if args.resume is None:  # a resumed run continues from its own checkpoint
            check_init_from(plan.run, Path.cwd())
        run_dir, ckpt = args.run_dir, None
        rank0 = rank == 0
        if args.resume is not None:
            if rank0:  # held until the process ends, as `unilab apply` holds it: one writer per run
                lock_run_dir(args.resume)
            ckpt = resolve_resume(plan, args.resume)
            run_dir = args.resume
        elif rank0:
            run_dir = run_dir if run_dir is not None else new_run_dir(plan)
            check_run_dir_free(run_dir)  # made by rank_entry once every rank has joined
        code = rank_entry(
            str(args.plan.resolve()),
            str(run_dir) if run_dir else None,
            str(ckpt) if ckpt else None,
            sys.stderr.isatty(),
            make_dir=rank0 and args.resume is None,
        )
        return int(code or 0)
    except (UnilabError, OSError) as exc:
        err = exc if isinstance(exc, UnilabError) else file_error(exc)
        if err is None:  # file_error covers every OSError
            raise
        print(err.render(), file=sys.stderr)
        return err.exit_code


def check_node(plan: Plan, rank: int) -> None:
    """What `unilab apply PLAN` checks, as far as it holds on every node of a cluster. The whole
    stale-plan comparison does not (each node has its own CPU set), but the software must be the
    one planned for, the input files the ones whose digests the plan recorded, a GPU rank's GPU
    (pinned by UUID) must be on this node, and so must the CPUs the rank is pinned to."""

    facts = probe.probe_host()
    rp = plan.ranks[rank]
    if rp.device == "cuda" and rp.gpu_uuid and facts.gpu_by_uuid(rp.gpu_uuid) is None:
        nv = facts.nvidia
        why = f" ({'' if nv.driver_present else 'no NVIDIA driver: '}{nv.nvml_error})" if nv.nvml_error else ""
        raise UnilabError(
            f"rank {rank}'s planned GPU {rp.gpu_uuid} is not on this node{why}",
            detail="a plan pins each GPU rank to a GPU by its UUID on the host it was compiled for; "
            "this unilab plans the GPUs of one node",
            fix="run a GPU plan's ranks on the node it was planned for (torchrun --nnodes 1, or unilab apply "
            "PLAN there); only CPU ranks can spread over nodes",
        )
    planned_cpus = sorted(set(rp.collector_cpu_ids) | set(rp.learner_cpu_ids))
    allowed = set(facts.cpu.affinity)
    outside = [c for c in planned_cpus if c not in allowed]
    if outside:
        raise UnilabError(
            f"rank {rank} is planned on CPUs {cpu_ranges(planned_cpus)}, but CPU {outside[0]} is not in this node's "
            f"CPU set {cpu_ranges(facts.cpu.affinity)}",
            detail="a plan pins every rank to its block of the recorded node's CPU ids, on whatever node it runs",
            fix="run the ranks on nodes that have the recorded node's CPUs, or re-plan with host facts recorded "
            "on the smallest node (unilab host --json > node.json; unilab plan SPEC --host-facts node.json "
            "--out PLAN.toml)",
        )
    changes = [c for c in compare_fingerprint(plan.host_facts, facts) if c.key.startswith("packages.")]
    if changes:
        raise UnilabError(
            f"this node's software differs from the plan's: {changes[0].render()}"
            + (f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""),
            detail="every node of a run must run the package versions the plan was compiled against",
            fix="install the planned versions on this node, or re-plan with host facts recorded on it "
            "(unilab host --json > node.json; unilab plan SPEC --host-facts node.json --out PLAN.toml)",
        )
    check_planned_inputs(plan.task, Path.cwd())


if __name__ == "__main__":
    from unilab.exit_status import exit_with

    exit_with(main())
