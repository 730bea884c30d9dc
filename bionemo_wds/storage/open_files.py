"""The local shard files a process holds open: at most `MAX_OPEN` at once, least recently used closed.

A local shard is read with positioned reads (``os.pread``) on a descriptor kept between reads, so
a record costs one system call. Kept per shard and never closed, descriptors grow with the shards
a process has read: a blend of 1,000 datasets of a few shards each passes ``ulimit -n 256`` in its
first epoch. One table per process (`OPEN_FILES`, shared by every dataset of a blend) holds at
most `MAX_OPEN` (``BIONEMO_WDS_MAX_OPEN_FILES`` in the environment, default 64); opening one more
closes the least recently used that no read is using. Opening a file again costs microseconds, a
small part of reading a record.

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

from bionemo_wds.errors import os_error

__all__ = ["MAX_OPEN", "OPEN_FILES", "OpenFiles"]

#: Files a process keeps open at most (the environment's ``BIONEMO_WDS_MAX_OPEN_FILES``, default 64).
MAX_OPEN = int(os.environ.get("BIONEMO_WDS_MAX_OPEN_FILES", "64") or 64)


class _Held:
    """One open file: its descriptor, the reads using it, and whether it left the table."""

    __slots__ = ("evicted", "fd", "users")

    def __init__(self, fd: int):
        self.fd, self.users, self.evicted = fd, 0, False


class OpenFiles:
    """Descriptors of read-only files by path, at most `limit` kept (least recently used closed)."""

    def __init__(self, limit: int = MAX_OPEN):
        self.limit = max(1, int(limit))
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # files opened by this process (a file opened again after eviction counts again)

    def __len__(self) -> int:
        return len(self._held)

    @contextmanager
    def descriptor(self, path: str) -> Iterator[int]:
        """A descriptor of `path` (read-only), open while the block runs. An OS error opening it
        (`errors.FileSystemError`: too many open files, permission denied) names the file;
        `FileNotFoundError` is raised as it is."""
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
        try:
            yield held.fd
        finally:
            with self._lock:
                held.users -= 1
                if held.evicted and not held.users:
                    os.close(held.fd)

    @staticmethod
    def _open(path: str) -> int:
        try:
            return os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as exc:
            error = os_error(exc, path)
            if error is None:
                raise
            raise error from exc

    def _evict(self) -> None:
        """Close the least recently used idle files until at most `limit` are held (under the lock)."""
        if len(self._held) <= self.limit:
            return
        for path in list(self._held):
            if len(self._held) <= self.limit:
                break
            held = self._held[path]
            del self._held[path]
            held.evicted = True
            if not held.users:
                os.close(held.fd)

    def close(self, paths: Iterable[str] | None = None) -> None:
        """Close `paths` (every file when None); one in use is closed when its read ends."""
        with self._lock:
            for path in list(self._held) if paths is None else paths:
                held = self._held.pop(path, None)
                if held is not None:
                    held.evicted = True
                    if not held.users:
                        os.close(held.fd)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork


#: The process's table of open shard files.
OPEN_FILES = OpenFiles()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=OPEN_FILES._after_fork)
