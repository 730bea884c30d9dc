"""A bound on the requests in flight to object stores, per node (or per process without a cache).

Thousands of loader threads on a node (ranks x loader workers x read-ahead threads) would otherwise
each hold a request open at once, and an object store answers that crowd with 503 SlowDown or 429.
Every remote request of a `Store` takes a slot for its duration (`RequestSlots.slot`), never for
the waits between its retries.

With a cache directory, the slots are ``limit`` files ``<cache_dir>/.request-slots/slot-<i>``,
each held with an exclusive ``flock``: every loader worker and every rank that names the same cache
directory shares the bound, and a process that dies, even by ``kill -9``, gives its slots back (the
kernel drops its locks). A process keeps one descriptor per slot file it has tried (at most
`limit`), and its threads take turns on them, so threads exclude each other as processes do.
Processes asking for different limits share the slots, so the node's bound is the largest limit
asked for. A cache directory on a filesystem shared by several nodes makes the bound theirs
together (where that filesystem's ``flock`` is shared at all).

Without a cache directory the bound is the process's own: each loader worker has its own `limit`.

A request that finds every slot taken waits, without spinning, on one slot picked at random (the
kernel hands that slot to one of its waiters when it is freed).
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


def slot_path(directory: Path, number: int) -> Path:
    """The lock file of slot `number` in a slots folder."""
    return directory / f"slot-{number}"


def _open(path: Path) -> int:
    with refusal_named(path):  # too many open files, no permission: said as that, naming the file
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:  # the folder is new (or was removed with the cache)
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)


def _names_file(path: Path, fd: int) -> bool:
    """Does `path` still name the file `fd` is open on? (a cleaned cache removes the slot files: a
    lock on a removed file bounds nobody)"""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


class _ProcessSlots:
    """`limit` slots among the threads of one process."""

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


class _NodeSlots:
    """This process's side of a slots folder: a descriptor per slot file, and which of them a thread
    of this process holds or waits on (a descriptor's lock is the process's, not the thread's)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.fds: dict[int, int] = {}
        self.busy: set[int] = set()
        self.changed = threading.Condition()

    def _fd(self, number: int) -> int:
        if number not in self.fds:
            self.fds[number] = _open(slot_path(self.directory, number))
        return self.fds[number]

    def _reopen(self, number: int) -> None:
        """Forget a descriptor of a removed slot file (called with `changed` held)."""
        fd = self.fds.pop(number, None)
        if fd is not None:
            os.close(fd)

    def take(self, limit: int) -> int:
        """A slot number of `limit`, held: a free one, else (waiting) one picked at random."""
        rng = timing_random()  # which slot: timing only, so not from the run's seed
        while True:
            with self.changed:
                start = rng.randrange(limit)
                for number in ((start + i) % limit for i in range(limit)):
                    if number in self.busy:
                        continue
                    fd = self._fd(number)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    if _names_file(slot_path(self.directory, number), fd):
                        self.busy.add(number)
                        return number
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    self._reopen(number)
                idle = [n for n in range(limit) if n not in self.busy]
                if not idle:  # this process's threads hold or wait on every slot: wait for one of them
                    self.changed.wait()
                    continue
                number = idle[rng.randrange(len(idle))]
                self.busy.add(number)  # ours to wait on; no other thread of this process uses it meanwhile
                fd = self._fd(number)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # another process holds it: wait for it, holding no lock of ours
            except BaseException:
                with self.changed:
                    self.busy.discard(number)
                    self.changed.notify_all()
                raise
            with self.changed:
                if _names_file(slot_path(self.directory, number), fd):
                    return number
                fcntl.flock(fd, fcntl.LOCK_UN)
                self._reopen(number)
                self.busy.discard(number)
                self.changed.notify_all()

    def give(self, number: int) -> None:
        """Free a slot. Unlocked explicitly: a loader worker forked meanwhile holds a copy of the
        descriptor, and the lock belongs to both copies until unlocked."""
        with self.changed:
            fcntl.flock(self.fds[number], fcntl.LOCK_UN)
            self.busy.discard(number)
            self.changed.notify()

    def close(self) -> None:
        """(in a forked child) Close the descriptors copied from the parent, whose locks are the
        parent's: unlocking them here would free the parent's slots."""
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


# This process's slots: one `_ProcessSlots` per limit (every store of a process shares it, so a
# blend of 1,000 datasets is bounded as one) and one `_NodeSlots` per folder. A forked child starts
# afresh: the parent's requests in flight are not its own (and the parent's lock may have been held).
_PROCESS: dict[int, _ProcessSlots] = {}
_NODE: dict[Path, _NodeSlots] = {}
_LOCK = threading.Lock()


def _forget_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()
    _PROCESS.clear()
    for node in _NODE.values():
        node.close()
    _NODE.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _process_slots(limit: int) -> _ProcessSlots:
    with _LOCK:
        if limit not in _PROCESS:
            _PROCESS[limit] = _ProcessSlots(limit)
        return _PROCESS[limit]


def _node_slots(directory: Path) -> _NodeSlots:
    with _LOCK:
        if directory not in _NODE:
            _NODE[directory] = _NodeSlots(directory)
        return _NODE[directory]


class RequestSlots:
    """At most `limit` requests at once among the processes sharing `directory` (a cache
    directory; None: among the threads of this process). Picklable: it holds no descriptor."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, limit: int | None = None):
        self.limit = max_requests(limit)
        self.directory = None if directory is None else Path(directory).absolute() / SLOTS_DIR

    def __repr__(self) -> str:
        where = "this process" if self.directory is None else str(self.directory)
        return f"RequestSlots({self.limit} in {where})"

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot while the block runs (one request), waiting for one when all are taken."""
        if self.directory is None:
            with _process_slots(self.limit).slot():
                yield
            return
        node = _node_slots(self.directory)
        number = node.take(self.limit)
        try:
            yield
        finally:
            node.give(number)

    def in_use(self) -> int:
        """Slots held now (by any process sharing them, this one included; without a directory, by
        this process). Each is tried on a descriptor of its own, for a moment."""
        if self.directory is None:
            return _process_slots(self.limit).held
        held = 0
        for number in range(self.limit):
            path = slot_path(self.directory, number)
            fd = _open(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                held += 1
            finally:
                os.close(fd)
        return held
