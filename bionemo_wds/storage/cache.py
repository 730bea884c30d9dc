"""A local disk cache of remote byte ranges, shared by every worker and rank of a node.

Each entry is one range of one object (a record of a shard, or a whole shard) in its own file,
``<cache_dir>/<hash of the URL>/<offset>-<size>``. The rules that make sharing safe:

- an entry appears by an atomic rename of a complete temporary, so nobody reads a partial one;
- a reader holds a shared ``flock`` on the entry while it reads; eviction takes an exclusive one
  without waiting and skips what it cannot lock, so nothing is evicted under a reader (the race of
  litdata #452, where a file was deleted between a reader's check and its open). A reader locks,
  then checks the path still names the file it opened, so an entry removed in between is a miss;
- eviction runs under one cache-wide lock, oldest use first (a hit touches the entry's mtime),
  until the cache is within `limit` bytes. The limit can be exceeded only by entries readers hold.

Entries are not fsynced: a range is checked by its caller on every read (the record's crc32, or a
whole shard's sha256 when fetched), and a damaged entry is dropped and fetched again.

A server that ignores range requests (``python -m http.server``) sends whole shards: those are kept
as one entry per shard, ``<cache_dir>/<hash of the URL>/whole``, and ranges are read out of it
(`read_whole`). It counts against the limit like any entry (LRU, evicted whole), so the limit must
hold at least one shard: `put_whole` refuses a larger one with `CacheTooSmall`. `fetching` holds a
per-URL lock meanwhile, so each shard is fetched once per node, whichever worker asks first.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from bionemo_wds.errors import OptionError
from bionemo_wds.storage.atomic import TEMPORARY_GLOB, atomic_write
from bionemo_wds.storage.stats import StorageStats

#: The cache-wide lock (eviction).
LOCK_NAME = ".lock"
#: Temporaries older than this are left by dead writers and removed by eviction.
STALE_TEMPORARY_SECONDS = 3600
#: The entry name of a whole object (beside its ranges' ``<offset>-<size>`` entries).
WHOLE_NAME = "whole"


class CacheTooSmall(OptionError):
    """A whole shard larger than the cache limit (a server that ignores range requests needs room for one):
    `cache_limit` is too small, an `OptionError` (a `ValueError`)."""


class RangeCache:
    """Byte ranges of remote objects on local disk, bounded by `limit` bytes (None: unbounded)."""

    def __init__(self, directory: str | os.PathLike[str], limit: int | None = None, stats: StorageStats | None = None):
        if limit is not None and limit < 0:
            raise OptionError(f"cache_limit must be non-negative bytes, got {limit}")
        self.directory = Path(directory)
        self.limit = limit
        self.stats = stats
        self.added = 0  # bytes this process added since its last eviction pass
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, url: str, offset: int, size: int) -> Path:
        """Where the range lives in the cache."""
        return self.directory / hashlib.sha256(url.encode()).hexdigest()[:24] / f"{offset}-{size}"

    def whole_path(self, url: str) -> Path:
        """Where the whole object lives in the cache (fetched whole: its server ignores ranges)."""
        return self.path(url, 0, 0).parent / WHOLE_NAME

    def _locked_read(self, path: Path, offset: int, size: int) -> bytes | None:
        """Up to `size` bytes at `offset` of an entry, read under a shared lock; None when it is absent
        (or was evicted between our open and our lock). A read marks the entry most recently used."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # eviction cannot take this entry while we read it
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    return None  # evicted and fetched again by someone else between our open and lock
            except FileNotFoundError:
                return None  # evicted between our open and lock
            data = os.pread(fd, size, offset)
            with contextlib.suppress(OSError):
                os.utime(path)  # most recently used
            return data
        finally:
            os.close(fd)  # releases our lock

    def get(self, url: str, offset: int, size: int) -> bytes | None:
        """The cached bytes of the range, or None (a miss: absent, evicted meanwhile, or the wrong size)."""
        data = self._locked_read(self.path(url, offset, size), 0, size + 1)
        if data is None or len(data) == size:
            return data
        self.drop(url, offset, size)  # a wrongly sized entry
        return None

    def read_whole(self, url: str, offset: int, size: int) -> bytes | None:
        """`size` bytes at `offset` of the cached whole object, or None (absent, evicted meanwhile, or
        too short: then it is dropped)."""
        data = self._locked_read(self.whole_path(url), offset, size)
        if data is None or len(data) == size:
            return data
        self._remove_unlocked(self.whole_path(url))
        return None

    def _store(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(exist_ok=True)
        with atomic_write(path, durable=False) as fh:
            fh.write(data)
        self.added += len(data)
        if self.limit is not None and self.added >= max(1, self.limit // 8):
            self.evict()

    def put(self, url: str, offset: int, size: int, data: bytes) -> None:
        """Store the range (atomically), then evict down to the limit if this process added enough."""
        self._store(self.path(url, offset, size), data)

    def put_whole(self, url: str, data: bytes) -> None:
        """Store a whole object (atomically; evicting as `put` does); `CacheTooSmall` when it alone
        exceeds the limit, since it would be evicted before it could be read."""
        if self.limit is not None and len(data) > self.limit:
            raise CacheTooSmall(
                f"{url} is {len(data)} bytes, more than cache_limit ({self.limit} bytes): its server ignores range "
                f"requests, so shards are cached whole; give cache_limit of at least {len(data)} bytes "
                "(better: serve the dataset with range requests, e.g. S3 or nginx)"
            )
        self._store(self.whole_path(url), data)

    @contextlib.contextmanager
    def fetching(self, url: str) -> Iterator[None]:
        """An exclusive per-URL lock (every process and thread of the node): whoever holds it fetches
        the object while the others wait, then find it in the cache."""
        name = f".fetch-{hashlib.sha256(url.encode()).hexdigest()[:24]}"
        with open(self.directory / name, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def drop_whole(self, url: str) -> None:
        """Remove a whole object (a range of it failed its check), unless a reader holds it."""
        self._remove_unlocked(self.whole_path(url))

    def drop(self, url: str, offset: int, size: int) -> None:
        """Remove one entry (it failed its check), unless a reader holds it."""
        self._remove_unlocked(self.path(url, offset, size))

    def evict(self) -> int:
        """Remove least-recently-used entries until the cache is within its limit; returns bytes freed.

        One process evicts at a time; another that finds the cache lock taken skips its pass."""
        self.added = 0
        if self.limit is None:
            return 0
        with open(self.directory / LOCK_NAME, "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            entries, total = [], 0
            now = time.time()
            for group in os.scandir(self.directory):
                if not group.is_dir(follow_symlinks=False) or group.name.startswith("."):
                    continue  # locks, and folders that are not entries (`request_slots.SLOTS_DIR`)
                for entry in os.scandir(group.path):
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if Path(entry.name).match(TEMPORARY_GLOB):
                        if now - info.st_mtime > STALE_TEMPORARY_SECONDS:
                            Path(entry.path).unlink(missing_ok=True)
                        continue
                    entries.append((info.st_mtime, info.st_size, entry.path))
                    total += info.st_size
            freed = 0
            for _, size, path in sorted(entries):
                if total - freed <= self.limit:
                    break
                if self._remove_unlocked(Path(path)):
                    freed += size
            return freed

    @staticmethod
    def _remove_unlocked(path: Path) -> bool:
        """Unlink `path` if no reader holds it (an exclusive lock taken without waiting)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a reader is on it
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    return False
            except FileNotFoundError:
                return False
            path.unlink()
            return True
        finally:
            os.close(fd)

    def size(self) -> int:
        """Bytes the cache holds now (entries only)."""
        total = 0
        for group in self.directory.iterdir():
            if group.is_dir() and not group.name.startswith("."):
                total += sum(p.stat().st_size for p in group.iterdir() if not p.match(TEMPORARY_GLOB))
        return total
