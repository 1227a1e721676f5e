"""Process settings that make a CPU learner's update cheaper, applied in the learner's process.

glibc hands out every allocation above its mmap threshold as fresh pages and returns freed heap
top to the kernel: a learner whose update allocates the same few-hundred-kilobyte activations
hundreds of times takes a page fault for every 4 KiB of them, every update (1,300 faults and
about 4 ms of kernel time per update of the matched SAC config on a 2-vCPU Xeon; docs/performance.md).
`keep_freed_memory` raises both thresholds with `mallopt`, so the allocations are served from a
heap that stays mapped; the process keeps its high-water mark of memory instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for it on 64-bit hosts
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> str:
    """Apply the allocator settings where the C library is glibc; returns what was done, for the manifest."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "default (not glibc)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    except (OSError, AttributeError):
        return "default (mallopt unavailable)"
    return "glibc heap kept (mallopt)" if ok else "default (mallopt refused)"
