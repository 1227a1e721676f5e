"""`unilab play RUN_DIR`."""

from __future__ import annotations

import argparse

from unilab.cli.args import add_checkpoint_arg, add_run_dir_arg
from unilab.extras import require
from unilab.stop import StopFlag

DEFAULT_PORT = 8080
STATUS_EVERY_S = 2.0  # a status line this often when stdout is not a terminal (a log file, a test)


def cmd_play(args: argparse.Namespace) -> int:
    require("viser", "play", "`unilab play` (the browser viewer)")  # before any other work
    from unilab.play.session import PlayRequest, open_session
    from unilab.play.viewer import Viewer, check_port, free_port, say, serve

    if args.port is not None:
        check_port(args.host, args.port)
        port = args.port
    else:
        port = free_port(args.host, DEFAULT_PORT)
    session = open_session(
        PlayRequest(run_dir=args.run_dir, checkpoint=args.checkpoint, worlds=args.worlds, seed=args.seed)
    )
    stop = StopFlag()
    try:
        ckpt = session.checkpoint.name if session.checkpoint is not None else "?"
        label = (
            f"**{session.task.name}** · `{args.run_dir}` · {ckpt} ({session.checkpoint_env_steps:,} env steps trained)"
        )
        viewer = Viewer(session, args.host, port, label)
        try:
            say(
                f"unilab play: {args.run_dir}, {ckpt} ({session.checkpoint_env_steps:,} env steps), {session.task.name}"
            )
            if args.port is None and port != DEFAULT_PORT:
                say(f"port {DEFAULT_PORT} is in use: serving on {port}")
            say(f"serving on {viewer.url} (open it in a browser; Ctrl-C stops)")
            stop.install()
            serve(session, viewer, stop, STATUS_EVERY_S)
        finally:
            stop.restore()
            viewer.close()
    finally:
        session.close()
    say("stopped")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "play",
        help="drive a run's policy live in the browser (the viser viewer: `bash tools/setup.sh play`)",
        description="Load RUN_DIR's newest checkpoint (or --checkpoint), verified against the digest the run "
        "recorded, and play its deterministic policy live on CPU MuJoCo, in real time, in a viewer served to "
        "the browser (viser). For g1_walk: sliders for the velocity command (click a slider's handle, then the "
        "arrow keys step it), the command (green) and the base's velocity (blue) as arrows; for "
        "g1_motion_tracking: the reference pose as a ghost and a clip position to start from; for every task: "
        "pause, step, reset, the live reward terms, the episode's return and how the last episode ended. "
        "Works headless: it serves on localhost and prints the address. Ctrl-C stops it.",
    )
    add_run_dir_arg(sp)
    add_checkpoint_arg(sp)
    sp.add_argument(
        "--port",
        type=int,
        metavar="N",
        help=f"serve on port N, refused when it is in use (default {DEFAULT_PORT}, or the next free one)",
    )
    sp.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to serve on (default 127.0.0.1, this machine only; 0.0.0.0 serves the network)",
    )
    sp.add_argument(
        "--worlds", type=int, default=1, metavar="N", help="worlds played side by side (default 1, at most 16)"
    )
    sp.add_argument("--seed", type=int, default=0, help="seed of the resets and the task's draws (default 0)")
    sp.set_defaults(func=cmd_play)
