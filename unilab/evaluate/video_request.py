"""Checks of `unilab eval --video FILE --video-episodes K` made before anything is played, and
before MuJoCo is imported (its OpenGL platform is chosen at that import: unilab.evaluate.gl)."""

from __future__ import annotations

import os
from pathlib import Path

from unilab.atomic import check_out_path
from unilab.errors import UnilabError
from unilab.extras import require

MAX_VIDEO_EPISODES = 64  # about 40 s of software rendering per 20 s episode: more is a mistake


def check_video_request(video: Path | None, video_episodes: int | None, episodes: int) -> int:
    """The number of episodes to film (0 without --video); refuses what cannot be honoured."""
    if video is None:
        if video_episodes is not None:
            raise UnilabError(
                "--video-episodes needs --video FILE", fix="add --video eval.mp4, or leave out --video-episodes"
            )
        return 0
    k = 1 if video_episodes is None else video_episodes
    top = min(episodes, MAX_VIDEO_EPISODES)
    if not 1 <= k <= top:
        raise UnilabError(
            f"--video-episodes {k} is out of range: {episodes} episode(s) are played, and at most "
            f"{MAX_VIDEO_EPISODES} are filmed",
            fix=f"pass --video-episodes between 1 and {top}" + (" (or more --episodes)" if top < k else ""),
        )
    check_video_path(video)
    require("imageio_ffmpeg", "video", "--video")  # before minutes of episodes are played
    return k


def check_video_path(path: Path) -> None:
    """Refuse a --video path that could not be written."""
    if path.suffix.lower() != ".mp4":
        suggestion = path.with_suffix(".mp4") if path.name else Path("eval.mp4")
        raise UnilabError(
            f"--video {path}: unilab writes MP4 video (H.264), so the file name must end in .mp4",
            fix=f"pass --video {suggestion}",
        )
    check_out_path(path, "eval.mp4", flag="--video")
    if not os.access(path.parent, os.W_OK):
        raise UnilabError(
            f"cannot write {path}: directory {path.parent} is not writable by this user",
            fix="pass --video with a file in a directory you can write",
        )
