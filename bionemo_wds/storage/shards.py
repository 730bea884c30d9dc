"""Byte ranges of a split's shards, local or remote: what the planned reader reads records with.

`LocalShards` reads a range with one positioned read. `RemoteShards` reads it with one range
request (retried, counted), from the node's `RangeCache` when one is given (a range is fetched once
and reused next epoch), and fetches ahead: `prefetch` is told the ranges the plan needs next and
starts up to `parallel` requests in a thread pool, so the loader does not wait on the network.
Both are created in the main process and handed to loader workers; descriptors, clients and
threads are opened in the process that uses them.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from bionemo_wds.storage.cache import RangeCache
from bionemo_wds.storage.store import Store

#: Ranges fetched ahead and not yet read, at most (about a mixing block of 8 kb windows' records).
MAX_AHEAD = 256
#: Parallel range requests per process.
PARALLEL = 8


class ShardRanges(Protocol):
    """Byte ranges of shard number `shard` (its position in the split's shard list)."""

    urls: list[str]
    #: Does `prefetch` do anything? (callers skip working out what to prefetch when it does not)
    reads_ahead: bool

    def read(self, shard: int, offset: int, size: int) -> bytes: ...

    def prefetch(self, ranges: Iterable[tuple[int, int, int]]) -> None: ...

    def close(self) -> None: ...


class LocalShards:
    """Shard files on a local filesystem, read with ``os.pread``."""

    reads_ahead = False  # the page cache reads ahead

    def __init__(self, urls: list[str]):
        self.urls = urls
        self._files: dict[int, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": {}}  # descriptors stay in the process that opened them

    def read(self, shard: int, offset: int, size: int) -> bytes:
        if shard not in self._files:
            self._files[shard] = os.open(self.urls[shard], os.O_RDONLY)
        data = os.pread(self._files[shard], size, offset)
        if len(data) != size:
            raise OSError(f"read {len(data)} of {size} bytes at offset {offset}: truncated")
        return data

    def prefetch(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        pass  # the page cache reads ahead

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()


class RemoteShards:
    """Shard objects behind URLs: range requests through `store`, cached in `cache`, fetched ahead."""

    reads_ahead = True

    def __init__(self, store: Store, urls: list[str], cache: RangeCache | None = None, parallel: int = PARALLEL):
        self.store, self.urls, self.cache, self.parallel = store, urls, cache, parallel
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._ahead: OrderedDict[tuple[int, int, int], Future[bytes]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None, "_ahead": OrderedDict()}  # threads stay in their process

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pool[0] != os.getpid():
            self._pool = (os.getpid(), ThreadPoolExecutor(self.parallel, thread_name_prefix="bionemo-wds-fetch"))
            self._ahead.clear()
        return self._pool[1]

    def fetch(self, shard: int, offset: int, size: int) -> bytes:
        """The range from the cache, else from the store (then cached)."""
        url = self.urls[shard]
        if self.cache is not None:
            data = self.cache.get(url, offset, size)
            if data is not None:
                self.store.count(cache_hits=1)
                return data
            self.store.count(cache_misses=1)
        data = self.store.read_range(url, offset, size)
        if self.cache is not None:
            self.cache.put(url, offset, size, data)
        return data

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
        """Forget a range that failed its check, so the next read fetches it again."""
        if self.cache is not None:
            self.cache.drop(self.urls[shard], offset, size)

    def close(self) -> None:
        for future in self._ahead.values():
            future.cancel()
        self._ahead.clear()
        if self._pool is not None and self._pool[0] == os.getpid():
            self._pool[1].shutdown(wait=False, cancel_futures=True)
        self._pool = None
