"""Shard tasks on this machine: ``prepare --executor local`` (the default), here or in a process pool.

With one worker (or one task) the tasks run in this process; otherwise in a pool of `workers`
processes (``--workers``), each given the writers' setup once (`start_pool_writer`). A pool worker
dies with the process that started it (`die_with_parent`): after a ``kill -9`` of `prepare` no
writer lives on holding the cache files the next run deletes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

from tqdm import tqdm

from bionemo_wds.prepare.executors.parent import die_with_parent
from bionemo_wds.prepare.writers import ShardResult, WriterSetup, close_writer, start_writer, write_shard_task

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

#: The setup of this pool worker's tasks (set once per process by `start_pool_writer`).
POOL_SETUP: list[WriterSetup] = []


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
