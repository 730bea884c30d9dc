"""Where this process stands: data-parallel rank and size, and loader worker. Detected here only.

Everything that depends on the rank or the worker asks this module, so tests can inject a `World`
and a loader worker reports the same identity to every stage.

A loader worker that detects itself (`Worker.detect`) also ties its life to its loader's process
(`leave_with_parent`): DataLoader's own watchdog looks for a dead parent only between two requests,
so a worker blocked writing a batch into a full pipe, or waiting for a ring or request slot, outlived
a ``kill -9`` of its main process for as long as the block lasted (minutes, holding memory and shards).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from bionemo_wds.errors import OptionError
from bionemo_wds.load.shm_segments import process_exists


@dataclass(frozen=True)
class World:
    """Data-parallel rank and size of this process."""

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise OptionError(f"rank {self.rank} is not within a world of {self.size}")

    @classmethod
    def detect(cls, trainer: Any = None, dp_rank: int | None = None, dp_size: int | None = None) -> World:
        """The data-parallel rank and size, from the first that says:

        1. `dp_rank` / `dp_size` given explicitly (ranks of one tensor- or context-parallel group
           pass the same `dp_rank`, so they read identical batches);
        2. the Lightning trainer's strategy (``trainer.distributed_sampler_kwargs``: the data-parallel
           mesh of `ModelParallelStrategy`, the world of DDP/FSDP), else its global rank and world size;
        3. torch.distributed;
        4. a single process.
        """
        if (dp_rank is None) != (dp_size is None):
            raise OptionError(f"give dp_rank and dp_size together (got dp_rank={dp_rank}, dp_size={dp_size})")
        if dp_rank is not None and dp_size is not None:
            return cls(dp_rank, dp_size)
        if trainer is not None:
            sampler = getattr(trainer, "distributed_sampler_kwargs", None)
            if sampler and sampler.get("num_replicas"):
                return cls(int(sampler["rank"]), int(sampler["num_replicas"]))
            return cls(int(trainer.global_rank), int(trainer.world_size))
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return cls(torch.distributed.get_rank(), torch.distributed.get_world_size())
        return cls()


@dataclass(frozen=True)
class Worker:
    """This loader worker's number and how many workers its loader has (0 of 1 in the main process)."""

    id: int = 0
    count: int = 1

    @classmethod
    def detect(cls) -> Worker:
        """This process's worker identity; in a loader worker, also starts `leave_with_parent` (once)."""
        info = torch.utils.data.get_worker_info()
        if info is None:
            return cls()
        leave_with_parent()
        return cls(info.id, info.num_workers)


def in_loader_worker() -> bool:
    """Whether this code runs in a DataLoader worker process."""
    return torch.utils.data.get_worker_info() is not None


#: Seconds between two looks at whether a worker's loader process is still there.
PARENT_CHECK_INTERVAL = 0.5
#: The exit status of a worker that left because its loader process died.
ORPHAN_EXIT_STATUS = 75
# the process whose watch runs (a forked worker inherits the module's state but not the thread)
_watched_pid: int | None = None
_watch_lock = threading.Lock()


def leave_with_parent(interval: float = PARENT_CHECK_INTERVAL) -> None:
    """Make this process end (``os._exit``) within about `interval` s of the death of the process that
    started it, whatever its threads are blocked on; idempotent, and a no-op in a process no one
    started through `multiprocessing`. A daemon thread watches: the parent pid changes when the
    parent dies (its children are handed to init or a subreaper), and a parent that is gone while
    the pid stays (a forkserver in between) no longer answers a signal 0."""
    global _watched_pid
    if _watched_pid == os.getpid():  # the watch runs (every batch of a worker asks: the cheap test first)
        return
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return
    with _watch_lock:
        if _watched_pid == os.getpid():
            return
        _watched_pid = os.getpid()
    started_by, ppid = parent.pid, os.getppid()
    watch = threading.Thread(
        target=_watch_parent, args=(started_by, ppid, interval), name="bionemo-wds-parent-watch", daemon=True
    )
    watch.start()


def parent_gone(started_by: int, ppid: int) -> bool:
    """Whether the process that started this one (`started_by`, seen as parent pid `ppid` when the
    watch began) has died."""
    return os.getppid() != ppid or not process_exists(started_by)


def _watch_parent(started_by: int, ppid: int, interval: float) -> None:
    while not parent_gone(started_by, ppid):
        time.sleep(interval)
    os._exit(ORPHAN_EXIT_STATUS)  # not sys.exit: the main thread may be blocked in a write or a wait
