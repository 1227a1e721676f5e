"""Entry point of one rank under torchrun, for runs across nodes:

    torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        -m unilab.rank PLAN.toml [--run-dir DIR] [--resume RUN_DIR]

Every node runs it with the same saved plan (compiled for the cluster with --host-facts). Rank 0
creates the run directory (or uses --run-dir) and records the run; the other ranks write nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from unilab.errors import UnilabError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m unilab.rank", description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path, metavar="PLAN.toml")
    ap.add_argument("--run-dir", type=Path, help="rank 0's run directory (default: a new one under run.output_dir)")
    ap.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue RUN_DIR from its last checkpoint")
    args = ap.parse_args(argv)
    try:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise UnilabError(
                "unilab.rank runs under torchrun (RANK and WORLD_SIZE are not set)",
                fix="use `unilab apply PLAN.toml` on one node, or launch with torchrun",
            )
        from unilab.plan.render import load_plan, render
        from unilab.run.apply import new_run_dir, resolve_resume
        from unilab.run.atomic import write_text_atomic
        from unilab.run.launch import rank_entry

        plan = load_plan(args.plan)
        run_dir, ckpt = args.run_dir, None
        if args.resume is not None:
            ckpt = resolve_resume(plan, args.resume)
            run_dir = args.resume
        elif int(os.environ["RANK"]) == 0:
            run_dir = run_dir or new_run_dir(plan)
            run_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(run_dir / "plan.toml", render(plan), "plan")
        code = rank_entry(
            str(args.plan.resolve()),
            str(run_dir) if run_dir else None,
            str(Path.cwd()),
            str(ckpt) if ckpt else None,
            sys.stderr.isatty(),
        )
        return int(code or 0)
    except UnilabError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
