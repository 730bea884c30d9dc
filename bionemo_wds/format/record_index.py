"""The record index: where each record of a shard lies and what it holds (format versions 3 and 4).

Per record (tar member ``<key>.msgpack``), in shard order:

    offset   byte offset of the record's data in the tar: ``os.pread(fd, size, offset)`` returns the
             record without reading what precedes it
    size     bytes of record data (the tar member's size)
    windows  windows the record holds
    crc32    ``zlib.crc32`` of the record's bytes

Version 4 (written now) keeps them in one binary file per split, ``<split>/record-index.npy``: rows
of `INDEX_DTYPE` (20 bytes each), every shard's records in shard order (`format.split_index_file`); the
manifest's shard entries say how many rows are theirs (``n_records``). Version 3 kept them in each
shard entry of the manifest as four JSON columns, ``"records": {"offset": [...], "size": [...],
"windows": [...], "crc32": [...]}`` (`index_of`): ~30 bytes of JSON and ~0.4 us of parsing per record,
so a dataset of 100,000 shards of 2048 records had a 6.3 GB manifest. Either way a shard's index is
a `RecordIndex`, numpy columns (views of the file's rows where they come from one).

The loader checks each record's crc32 and window count as it decodes it, so one changed base is an
error naming shard and record instead of a wrong token; `verify` checks all four columns.

Why crc32 and not crc32c or xxh3: crc32 is what `zlib` (the standard library) computes, so any
reader can check a record with nothing installed, and a SIMD implementation of the same checksum
exists: ISA-L's, through the `isal` package (a dependency; `record_crc32` falls back to `zlib` where
it cannot be imported, with equal results), which costs a small part of a 0-worker training pass
where zlib's cost a tenth of it (README, Record index and Benchmark). crc32 detects every burst
error of up to 32 bits (a changed base is 8) and any other change with probability 1 - 2^-32; it is
a check against damage, not against an adversary (the whole-shard sha256 in the manifest is that).
"""

from __future__ import annotations

import gc
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any

import numpy as np

from bionemo_wds.errors import ManifestError

#: The index columns, in the order the manifest lists them.
COLUMNS = ("offset", "size", "windows", "crc32")
#: One row of the record index (little-endian, packed: 20 bytes), as the version-4 file stores it.
INDEX_DTYPE = np.dtype([("offset", "<u8"), ("size", "<u4"), ("windows", "<u4"), ("crc32", "<u4")])


try:  # the same CRC-32 as zlib's, computed with SIMD instructions (ISA-L)
    from isal.isal_zlib import crc32 as _fast_crc32
except ImportError:  # a platform isal has no wheel for: the standard library's, same values
    _fast_crc32 = zlib.crc32


def record_crc32(data: bytes | memoryview) -> int:
    """The checksum the index stores for a record's bytes (``zlib.crc32``'s value)."""
    return _fast_crc32(data)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside (as it was after: enabled again only if it was before).

    For building the millions of lists and dicts of a large manifest and its record index, none of
    them garbage: the collections their allocations trigger walk every container made so far again
    and again. `read_manifest` of 100,000 shards of 16 records took 1.5 s with them, 0.9 s without
    (the one collection when the collector is enabled again included).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _int_lists(columns: Any) -> list[list[int]] | None:
    """The four index columns (`COLUMNS`) when each is a list holding only ints (what JSON gives),
    checked for all four at once (a small shard's index costs per call as much as per number); else None."""
    if type(columns) is not dict:
        return None
    offset, size, windows, crc32 = map(columns.get, COLUMNS)
    if type(offset) is list and type(size) is list and type(windows) is list and type(crc32) is list:
        if {*map(type, offset), *map(type, size), *map(type, windows), *map(type, crc32)} <= {int}:
            return [offset, size, windows, crc32]
    return None


def _rows(columns: list[Any]) -> np.ndarray:
    """Rows of `INDEX_DTYPE` from four equally long columns of ints; ValueError for a number the
    column's type cannot hold (negative, or beyond 64 or 32 bits)."""
    rows = np.empty(len(columns[0]), dtype=INDEX_DTYPE)
    for name, column in zip(COLUMNS, columns):
        values = column if isinstance(column, np.ndarray) else None
        for dtype in (np.int64, np.uint64) if values is None else ():  # uint64: the offsets int64 cannot hold
            try:
                values = np.asarray(column, dtype=dtype)
                break
            except OverflowError:
                continue
        limit = np.iinfo(INDEX_DTYPE[name]).max
        if values is None or (len(values) and (values.min() < 0 or int(values.max()) > limit)):
            raise ManifestError(f"the record index is malformed: its {name} column holds a number outside 0..{limit}")
        rows[name] = values
    return rows


class RecordIndex:
    """The record index of one shard: rows of `INDEX_DTYPE`, one per record in shard order, read as
    four numpy columns (``record_index.offset[n]``; `int` them where a Python int is needed). A shard's
    rows are a view of its split's index file when read from one (`split_index_file.SplitIndex`)."""

    __slots__ = ("rows",)

    def __init__(
        self,
        offset: Sequence[int] | np.ndarray = (),
        size: Sequence[int] | np.ndarray = (),
        windows: Sequence[int] | np.ndarray = (),
        crc32: Sequence[int] | np.ndarray = (),
    ):
        columns = [offset, size, windows, crc32]
        if len({len(column) for column in columns}) != 1:
            raise ManifestError("the record index is malformed: its columns have different lengths")
        self.rows: np.ndarray = _rows(columns)

    @classmethod
    def from_rows(cls, rows: np.ndarray) -> RecordIndex:
        """The index of these rows (of `INDEX_DTYPE`), without a copy."""
        index = cls.__new__(cls)
        index.rows = rows
        return index

    @property
    def offset(self) -> np.ndarray:
        return self.rows["offset"]

    @property
    def size(self) -> np.ndarray:
        return self.rows["size"]

    @property
    def windows(self) -> np.ndarray:
        return self.rows["windows"]

    @property
    def crc32(self) -> np.ndarray:
        return self.rows["crc32"]

    def __len__(self) -> int:
        return len(self.rows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordIndex):
            return NotImplemented
        return len(self) == len(other) and bool(np.all(self.rows == other.rows))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordIndex({', '.join(f'{name}={getattr(self, name).tolist()}' for name in COLUMNS)})"

    def as_dict(self) -> dict[str, list[int]]:
        """The version-3 manifest form: four JSON columns of Python ints."""
        return {name: getattr(self, name).tolist() for name in COLUMNS}

    @classmethod
    def from_dict(cls, columns: dict[str, Any]) -> RecordIndex:
        """The index from its version-3 manifest form; ValueError when that is not four equally long
        columns of numbers each column's type holds (what `int` makes of each)."""
        try:
            lists = _int_lists(columns) or [[int(v) for v in columns[name]] for name in COLUMNS]
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"the record index is malformed (needs columns {', '.join(COLUMNS)}): {exc!r}") from exc
        return cls(*lists)

    def disagreements(self, n: int, key: str, offset: int, data: bytes, windows: int | None) -> Iterator[str]:
        """What record `n` of the shard (member `key` at `offset`, holding `windows`; None: not
        known, the record does not decode) does not share with the index, one phrase per column."""
        if n >= len(self):
            yield f"record {key} is record {n + 1} of the shard but the record index lists {len(self)}"
            return
        listed_offset, listed_size, listed_windows, listed_crc = (int(v) for v in self.rows[n].tolist())
        if offset != listed_offset:
            yield f"record {key} starts at byte {offset}, the record index says {listed_offset}"
        if len(data) != listed_size:
            yield f"record {key} has {len(data)} bytes, the record index says {listed_size}"
        if windows is not None and windows != listed_windows:
            yield f"record {key} holds {windows} windows, the record index says {listed_windows}"
        crc = record_crc32(data)
        if crc != listed_crc:
            yield f"record {key} fails its crc32 check ({crc:08x}, the record index says {listed_crc:08x})"


class RecordIndexBuilder:
    """A shard's record index built a record at a time (as a shard is written or scanned)."""

    def __init__(self) -> None:
        self.columns: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])

    def __len__(self) -> int:
        return len(self.columns[0])

    def append(self, offset: int, data: bytes, windows: int) -> None:
        """Add the record whose `data` starts at byte `offset` of the shard."""
        self.columns[0].append(offset)
        self.columns[1].append(len(data))
        self.columns[2].append(windows)
        self.columns[3].append(record_crc32(data))

    def build(self) -> RecordIndex:
        return RecordIndex(*self.columns)


def index_of(shard: dict[str, Any]) -> RecordIndex | None:
    """The record index of a version-3 manifest shard entry (its JSON columns), or None when it has
    none (format versions 1 and 2; version 4 keeps it in a file: `split_index_file.shard_indexes`)."""
    columns = shard.get("records")
    return None if columns is None else RecordIndex.from_dict(columns)


def json_split_rows(shards: Sequence[tuple[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(rows, records per shard, numbers of the shards without an index) of a version-3 split's shard
    entries, given as (path, ``records`` columns or None): the columns of all shards converted at
    once (100,000 shards of 16 records: one pass per column, not 400,000); ValueError naming the
    shard whose columns are malformed."""
    lists, counts, unindexed = [], np.zeros(len(shards), dtype=np.int64), []
    for number, (path, columns) in enumerate(shards):
        if columns is None:
            unindexed.append(number)
            continue
        found = _int_lists(columns)
        if found is None or len({len(column) for column in found}) != 1:  # converted, or an error naming it
            index = shard_json_index(path, columns)
            assert index is not None
            found = [column.tolist() for column in (index.offset, index.size, index.windows, index.crc32)]
        lists.append(found)
        counts[number] = len(found[0])
    total = int(counts.sum())
    try:
        columns = [np.fromiter(chain.from_iterable(c[k] for c in lists), np.int64, total) for k in range(4)]
        return _rows(columns), counts, unindexed
    except (OverflowError, ValueError):  # a number int64 cannot hold: each shard alone (an error names its shard)
        parts = [index.rows for index in (shard_json_index(*shard) for shard in shards) if index is not None]
        return (np.concatenate(parts) if parts else np.empty(0, INDEX_DTYPE)), counts, unindexed


def shard_json_index(path: str, columns: Any) -> RecordIndex | None:
    """The record index of a version-3 shard entry's JSON columns (None: it has none), its
    ValueError naming the shard entry's path."""
    try:
        return None if columns is None else RecordIndex.from_dict(columns)
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from exc
