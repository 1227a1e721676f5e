"""How fast is planning? Median wall time of a `unilab plan specs/g1.toml` process against a
`python -c "import torch"` process, interleaved in one run so machine noise hits both alike.

    python tools/bench_plan.py [--repeats 9] [--spec specs/g1.toml]

Last line: plan_vs_torch_import=<ratio> (target <= 0.3).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--spec", default="specs/g1.toml")
    args = ap.parse_args()
    exe = shutil.which("unilab")
    plan_cmd = [exe, "plan", args.spec] if exe else [sys.executable, "-m", "unilab", "plan", args.spec]
    torch_cmd = [sys.executable, "-c", "import torch"]
    timed(plan_cmd), timed(torch_cmd)  # warm the page cache for both
    plan_t, torch_t = [], []
    for _ in range(args.repeats):
        plan_t.append(timed(plan_cmd))
        torch_t.append(timed(torch_cmd))
    p, t = statistics.median(plan_t), statistics.median(torch_t)
    print(
        f"unilab plan {args.spec}: median {p * 1000:.0f} ms over {args.repeats} runs "
        f"(min {min(plan_t) * 1000:.0f}, max {max(plan_t) * 1000:.0f})"
    )
    print(
        f"python -c 'import torch': median {t * 1000:.0f} ms (min {min(torch_t) * 1000:.0f}, "
        f"max {max(torch_t) * 1000:.0f})"
    )
    print(f"plan_vs_torch_import={p / t:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
