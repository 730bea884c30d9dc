"""A pool worker that ends with the process that started it: after a ``kill -9`` of `prepare` no
worker lives on holding the cache files the next run deletes (used by every local process pool of
`prepare`: the shard writers' and the passes' over the inputs)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

#: prctl(2) option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between checks of the parent where prctl is not available.
PARENT_POLL = 0.5


def die_with_parent(parent: int, start_method: str) -> None:
    """Make this process end when `parent` (the process that started it) dies, even by SIGKILL.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills it at once, whatever it is doing
    (a thread could not run while a C call holds the GIL). Elsewhere: a daemon thread that exits
    the process once its parent changes. A parent that died before this call is caught by
    comparing ``os.getppid()`` (with the forkserver start method the parent is the fork server,
    which itself ends with `parent`)."""
    direct = start_method != "forkserver"
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if direct and os.getppid() != parent:
                os._exit(1)
            return
    watched = os.getppid()
    if direct and watched != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == watched:
            time.sleep(PARENT_POLL)
        os._exit(1)

    threading.Thread(target=watch, name="bionemo-wds-parent-watch", daemon=True).start()
