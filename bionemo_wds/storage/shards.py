"""Byte ranges of a split's shards, local or remote: what the planned reader reads records with.

`LocalShards` reads a range with one positioned read. `RemoteShards` reads it with one range
request (retried, counted), from the node's `RangeCache` when one is given (a range is fetched once
and reused next epoch), and fetches ahead: `prefetch` is told the ranges the plan needs next and
hands them to the process's one read-ahead pool (`read_ahead_pool`: `PARALLEL` threads shared by
every remote dataset, so a blend of 1,000 datasets has 8 threads, not 8,000), so the loader does not
wait on the network. Both are created in the main process and handed to loader workers;
descriptors, clients and threads are opened in the process that uses them.

A server that ignores range requests (``python -m http.server``, some CDNs) answers a range request
with the whole shard. `RemoteShards` then keeps that shard whole in the cache (`RangeCache.put_whole`;
without a `cache_dir`, in a temporary directory of the process tree, removed at exit) and reads
every later range of it from there: each shard is fetched once per node (while it stays cached),
the batches are those read from disk, and one warning says that range requests would be cheaper.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from bionemo_wds.errors import refusal_named
from bionemo_wds.storage.cache import RangeCache
from bionemo_wds.storage.open_files import OPEN_FILES, OpenFiles
from bionemo_wds.storage.retry import RangeIgnored, RemoteReadError, ShortRead
from bionemo_wds.storage.store import Store

#: Ranges fetched ahead and not yet read, at most (about a mixing block of 8 kb windows' records).
MAX_AHEAD = 256
#: Read-ahead threads per process (every remote dataset's together), so parallel range requests.
PARALLEL = 8

_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _forget_pool() -> None:
    """(in a forked child) The parent's threads do not exist here, and its lock may have been held."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def read_ahead_pool() -> ThreadPoolExecutor:
    """This process's read-ahead threads, shared by every `RemoteShards` (made by the process that
    first asks: a loader worker makes its own; a pool belongs to the process id that made it)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(PARALLEL, thread_name_prefix="bionemo-wds-fetch"))
        return _POOL[1]


class ShardRanges(Protocol):
    """Byte ranges of shard number `shard` (its position in the split's shard list)."""

    urls: Sequence[str]
    #: Does `prefetch` do anything? (callers skip working out what to prefetch when it does not)
    reads_ahead: bool

    def read(self, shard: int, offset: int, size: int) -> bytes: ...

    def prefetch(self, ranges: Iterable[tuple[int, int, int]]) -> None: ...

    def close(self) -> None: ...


class LocalShards:
    """Shard files on a local filesystem, read with ``os.pread`` on descriptors from the process's
    table of open files (`open_files.OPEN_FILES`: a bounded number, shared by every dataset)."""

    reads_ahead = False  # the page cache reads ahead

    def __init__(self, urls: Sequence[str], files: OpenFiles | None = None):
        self.urls = urls
        self.files = files

    def _table(self) -> OpenFiles:
        return self.files if self.files is not None else OPEN_FILES

    def read(self, shard: int, offset: int, size: int) -> bytes:
        path, table = self.urls[shard], self._table()
        fd = table.acquire(path)
        try:
            with refusal_named(path):
                data = os.pread(fd, size, offset)
        finally:
            table.release(path, fd)
        if len(data) != size:
            raise ShortRead(f"read {len(data)} of {size} bytes at offset {offset}: truncated")
        return data

    def prefetch(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        pass  # the page cache reads ahead

    def close(self) -> None:
        self._table().close(self.urls)


def _remove_spare(path: str, owner: int) -> None:
    """Remove the temporary whole-shard cache, in the process that made it only (forked loader
    workers inherit the finalizer, and share the directory)."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


class RemoteShards:
    """Shard objects behind URLs: range requests through `store`, cached in `cache`, fetched ahead."""

    reads_ahead = True

    def __init__(self, store: Store, urls: Sequence[str], cache: RangeCache | None = None):
        self.store, self.urls, self.cache = store, urls, cache
        self._pid = os.getpid()  # the process whose read-ahead `_ahead` holds
        self._ahead: OrderedDict[tuple[int, int, int], Future[bytes]] = OrderedDict()
        self._whole_shards = False  # this process found that the server ignores range requests
        self._probed = False  # this process has had an answer to a range request
        self._spare: str | None = None  # without a cache: where whole shards go (made when needed)
        if cache is None:
            self._spare = os.path.join(tempfile.gettempdir(), f"bionemo-wds-whole-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            weakref.finalize(self, _remove_spare, self._spare, os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_ahead": OrderedDict()}  # fetches under way stay in their process

    def _executor(self) -> ThreadPoolExecutor:
        """The process's read-ahead pool; in a forked process, this reader's fetches of the parent are
        forgotten (they never finish here)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._ahead.clear()
        return read_ahead_pool()

    def whole_shards(self) -> bool:
        """Does the server ignore range requests (found by this process, or by any that shares the
        store's counters)?"""
        stats = self.store.stats
        return self._whole_shards or (stats is not None and stats.value("whole_shards") > 0)

    def whole_cache(self) -> RangeCache:
        """Where whole shards are kept: the node's cache, else the temporary directory."""
        if self.cache is not None:
            return self.cache
        assert self._spare is not None
        return RangeCache(self._spare, None, self.store.stats)

    def fetch(self, shard: int, offset: int, size: int) -> bytes:
        """The range from the cache, else from the store (then cached); from the shard fetched whole
        when the server ignores range requests."""
        url = self.urls[shard]
        if self.whole_shards():
            return self.from_whole(shard, offset, size)
        if self.cache is not None:
            data = self.cache.get(url, offset, size)
            if data is not None:
                self.store.count(cache_hits=1)
                return data
            self.store.count(cache_misses=1)
        if not self._probed:  # one first range request at a time on the node, so only one finds out
            whole = self.whole_cache()
            with whole.fetching(f"range probe {self.store.root}"):
                if self.whole_shards():  # another process found out meanwhile
                    return self.from_whole(shard, offset, size)
                held = whole.read_whole(url, offset, size)
                if held is not None:  # another process got this shard whole: the server ignores ranges,
                    self._whole_shards = self._probed = True  # and asking again would fetch it twice
                    self.store.count(cache_hits=1)
                    return held
                data = self.ranged(shard, offset, size)
                self._probed = True
                return data
        if self.whole_shards():  # learned before `_probed` was set, while this read-ahead thread was on
            return self.from_whole(shard, offset, size)  # its way here: a range request would fetch it whole again
        return self.ranged(shard, offset, size)

    def ranged(self, shard: int, offset: int, size: int) -> bytes:
        """One range request (then cached); the whole shard's slice when the server sent it all."""
        url = self.urls[shard]
        try:
            data = self.store.read_range(url, offset, size)
        except RemoteReadError as exc:
            if not isinstance(exc.cause, RangeIgnored) or exc.cause.body is None:
                raise
            self.store.count(bytes_fetched=len(exc.cause.body), requests=1)
            return self.from_whole(shard, offset, size, exc.cause.body)
        if self.cache is not None:
            self.cache.put(url, offset, size, data)
        return data

    def from_whole(self, shard: int, offset: int, size: int, body: bytes | None = None) -> bytes:
        """A range of a shard kept whole: read from the cache, else fetched whole (or taken from
        `body`, the whole shard a range request got) and cached, once per node (`RangeCache.fetching`)."""
        url, cache = self.urls[shard], self.whole_cache()
        data = cache.read_whole(url, offset, size)
        if data is None:
            self.store.count(cache_misses=1)
            with cache.fetching(url):
                data = cache.read_whole(url, offset, size)  # another worker may have fetched it meanwhile
                if data is None:
                    if body is None:
                        body = self.store.read_bytes(url)  # retried and counted
                    data = body[offset : offset + size]
                    if len(data) != size:  # nothing cached: the next read fetches it again
                        raise RemoteReadError(
                            url, 1, OSError(f"the shard is {len(body)} bytes; the range ends at {offset + size}")
                        )
                    cache.put_whole(url, body)
                    self.learned_whole_shards()
                    return data
        self.store.count(cache_hits=1)
        return data

    def learned_whole_shards(self) -> None:
        """Count a shard fetched whole; the first one of the store (or of this process, without
        counters) warns, once, in one line."""
        first = not self._whole_shards
        self._whole_shards = True
        stats = self.store.stats
        if (stats.bump("whole_shards") == 1) if stats is not None else first:
            where = (
                self.cache.directory if self.cache is not None else "a temporary directory (give cache_dir to keep it)"
            )
            warnings.warn(
                f"{self.store.root} does not answer range requests: each shard is fetched whole, once, into "
                f"{where}; a server with range requests (S3, nginx, ...) would send only the records read",
                stacklevel=2,
            )

    def read(self, shard: int, offset: int, size: int) -> bytes:
        self._executor()  # in a forked process: forget the parent's fetches (they never finish here)
        future = self._ahead.pop((shard, offset, size), None)
        if future is not None:
            return future.result()  # a failed fetch raises here, in the reader
        return self.fetch(shard, offset, size)

    def prefetch(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        """Start fetching `ranges` (in the order the plan reads them) unless they are under way."""
        pool = self._executor()
        for key in ranges:
            if len(self._ahead) >= MAX_AHEAD:
                self._forget_finished()
                if len(self._ahead) >= MAX_AHEAD:
                    break
            if key not in self._ahead:
                self._ahead[key] = pool.submit(self.fetch, *key)

    def _forget_finished(self) -> None:
        """Drop finished fetches nobody read (a skipped shard's records), oldest first, down to half
        the read-ahead limit; fetches under way stay."""
        for key in [k for k, f in self._ahead.items() if f.done()][: max(1, len(self._ahead) - MAX_AHEAD // 2)]:
            del self._ahead[key]

    def drop(self, shard: int, offset: int, size: int) -> None:
        """Forget a range that failed its check (the whole shard, when it was fetched whole), so the
        next read fetches it again."""
        if self.whole_shards():
            self.whole_cache().drop_whole(self.urls[shard])
        elif self.cache is not None:
            self.cache.drop(self.urls[shard], offset, size)

    def close(self) -> None:
        """Cancel this reader's fetches not yet started (the pool is the process's: it stays)."""
        if self._pid == os.getpid():
            for future in self._ahead.values():
                future.cancel()
        self._ahead.clear()
