"""Child processes that must not outlive their parent (collector processes, physics workers).
Standard library only: physics workers import it before torch or mujoco."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1

# Set by a parent that starts `unilab apply` in a session of its own (`unilab profile`) to its pid:
# the apply then dies with it, as its own child processes die with the apply.
DIE_WITH_PARENT_ENV = "UNILAB_DIE_WITH_PARENT"


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent thread exits (PR_SET_PDEATHSIG); exit now if the
    parent already died before the request took effect."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:
        os._exit(1)
