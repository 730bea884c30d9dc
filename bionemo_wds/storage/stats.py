"""Counts of what the storage layer did: bytes fetched, requests, cache hits and misses, retries,
throttling answers.

The counters live in shared memory from the context loader workers start with (as the skip
counter of `ShardErrorPolicy` does), so what every worker fetched adds up in the main process.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

#: The counters, in order.
#: ``whole_shards``: shards fetched whole because the server ignores range requests (`shards.RemoteShards`).
#: ``throttled``: answers that asked us to slow down (429, 503, ``SlowDown``; `retry.is_throttled`).
FIELDS = (
    "bytes_fetched",
    "requests",
    "cache_hits",
    "cache_misses",
    "retries",
    "shards_skipped",
    "whole_shards",
    "throttled",
)


class StorageStats:
    """Process-shared counters; `snapshot` reads them all, `since` the change from an earlier one."""

    def __init__(self, context: Any = None):
        self._values = (context or mp.get_context()).Array("q", len(FIELDS))

    def add(self, **counts: int) -> None:
        """Add to the named counters (unknown names are a programming error)."""
        with self._values.get_lock():
            for name, n in counts.items():
                self._values[FIELDS.index(name)] += n

    def bump(self, name: str) -> int:
        """Add one to a counter and return its new value (one process sees 1: it came first)."""
        with self._values.get_lock():
            self._values[FIELDS.index(name)] += 1
            return int(self._values[FIELDS.index(name)])

    def value(self, name: str) -> int:
        """One counter now."""
        return int(self._values[FIELDS.index(name)])

    def snapshot(self) -> dict[str, int]:
        with self._values.get_lock():
            return dict(zip(FIELDS, self._values[:]))

    @staticmethod
    def since(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
        """Counts between two snapshots."""
        return {name: now[name] - before.get(name, 0) for name in FIELDS}

    @staticmethod
    def describe(counts: dict[str, int]) -> str:
        """One line for a log."""
        return (
            f"{counts['bytes_fetched'] / 1e6:.1f} MB fetched in {counts['requests']} request(s), "
            f"cache {counts['cache_hits']} hit(s) / {counts['cache_misses']} miss(es), {counts['retries']} retries, "
            f"{counts.get('throttled', 0)} throttled, "
            f"{counts['shards_skipped']} shard(s) skipped"
            + (f", {counts['whole_shards']} whole shard(s) (no range requests)" if counts.get("whole_shards") else "")
        )
