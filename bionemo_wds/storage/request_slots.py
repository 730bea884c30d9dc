"""A bound on the requests in flight to object stores, per node (or per process without a cache).

Thousands of loader threads on a node (ranks x loader workers x read-ahead threads) would otherwise
each hold a request open at once, and an object store answers that crowd with 503 SlowDown or 429.
Every remote request of a `Store` takes a slot for its duration (`RequestSlots.slot`), never for
the waits between its retries.

With a cache directory, the slots are ``limit`` files ``<cache_dir>/.request-slots/slot-<i>``,
each taken with an exclusive ``flock`` on a descriptor of its own (so threads of one process
exclude each other as processes do): every loader worker and every rank that names the same cache
directory shares the bound, and a process that dies, even by ``kill -9``, gives its slots back (the
kernel drops its locks). Processes asking for different limits share the slots, so the node's
bound is the largest limit asked for. A cache directory on a filesystem shared by several nodes
makes the bound theirs together (where that filesystem's ``flock`` is shared at all).

Without a cache directory the bound is the process's own: each loader worker has its own `limit`.

A request that finds every slot taken waits (without spinning) for a slot of its own choosing,
picked at random: the kernel hands that slot to one of its waiters when it is freed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from bionemo_wds.errors import OptionError, refusal_named
from bionemo_wds.storage.retry import timing_random

__all__ = ["DEFAULT_MAX_REQUESTS", "ENV_MAX_REQUESTS", "SLOTS_DIR", "RequestSlots", "max_requests"]

#: Requests in flight per node (per process without a cache directory) unless told otherwise.
DEFAULT_MAX_REQUESTS = 64
#: The environment variable that sets the default bound (the `max_requests` option wins over it).
ENV_MAX_REQUESTS = "BIONEMO_WDS_MAX_REQUESTS"
#: The folder of the slot files, under the cache directory (the range cache leaves dot-folders alone).
SLOTS_DIR = ".request-slots"


class _ProcessSlots:
    """`limit` slots among the threads of one process (a counted condition, so `in_use` can say how
    many are held)."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0
        self.freed = threading.Condition()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        with self.freed:
            self.freed.wait_for(lambda: self.held < self.limit)
            self.held += 1
        try:
            yield
        finally:
            with self.freed:
                self.held -= 1
                self.freed.notify()


# One set of slots per limit for the bound without a cache directory, so every store of a process
# (a blend of 1,000 datasets) shares it; emptied in a forked child, whose copy would count the
# parent's requests in flight (and whose lock a parent's thread may have held at the fork).
_PROCESS_SLOTS: dict[int, _ProcessSlots] = {}
_PROCESS_LOCK = threading.Lock()


def _forget_process_slots() -> None:
    global _PROCESS_LOCK
    _PROCESS_LOCK = threading.Lock()
    _PROCESS_SLOTS.clear()


os.register_at_fork(after_in_child=_forget_process_slots)


def _process_slots(limit: int) -> _ProcessSlots:
    """This process's slots of `limit`."""
    with _PROCESS_LOCK:
        if limit not in _PROCESS_SLOTS:
            _PROCESS_SLOTS[limit] = _ProcessSlots(limit)
        return _PROCESS_SLOTS[limit]


def max_requests(value: int | None = None) -> int:
    """The bound to use: `value` when given, else ``$BIONEMO_WDS_MAX_REQUESTS``, else
    `DEFAULT_MAX_REQUESTS`; an `OptionError` naming the option or variable when it is not a
    positive whole number."""
    if value is None:
        text = os.environ.get(ENV_MAX_REQUESTS, "").strip()
        if not text:
            return DEFAULT_MAX_REQUESTS
        try:
            value = int(text)
        except ValueError:
            raise OptionError(f"{ENV_MAX_REQUESTS} must be a whole number of requests, got {text!r}") from None
        where = ENV_MAX_REQUESTS
    else:
        where = "max_requests"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(f"{where} must be at least 1 (requests in flight at once), got {value!r}")
    return value


class RequestSlots:
    """At most `limit` requests at once among the processes sharing `directory` (a cache
    directory; None: among the threads of this process). Picklable: it holds no descriptor."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, limit: int | None = None):
        self.limit = max_requests(limit)
        self.directory = None if directory is None else Path(directory) / SLOTS_DIR

    def __repr__(self) -> str:
        where = "this process" if self.directory is None else str(self.directory)
        return f"RequestSlots({self.limit} in {where})"

    def path(self, number: int) -> Path:
        """The lock file of slot `number`."""
        assert self.directory is not None
        return self.directory / f"slot-{number}"

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot while the block runs (one request), waiting for one when all are taken."""
        if self.directory is None:
            with _process_slots(self.limit).slot():
                yield
            return
        fd = self._take()
        try:
            yield
        finally:
            self._unlock(fd)

    def _open(self, number: int) -> int:
        path = self.path(number)
        with refusal_named(path):  # too many open files, no permission: said as that, naming the file
            try:
                return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except FileNotFoundError:  # the folder is new (or was removed with the cache)
                path.parent.mkdir(parents=True, exist_ok=True)
                return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def _lock(self, number: int, wait: bool) -> int | None:
        """A descriptor holding slot `number`'s lock, or None when it is taken (and `wait` is false)
        or its file was replaced while we waited."""
        fd = self._open(number)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(self.path(number)).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the file was removed (a cleaned cache): its lock bounds nobody
            self._unlock(fd)
            return None
        return fd

    @staticmethod
    def _unlock(fd: int) -> None:
        """Free a slot: unlocked before it is closed, since a loader worker forked meanwhile holds a
        copy of the descriptor, and closing ours alone would keep the lock until that worker ends."""
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _take(self) -> int:
        """A descriptor holding a free slot: any free one, else (waiting) a random one."""
        rng = timing_random()  # which slot: timing only, so not from the run's seed
        start = rng.randrange(self.limit)
        while True:
            for i in range(self.limit):
                fd = self._lock((start + i) % self.limit, wait=False)
                if fd is not None:
                    return fd
            fd = self._lock(rng.randrange(self.limit), wait=True)
            if fd is not None:
                return fd

    def in_use(self) -> int:
        """Slots held now (by any process sharing them; without a directory, by this process)."""
        if self.directory is None:
            return _process_slots(self.limit).held
        free = 0
        for i in range(self.limit):
            fd = self._lock(i, wait=False)
            if fd is not None:
                free += 1
                self._unlock(fd)
        return self.limit - free
