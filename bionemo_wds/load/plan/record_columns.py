"""A record table's columns without a copy per record: `RecordShards` and `Int64View`.

Every rank holds its split's `RecordTable` (a global shuffle needs every record's window count),
and with two int64 columns copied out of the record index that is 16 bytes per record of the
dataset, most of them records the rank never reads. Here the shard of each record is found from
the shards' first records (8 bytes per shard: a binary search for one record, a run for a range),
and the window counts are the record index's own column (memory-mapped from the index file, shared
by a node's ranks through the page cache), read as int64 where asked for. Both behave as the int64
arrays they replace for what the loader and the plan do with them: an item, a slice, an array of
positions, ``len``, ``sum``/``max``, ``tolist`` and any numpy function (`numpy.asarray` gives the
whole column as int64, made then).
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT64 = np.dtype(np.int64)


class Int64View:
    """An integer column (any integer dtype, e.g. a memory-mapped ``<u4`` field) read as int64."""

    dtype = INT64

    def __init__(self, base: np.ndarray):
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.base),)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.base.astype(dtype or INT64)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, int | np.integer):
            return np.int64(self.base[i])
        return np.asarray(self.base[i]).astype(INT64)

    def sum(self) -> np.int64:
        return np.int64(self.base.sum(dtype=INT64))

    def max(self) -> np.int64:
        return np.int64(self.base.max())

    def tolist(self) -> list[int]:
        return list(self.base.tolist())

    def __add__(self, other: Any) -> np.ndarray:
        return np.asarray(self) + other

    def __getstate__(self) -> dict[str, Any]:
        return {"base": np.array(self.base)}  # a memory map's pages, not the map


class RecordShards:
    """The shard of each record (int64), from `first`: each shard's first record, then the number of
    records (``len(first) == shards + 1``; an empty shard repeats its successor's first)."""

    dtype = INT64

    def __init__(self, first: np.ndarray):
        self.first = np.asarray(first, dtype=INT64)
        self.n = int(self.first[-1]) if len(self.first) else 0

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n,)

    def _range(self, lo: int, hi: int) -> np.ndarray:
        """The shards of records ``[lo, hi)``: a run per shard, no search per record."""
        if hi <= lo:
            return np.empty(0, dtype=INT64)
        s0 = int(np.searchsorted(self.first, lo, side="right")) - 1
        s1 = int(np.searchsorted(self.first, hi - 1, side="right"))  # one past the last record's shard
        edges = np.clip(self.first[s0 : s1 + 1], lo, hi)
        return np.repeat(np.arange(s0, s1, dtype=INT64), np.diff(edges))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._range(0, self.n)
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, int | np.integer):
            record = int(i) + self.n if i < 0 else int(i)
            if not 0 <= record < self.n:
                raise IndexError(f"record {i} out of range ({self.n} records)")
            return np.int64(np.searchsorted(self.first, record, side="right") - 1)
        if isinstance(i, slice):
            lo, hi, step = i.indices(self.n)
            return self._range(lo, hi)[::step] if step != 1 else self._range(lo, hi)
        records = np.asarray(i, dtype=INT64)
        records = np.where(records < 0, records + self.n, records)
        return (np.searchsorted(self.first, records, side="right") - 1).astype(INT64)

    def tolist(self) -> list[int]:
        return list(np.asarray(self).tolist())

    def __add__(self, other: Any) -> np.ndarray:
        return np.asarray(self) + other
