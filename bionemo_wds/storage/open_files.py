"""The local shard files a process holds open: at most `MAX_OPEN` at once, least recently used closed.

A local shard is read with positioned reads (``os.pread``) on a descriptor kept between reads, so
a record costs one system call. Kept per shard and never closed, descriptors grow with the shards
a process has read: a blend of 1,000 datasets of a few shards each passes ``ulimit -n 256`` in its
first epoch. One table per process (`OPEN_FILES`, shared by every dataset of a blend) holds at
most `MAX_OPEN` (``BIONEMO_WDS_MAX_OPEN_FILES`` in the environment, else a quarter of the process's
``ulimit -n``, at most 1,024); opening one more closes the least recently used that no read is
using. Opening a file again costs one ``open`` and ``close`` (microseconds), a small part of
reading and decoding a record.

A descriptor in use by a read is never closed under it (another thread's read may evict only
idle ones), so no read lands on a file that another has since opened under the same number. A
forked process (a loader worker) inherits the table and its descriptors, which are its own copies.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from bionemo_wds.errors import OptionError, open_file_limit, refusal_named

__all__ = ["MAX_OPEN", "MAX_OPEN_ENV", "OPEN_FILES", "OpenFiles", "default_limit"]

#: Environment variable that sets `MAX_OPEN`.
MAX_OPEN_ENV = "BIONEMO_WDS_MAX_OPEN_FILES"


def default_limit() -> int:
    """Shard files a process keeps open at most: ``BIONEMO_WDS_MAX_OPEN_FILES`` when set, else a
    quarter of its open-file limit (``ulimit -n``; 64 under 256, 256 under 1,024), from 16 to 1,024."""
    given = os.environ.get(MAX_OPEN_ENV, "").strip()
    if given:
        try:
            return max(1, int(given))
        except ValueError:
            raise OptionError(f"{MAX_OPEN_ENV}={given!r} is not a number of files") from None
    limit = open_file_limit()
    return 1024 if limit is None else min(1024, max(16, limit // 4))


#: Files a process keeps open at most (`default_limit`, when this module is imported).
MAX_OPEN = default_limit()


class _Held:
    """One open file: its descriptor and the reads using it."""

    __slots__ = ("fd", "users")

    def __init__(self, fd: int):
        self.fd, self.users = fd, 0


class OpenFiles:
    """Descriptors of read-only files by path, at most `limit` kept (least recently used closed)."""

    def __init__(self, limit: int = MAX_OPEN):
        self.limit = max(1, int(limit))
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._leaving: dict[int, _Held] = {}  # out of the table, closed when their reads end
        self._lock = threading.Lock()
        self.opened = 0  # files opened by this process (a file opened again after eviction counts again)

    def __len__(self) -> int:
        return len(self._held)

    def acquire(self, path: str) -> int:
        """A descriptor of `path` (read-only), kept open until `release`; the file is opened here
        unless the table holds it. An OS error opening it (`errors.FileSystemError`: too many open
        files, permission denied) names the file; `FileNotFoundError` is raised as it is."""
        with self._lock:
            held = self._held.get(path)
            if held is None:
                held = _Held(self._open(path))
                self._held[path] = held
                self.opened += 1
                self._evict()
            else:
                self._held.move_to_end(path)
            held.users += 1
            return held.fd

    def release(self, path: str, fd: int) -> None:
        """The read that `acquire` gave `fd` of `path` for is done (an evicted file closes now)."""
        with self._lock:
            held = self._held.get(path)
            if held is not None and held.fd == fd:
                held.users -= 1
                return
            held = self._leaving.get(fd)
            if held is not None:
                held.users -= 1
                if not held.users:
                    del self._leaving[fd]
                    os.close(fd)

    @contextmanager
    def descriptor(self, path: str) -> Iterator[int]:
        """`acquire` and `release` around a block."""
        fd = self.acquire(path)
        try:
            yield fd
        finally:
            self.release(path, fd)

    @staticmethod
    def _open(path: str) -> int:
        with refusal_named(path):  # a missing file stays a FileNotFoundError
            return os.open(path, os.O_RDONLY)

    def _evict(self) -> None:
        """Close the least recently used idle files until at most `limit` are held (under the lock)."""
        while len(self._held) > self.limit:
            self._drop(next(iter(self._held)))

    def _drop(self, path: str) -> None:
        """Take `path` out of the table: closed now, or when its last read ends (under the lock)."""
        held = self._held.pop(path, None)
        if held is None:
            return
        if held.users:
            self._leaving[held.fd] = held
        else:
            os.close(held.fd)

    def close(self, paths: Iterable[str] | None = None) -> None:
        """Close `paths` (every file when None); one in use is closed when its read ends."""
        with self._lock:
            for path in list(self._held) if paths is None else paths:
                self._drop(path)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork


#: The process's table of open shard files.
OPEN_FILES = OpenFiles()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=OPEN_FILES._after_fork)
