"""Shard tasks on this machine: ``prepare --executor local`` (the default), here or in a process pool.

With one worker (or one task) the tasks run in this process; otherwise in a pool of `workers`
processes (``--workers``), each given the writers' setup once (`start_pool_writer`). A pool worker
dies with the process that started it (`die_with_parent`): after a ``kill -9`` of `prepare` no
writer lives on holding the cache files the next run deletes.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

from tqdm import tqdm

from bionemo_wds.prepare.writers import ShardResult, WriterSetup, close_writer, start_writer, write_shard_task

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

#: prctl(2) option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between checks of the parent where prctl is not available.
PARENT_POLL = 0.5

#: The setup of this pool worker's tasks (set once per process by `start_pool_writer`).
POOL_SETUP: list[WriterSetup] = []


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


def start_pool_writer(setup: WriterSetup, parent: int, start_method: str) -> None:
    """A pool worker's initializer: end with `parent`, then become a writer for `setup`."""
    die_with_parent(parent, start_method)
    POOL_SETUP[:] = [setup]
    start_writer(setup)


def write_pool_task(task: tuple[str, int]) -> ShardResult:
    """One task in a pool worker, for the setup its initializer was given."""
    return write_shard_task(POOL_SETUP[0], *task)


def run_writers(
    setup: WriterSetup, tasks: list[tuple[str, int]], workers: int, progress: bool
) -> Iterator[ShardResult]:
    """Write every task's shard, here (one worker or one task) or in a pool of `workers`
    processes; yields each result as its shard is complete."""
    import webdataset  # noqa: F401 - the shard writer's library (it imports torch): once here, before the pool forks

    bar = tqdm(total=len(tasks), desc="write", unit="shard", disable=not progress)
    if workers <= 1 or len(tasks) <= 1:
        start_writer(setup)
        try:
            for task in tasks:
                yield write_shard_task(setup, *task)
                bar.update()
        finally:  # in this process the handles would outlive the run (and the cache they point into)
            close_writer()
    else:
        context = mp.get_context()
        initargs = (setup, os.getpid(), context.get_start_method())
        with ProcessPoolExecutor(workers, mp_context=context, initializer=start_pool_writer, initargs=initargs) as pool:
            for result in pool.map(write_pool_task, tasks, chunksize=1):
                yield result
                bar.update()
    bar.close()


def run(setup: WriterSetup, tasks: list[tuple[str, int]], opts: PrepareOptions) -> Iterator[ShardResult]:
    """The local executor (`executors.Executor`): `run_writers` with ``--workers`` processes (all
    CPUs when 0)."""
    return run_writers(setup, tasks, opts.workers or os.cpu_count() or 1, opts.progress)
