#!/usr/bin/env python
"""The range requests our remote reader sends for a given order of samples, counted without a
server: the real `reader.PlannedBatches` (its record cache and read-ahead calls) reads through a
real `storage.RemoteShards` (MAX_AHEAD, its thread pool) whose store records each range request
instead of sending it, and whose records are not decoded (`UnreadRecords`). Used by
`tools/shuffle_quality.py --plan`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import cast

import numpy as np

from bionemo_wds.format.split_index_file import SplitIndex
from bionemo_wds.load.plan import RankPlan, RecordTable
from bionemo_wds.load.reader import PlannedBatches
from bionemo_wds.load.records import SourceRecords, SplitRecords
from bionemo_wds.load.rows import BlockRows
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.storage.shards import RemoteShards
from bionemo_wds.storage.store import Store

#: Ranges of one shard this close (bytes between one's end and the next one's start) count as one
#: request when merged: a tar member's 512-byte header and its data's padding to 512 lie between.
COALESCE_GAP = 1024


class RecordingStore(Store):
    """A store whose range requests are recorded (range, and whether a read-ahead thread sent it),
    not sent: the answer is empty, and the reader below never looks at it."""

    def __init__(self, root: str):
        super().__init__(root)
        self.lock = threading.Lock()
        self.sent: list[tuple[str, int, int, bool]] = []

    def read_range(self, rel_or_url: str, offset: int, size: int) -> bytes:
        ahead = threading.current_thread().name.startswith("bionemo-wds-fetch")
        with self.lock:
            self.sent.append((rel_or_url, offset, size, ahead))
        return b""


class RecordingShards(RemoteShards):
    """`RemoteShards` as it is, with each read-ahead call's list of ranges recorded."""

    store: RecordingStore

    def __init__(self, store: RecordingStore, urls: list[str]):
        super().__init__(store, urls)
        self.calls: list[list[tuple[int, int, int]]] = []

    def prefetch(self, ranges: Iterable[tuple[int, int, int]]) -> None:
        wanted = list(ranges)
        self.calls.append(wanted)
        super().prefetch(wanted)


class Stand:
    """A decoded record's place in the reader's cache: only its number of windows."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


class UnreadRecords(SplitRecords):
    """`SplitRecords` whose `read` asks the shards for the record's range (taking a read-ahead's
    answer, or requesting it) and decodes nothing: the requests are the real reader's."""

    def read(self, record: int, policy: ShardErrorPolicy, report: bool = True) -> BlockRows | None:
        self.shards.read(*self.span(record))
        return cast(BlockRows, Stand(int(self.table.windows[record])))


def merged_requests(calls: list[list[tuple[int, int, int]]]) -> int:
    """Requests the read-ahead calls' ranges make when each call merges the ranges of one shard
    that lie next to each other (a range asked for by an earlier call is not asked again)."""
    seen: set[tuple[int, int, int]] = set()
    total = 0
    for call in calls:
        new = sorted({key for key in call if key not in seen})
        seen.update(new)
        end: tuple[int, int] | None = None  # (shard, end of the last range)
        for shard, offset, size in new:
            if end is None or end[0] != shard or offset - end[1] > COALESCE_GAP:
                total += 1
            end = (shard, offset + size)
    return total


def reader_traffic(
    ids: np.ndarray,
    table: RecordTable,
    index: SplitIndex,
    n_shards: int,
    micro: int,
    mix: int,
    shards: RecordingShards | None = None,
) -> dict[str, float]:
    """The remote reader's requests for these samples (batches of `micro`, mixing block `mix`):
    per 1000 samples, the share sent ahead, the requests if each read-ahead call merged adjacent
    ranges of a shard (plus those sent on demand), and the mean bytes per request. `shards`: where
    the requests are recorded (default: a new `RecordingShards`)."""
    if shards is None:
        shards = RecordingShards(RecordingStore("/"), [f"shard-{n:06d}" for n in range(n_shards)])
    store = shards.store
    records = SourceRecords([UnreadRecords(shards, index, table=table)], [ShardErrorPolicy("raise")], [0])
    whole = len(ids) // micro * micro
    plan = RankPlan(ids[:whole].reshape(-1, micro), total_batches=whole // micro)
    reader = PlannedBatches(records, ShardErrorPolicy("raise"), lambda: plan, mix, micro)
    for _ in reader:
        pass
    shards.close()
    sent = store.sent
    ahead = sum(1 for s in sent if s[3])
    on_demand = len(sent) - ahead
    per = 1000 / max(whole, 1)
    return {
        "requests_per_1000": len(sent) * per,
        "ahead_share": ahead / max(len(sent), 1),
        "merged_per_1000": (merged_requests(shards.calls) + on_demand) * per,
        "bytes_per_request": float(np.mean([s[2] for s in sent])) if sent else float("nan"),
    }
