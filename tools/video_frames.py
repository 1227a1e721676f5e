"""Tile frames of an `unilab eval --video` MP4 into one small image (the README's walking frames):

    unilab eval RUN_DIR --episodes 8 --video g1.mp4
    python tools/video_frames.py g1.mp4 --out docs/images/g1-walk.png [--count 6] [--start 2] [--end 12]

Needs the video extra (imageio-ffmpeg) and Pillow (the profile extra's matplotlib brings it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def read_frames(path: Path, times: list[float]) -> list[np.ndarray]:
    """The frames nearest ``times`` (seconds) of the MP4 at ``path``, as [H, W, 3] uint8 arrays."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    fps = float(meta["fps"])
    wanted = {round(t * fps) for t in times}
    frames: list[np.ndarray] = []
    for i, raw in enumerate(reader):
        if i in wanted:
            frames.append(np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3).copy())
        if len(frames) == len(wanted):
            break
    reader.close()
    if len(frames) < len(wanted):
        raise SystemExit(f"{path} ends before {max(times):.1f} s: pass an earlier --end")
    return frames


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("video", type=Path, help="an MP4 written by `unilab eval --video`")
    ap.add_argument("--out", type=Path, default=Path("docs/images/g1-walk.png"))
    ap.add_argument("--count", type=int, default=6, help="frames in the strip (default 6)")
    ap.add_argument("--start", type=float, default=2.0, help="the first frame's time, s (default 2)")
    ap.add_argument("--end", type=float, default=12.0, help="the last frame's time, s (default 12)")
    ap.add_argument("--height", type=int, default=200, help="each frame's height in the strip, pixels (default 200)")
    args = ap.parse_args()
    if args.count < 1 or not 0 <= args.start < args.end:
        raise SystemExit("pass --count >= 1 and 0 <= --start < --end")
    from PIL import Image

    times = list(np.linspace(args.start, args.end, args.count))
    tiles = []
    for frame in read_frames(args.video, times):
        img = Image.fromarray(frame)
        tiles.append(img.resize((round(img.width * args.height / img.height), args.height), Image.Resampling.LANCZOS))
    strip = Image.new("RGB", (sum(t.width for t in tiles), args.height))
    x = 0
    for t in tiles:
        strip.paste(t, (x, 0))
        x += t.width
    args.out.parent.mkdir(parents=True, exist_ok=True)
    strip.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
    print(
        f"{args.out}: {args.count} frames from {args.start:g} s to {args.end:g} s of {args.video}, "
        f"{strip.width}x{args.height}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
