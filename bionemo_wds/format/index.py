"""The record index: where each record of a shard lies and what it holds (format version 3).

Each shard entry of a version-3 manifest carries ``records``, four columns with one entry per
record (tar member ``<key>.msgpack``) in shard order::

    "records": {"offset": [...], "size": [...], "windows": [...], "crc32": [...]}

    offset   byte offset of the record's data in the tar: ``os.pread(fd, size, offset)`` returns the
             record without reading what precedes it
    size     bytes of record data (the tar member's size)
    windows  windows the record holds
    crc32    ``zlib.crc32`` of the record's bytes

The loader checks each record's crc32 and window count as it decodes it, so one changed base is an
error naming shard and record instead of a wrong token; `verify` checks all four columns.

Why crc32 and not crc32c or xxh3: `zlib.crc32` is in the standard library (no extra dependency for
every reader; crc32c and xxh3 would each need a compiled package), and it is fast enough: measured
2.2-3.1 GB/s on the 2-core AMD EPYC development machine (zlib 1.2.13), 42 us for a 128 kB record
of 16 windows of 8 kb, i.e. 2.6-3.4 us per window, against ~35-40 us per window of a whole
0-worker training pass (read, decode, shuffle, reverse complement, batch). crc32c or xxh3 would be
5-10x faster where available, saving at most ~3 us per window. crc32 detects every burst error of
up to 32 bits (a changed base is 8) and any other change with probability 1 - 2^-32; it is a
check against damage, not against an adversary (the whole-shard sha256 in the manifest is that).
"""

from __future__ import annotations

import gc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: The index columns, in the order the manifest lists them.
COLUMNS = ("offset", "size", "windows", "crc32")


def record_crc32(data: bytes) -> int:
    """The checksum the index stores for a record's bytes."""
    return zlib.crc32(data)


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
    """Copies of the four index columns (`COLUMNS`) when each is a list holding only ints (what JSON
    gives), checked for all four at once (a small shard's index costs per call as much as per
    number); else None."""
    if type(columns) is not dict:
        return None
    offset, size, windows, crc32 = map(columns.get, COLUMNS)
    if type(offset) is list and type(size) is list and type(windows) is list and type(crc32) is list:
        if {*map(type, offset), *map(type, size), *map(type, windows), *map(type, crc32)} <= {int}:
            return [offset[:], size[:], windows[:], crc32[:]]
    return None


@dataclass
class RecordIndex:
    """The record index of one shard, column-wise (one entry per record, in shard order)."""

    offset: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)
    crc32: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)

    def append(self, offset: int, data: bytes, windows: int) -> None:
        """Add the record whose `data` starts at byte `offset` of the shard."""
        self.offset.append(offset)
        self.size.append(len(data))
        self.windows.append(windows)
        self.crc32.append(record_crc32(data))

    def as_dict(self) -> dict[str, list[int]]:
        """The manifest form (``ShardInfo.records``)."""
        return {name: list(getattr(self, name)) for name in COLUMNS}

    @classmethod
    def from_dict(cls, columns: dict[str, Any]) -> RecordIndex:
        """The index from its manifest form; ValueError when that is not four equally long columns."""
        # lists of ints only are what `int(v)` of each copies them to (`_int_lists`, faster); anything
        # else goes that way, with its errors
        try:
            lists = _int_lists(columns) or [[int(v) for v in columns[name]] for name in COLUMNS]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the record index is malformed (needs columns {', '.join(COLUMNS)}): {exc!r}") from exc
        if len({len(column) for column in lists}) != 1:
            raise ValueError("the record index is malformed: its columns have different lengths")
        return cls(*lists)

    def disagreements(self, n: int, key: str, offset: int, data: bytes, windows: int | None) -> Iterator[str]:
        """What record `n` of the shard (member `key` at `offset`, holding `windows`; None: not
        known, the record does not decode) does not share with the index, one phrase per column."""
        if n >= len(self):
            yield f"record {key} is record {n + 1} of the shard but the record index lists {len(self)}"
            return
        if offset != self.offset[n]:
            yield f"record {key} starts at byte {offset}, the record index says {self.offset[n]}"
        if len(data) != self.size[n]:
            yield f"record {key} has {len(data)} bytes, the record index says {self.size[n]}"
        if windows is not None and windows != self.windows[n]:
            yield f"record {key} holds {windows} windows, the record index says {self.windows[n]}"
        crc = record_crc32(data)
        if crc != self.crc32[n]:
            yield f"record {key} fails its crc32 check ({crc:08x}, the record index says {self.crc32[n]:08x})"


def index_of(shard: dict[str, Any]) -> RecordIndex | None:
    """The record index of a manifest shard entry, or None when it has none (format versions 1 and 2)."""
    columns = shard.get("records")
    return None if columns is None else RecordIndex.from_dict(columns)
