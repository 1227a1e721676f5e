"""`unilab eval RUN_DIR`."""

from __future__ import annotations

import argparse
import sys

from unilab.cli.args import add_checkpoint_arg, add_run_dir_arg, path_arg

DEFAULT_EPISODES = 64


def cmd_eval(args: argparse.Namespace) -> int:
    from unilab.evaluate.rollout import EvalRequest, evaluate, render, report_json
    from unilab.run.run_lock import killed_note

    if (note := killed_note(args.run_dir)) is not None:  # eval goes on: its checkpoints are intact
        print(f"note: {note}; its newest checkpoint is what it saved before", file=sys.stderr)
    report = evaluate(
        EvalRequest(
            run_dir=args.run_dir,
            episodes=args.episodes,
            seed=args.seed,
            checkpoint=args.checkpoint,
            workers=args.workers,
            progress=not args.json,
            video=args.video,
            video_episodes=args.video_episodes,
        )
    )
    print(report_json(report) if args.json else render(report), end="" if args.json else "\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "eval",
        help="play a run's policy for a number of episodes and report returns",
        description="Load RUN_DIR's newest checkpoint (or --checkpoint), verified against the digest the run "
        "recorded, and play its deterministic policy on the run's task: every world plays exactly one "
        "episode from a reset, on CPU MuJoCo whatever backend the run trained on. Prints the episode "
        "return, length, how the episodes ended, each reward term and, for g1_walk, how closely the base followed "
        "its velocity command (beside a robot standing still); writes nothing but the --video file.",
    )
    add_run_dir_arg(sp)
    sp.add_argument(
        "--episodes",
        type=int,
        default=DEFAULT_EPISODES,
        metavar="N",
        help=f"episodes to play, one per world (default {DEFAULT_EPISODES})",
    )
    sp.add_argument("--seed", type=int, default=0, help="seed of the resets and observation noise (default 0)")
    add_checkpoint_arg(sp)
    sp.add_argument(
        "--workers", type=int, metavar="N", help="CPU MuJoCo worker processes (default: one per CPU this may use)"
    )
    sp.add_argument(
        "--video",
        type=path_arg,
        metavar="FILE.mp4",
        help="also film world 0's episode (worlds 0..K-1 with --video-episodes) into an MP4 file: 640x480, at most "
        "30 frames per second, the camera following the robot; rendered with MuJoCo offscreen (MUJOCO_GL, "
        "default egl); an existing file is replaced",
    )
    sp.add_argument(
        "--video-episodes",
        type=int,
        metavar="K",
        help="with --video: film the episodes of worlds 0 to K-1, one after the other (default 1; at most 64 "
        "and --episodes)",
    )
    sp.add_argument("--json", action="store_true", help="print the report as JSON (schemas/eval.v1.json)")
    sp.set_defaults(func=cmd_eval)
