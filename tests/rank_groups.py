"""The ranks of a test's gloo group, forked from one process that has done the imports.

Imported by the scripts that `test_ddp` and `test_packing_ddp` write and run (``tests/`` on their
``PYTHONPATH``): a fresh interpreter per rank imported torch (and Lightning) again, about 3-10 s of
CPU each. Each rank is still a process of its own, joining the group over TCP.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable


def run_forked_ranks(target: Callable[[int], None], world: int) -> list[int]:
    """`target(rank)` for ranks 0..world-1, each in a process forked from this one; their exit
    codes. A rank that fails kills the others at once (they would wait for it in the group forever)."""
    ranks = [multiprocessing.get_context("fork").Process(target=target, args=(r,)) for r in range(world)]
    for proc in ranks:
        proc.start()
    while any(proc.exitcode is None for proc in ranks):
        if any(proc.exitcode for proc in ranks):
            for proc in ranks:
                proc.kill()
            break
        time.sleep(0.05)
    for proc in ranks:
        proc.join()
    return [int(proc.exitcode or 0) for proc in ranks]
