"""The plan's data: a split's record table, what one rank reads in one pass, resume segments.

Pure data, no I/O. A plan deals *samples*; today a sample is one stored window, so a sample id is a
window id of the split (record-major: record ``r`` holds windows ``first[r] .. first[r+1]-1``),
offset by the source and the pass for several datasets (`plan.mixing`). `FILLER` marks a place
with no sample (padding of an evaluation rank, a damaged record).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from bionemo_wds.load.plan.record_columns import Int64View, RecordShards

#: Window id of a filler window (padding of an evaluation rank or a damaged record's place).
FILLER = -1
#: Windows mixed together at once in a training epoch (records of 16 windows: 64 records).
DEFAULT_MIX = 1024
#: Positions an `EpochOrder` computes at once (temporaries of 64k int64 values stay in the CPU cache).
CHUNK = 1 << 16
#: Consecutive batches one loader worker produces at a time: enough that a worker reads the
#: records of its batches once, few enough that the main process holds little to reorder.
UNIT_BATCHES = 16


class Samples(Protocol):
    """What a plan deals sample ids from: a `RecordTable` of stored windows, or a table of samples cut
    at load time (`plan.samples`); the plan needs only how many samples it holds (and its epoch order,
    `order.epoch_order`)."""

    @property
    def n_windows(self) -> int: ...


@dataclass(frozen=True)
class RecordTable:
    """The records of a split, in shard order: which shard each is in, and how many windows it holds.

    Either column may be a view that holds no int64 per record (`record_columns`: the shard found
    from the shards' first records, the window counts read from the record index as int64)."""

    shard: np.ndarray | RecordShards  # int64 shard number per record
    windows: np.ndarray | Int64View  # int64 windows per record

    def __post_init__(self) -> None:
        if len(self.shard) != len(self.windows):
            raise ValueError("record table columns have different lengths")

    @classmethod
    def from_counts(cls, windows_per_shard: Sequence[Sequence[int]]) -> RecordTable:
        """From the window counts of every record of every shard."""
        shard = np.repeat(np.arange(len(windows_per_shard), dtype=np.int64), [len(w) for w in windows_per_shard])
        windows = np.fromiter((n for shard in windows_per_shard for n in shard), dtype=np.int64, count=len(shard))
        return cls(shard, windows)

    def __len__(self) -> int:
        return len(self.windows)

    @cached_property
    def first(self) -> np.ndarray:
        """First window id of each record, plus the total at the end (length ``len + 1``; computed
        once: every batch locates its windows by it)."""
        return np.concatenate([[0], np.cumsum(self.windows)]).astype(np.int64)

    @property
    def n_windows(self) -> int:
        return int(self.windows.sum())

    def locate(self, window_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record, row within the record) of each window id."""
        first = self.first
        record = np.searchsorted(first, window_ids, side="right") - 1
        return record, window_ids - first[record]


@dataclass(frozen=True)
class Consumed:
    """Batches every rank took of an epoch with one data-parallel layout (one segment of a resumed epoch)."""

    dp_size: int
    micro: int
    batches: int


@dataclass
class RankPlan:
    """What one rank reads in one pass."""

    batches: np.ndarray  # int64 (n_batches, micro): window ids, FILLER for filler
    left_out: int = 0  # windows of the epoch no rank reads (fewer than one global batch)
    first_batch: int = 0  # index of batches[0] in the epoch (after a resume)
    total_batches: int = 0  # batches of the whole epoch on every rank
    extra: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.batches)
