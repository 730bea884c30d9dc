"""Every record of a split, by its record index: where it lies, and reading it checked.

`SourceRecords` is the reader's view of a split of one or more datasets (`reader.PlannedBatches`
reads through it), each dataset's split a `SplitRecords`:
the rows of the split's record index (`format.read_split_index`; memory-mapped from the index file
of a local version-4 dataset, the JSON columns of a version-3 manifest, or an index built by
scanning the shards of a dataset written before there was one), the window counts as the
`plan.RecordTable` the epoch plan needs, and a positioned read of one record checked against its
row (crc32, window count). The checks a split's index allows before any record is read (records
ending past their shard's end, window counts against the manifest) are done at once for all shards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from bionemo_wds.errors import refusal_named
from bionemo_wds.format import MANIFEST_NAME, Manifest, ShardInfo, decode_columns, record_key
from bionemo_wds.format.record_index import INDEX_DTYPE, RecordIndex, RecordIndexBuilder, record_crc32
from bionemo_wds.format.shard_columns import shard_values
from bionemo_wds.format.split_index_file import SplitIndex, read_split_index
from bionemo_wds.format.tar import decode_named, iter_record_members
from bionemo_wds.load.plan import RecordTable
from bionemo_wds.load.plan.mixing import split_virtual
from bionemo_wds.load.plan.record_columns import Int64View, RecordShards
from bionemo_wds.load.rows import BlockRows
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.shard_urls import ShardUrls, split_sizes
from bionemo_wds.storage.cache import RangeCache
from bionemo_wds.storage.mapped import map_array
from bionemo_wds.storage.retry import RemoteReadError
from bionemo_wds.storage.shards import LocalShards, RemoteShards, ShardRanges
from bionemo_wds.storage.store import Store


class Unreported:
    """Takes a damaged record's report and drops it: another process reports that record."""

    def bad_record(self, *args: Any) -> None:
        pass

    def bad_checksum(self, *args: Any) -> None:
        pass

    def unreachable(self, *args: Any) -> None:
        pass

    def bad_window_count(self, *args: Any) -> None:
        pass


class SplitRecords:
    """Every record of a split: its shard, byte range, window count and crc32.

    The records are the rows of the split's record index (`format.SplitIndex`: memory-mapped from
    the index file of a local version-4 dataset, so a record's row is read when the record is), the
    window counts copied into the `RecordTable` (int64 per record) the plan needs. Damage found here
    (a shard shorter than its index, one that cannot be read to its end, a window count that
    disagrees with the manifest) goes to the policy once per shard: an error, or under
    ``handler="warn"`` a counted skip whose unreadable records are read as filler. Bytes come from
    `shards` (local files, or remote objects with retries, a cache and read-ahead).
    """

    def __init__(
        self, shards: ShardRanges, index: SplitIndex, damaged: set[int] | None = None, table: RecordTable | None = None
    ):
        self.shards, self.index = shards, index
        self.paths = shards.urls
        self.table = table if table is not None else record_table(index)
        self.damaged = damaged or set()  # record ids read as filler (already reported)

    @classmethod
    def of(cls, shards: ShardRanges, indexes: list[RecordIndex]) -> SplitRecords:
        """The records of these shard indexes (one per shard of `shards`)."""
        return cls(shards, SplitIndex.of(indexes))

    def __getstate__(self) -> dict[str, Any]:
        """A spawned loader worker maps the index file again instead of receiving a copy of it."""
        state = dict(self.__dict__)
        rows = self.index.rows
        if isinstance(rows, np.memmap) and rows.filename is not None:
            mapped = (rows.filename, rows.offset, rows.shape)
            state["index"] = SplitIndex(np.empty(0, rows.dtype), self.index.first, self.index.unindexed)
            state["mapped"] = mapped
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        mapped = state.pop("mapped", None)
        self.__dict__.update(state)
        if mapped is not None:
            filename, offset, shape = mapped
            rows = map_array(filename, INDEX_DTYPE, offset, shape)  # keeps no descriptor open
            self.index = SplitIndex(rows, self.index.first, self.index.unindexed)

    @classmethod
    def from_manifest(
        cls,
        store: Store,
        manifest: Manifest,
        split: str,
        policy: ShardErrorPolicy,
        sizes: Mapping[str, int | None],
        cache: RangeCache | None = None,
    ) -> SplitRecords:
        """`split`'s records, from its record index (`format.read_split_index`); shards of a dataset
        without one are scanned once here. `sizes` are the shard sizes found (by URL; None: missing;
        a shard not in it is taken to have its listed size), `cache` the node's range cache (remote
        only). A shard missing or not of its listed size goes to the policy here (under
        ``handler="warn"``: its records past the end of the file are filler)."""
        entries = manifest.splits[split].shards
        urls = ShardUrls(store, entries)  # each made when asked for
        shards: ShardRanges = RemoteShards(store, urls, cache) if store.remote else LocalShards(urls)
        found = split_sizes(sizes, split, urls, entries)
        index = read_split_index(store, manifest, split)
        scanned: dict[int, RecordIndex] = {}
        unindexed = set(range(len(entries))) if index is None else set(index.unindexed)
        manifest_url = store.url(MANIFEST_NAME)
        table = record_table(index) if index is not None else None
        past, windows = _shard_checks(index, table, found) if index is not None and table is not None else ({}, None)
        for number in _to_look_at(entries, found, unindexed, past, windows):  # in shard order
            shard = entries[number]
            url, size = urls[number], found[number]
            sized = size == shard.bytes
            if not sized:  # raises under "raise"; else one counted skip for the shard, nothing more reported
                policy.wrong_size(url, size, shard.bytes, manifest_url)
            if number in unindexed:  # a dataset written before the index: scan the shard once
                scanned[number] = _scan_shard(store, shard, policy, size, url)
                continue
            assert index is not None and windows is not None
            bad = past.get(number)
            if bad is not None and sized:  # the file has its listed size, but the index points past its end
                row = index.rows[int(index.first[number]) + bad[0]]
                exc = OSError(
                    f"record {record_key(number, bad[0])} ends at byte {int(row['offset']) + int(row['size'])}, "
                    f"past the end of the file ({size or 0} bytes)"
                )
                policy.damaged_shard(url, exc, record_key(number, bad[0] - 1) if bad[0] else None)
            if windows[number] != shard.n_samples:
                policy.check_count(url, int(windows[number]))
        if index is None or scanned:  # the scanned shards' indexes in their places
            views = index.indexes() if index is not None else []
            parts = [scanned[n] if n in scanned else views[n] for n in range(len(entries))]
            index, table = SplitIndex.of([part for part in parts if part is not None]), None
        records = cls(shards, index, table=table)
        records.damaged = {int(index.first[n]) + r for n, bad in past.items() for r in bad}
        return records

    def local(self, record: int) -> int:
        """The record's number within its shard."""
        return record - int(self.index.first[int(self.table.shard[record])])

    def key(self, record: int) -> str:
        """The record's member key, as prepare names it."""
        return record_key(int(self.table.shard[record]), self.local(record))

    def span(self, record: int) -> tuple[int, int, int]:
        """(shard, offset, size) of the record's bytes."""
        row = self.index.rows[record]
        return int(self.table.shard[record]), int(row["offset"]), int(row["size"])

    def prefetch(self, records: list[int]) -> None:
        """Start fetching these records' bytes (remote shards; in the order given)."""
        self.shards.prefetch(self.span(r) for r in records if r not in self.damaged)

    def read(self, record: int, policy: ShardErrorPolicy, report: bool = True) -> BlockRows | None:
        """The record, decoded and checked; None when it is damaged and the policy skips it (told
        only when `report`: one process reports a record, whichever reads it)."""
        if record in self.damaged:
            return None
        block = self._read(record, policy if report else Unreported())
        if block is None:
            self.damaged.add(record)
        return block

    def _read(self, record: int, policy: ShardErrorPolicy | Unreported) -> BlockRows | None:
        shard, offset, size = self.span(record)
        path = self.paths[shard]
        row = self.index.rows[record]
        expected_crc, expected_windows = int(row["crc32"]), int(row["windows"])
        try:
            data = self.shards.read(shard, offset, size)
            crc = record_crc32(data)
            if crc != expected_crc and isinstance(self.shards, RemoteShards):
                self.shards.drop(shard, offset, size)  # a bad cached or fetched copy: fetch once more
                data = self.shards.read(shard, offset, size)
                crc = record_crc32(data)
        except RemoteReadError as exc:
            policy.unreachable(path, self.key(record), exc)  # raises it under "raise"
            self.skip_shard(shard)
            if isinstance(self.shards, RemoteShards):
                self.shards.store.count(shards_skipped=1)
            return None
        except OSError as exc:
            policy.bad_record(path, self.key(record), exc)
            return None
        if crc != expected_crc:
            policy.bad_checksum(path, self.key(record), crc, expected_crc)
            return None
        try:
            block = decode_columns(data)
        except Exception as exc:
            policy.bad_record(path, self.key(record), exc)
            return None
        if len(block) != expected_windows:
            policy.bad_window_count(path, self.key(record), len(block), expected_windows)
            return None
        return BlockRows(block)

    def skip_shard(self, shard: int) -> None:
        """Read every record of `shard` as filler from now on (it could not be fetched)."""
        self.damaged.update(range(int(self.index.first[shard]), int(self.index.first[shard + 1])))

    def close(self) -> None:
        self.shards.close()


class SourceRecords:
    """The records of a split of one or more datasets (sources) as one table: source d's window w is
    window ``offset_d + w``, and a record is read by its own source's records and policy. The plan's
    virtual ids (``pass x total + window``) are decoded here (`resolve`)."""

    def __init__(self, parts: Sequence[SplitRecords], policies: Sequence[ShardErrorPolicy], seeds: Sequence[int]):
        self.parts, self.policies, self.seeds = list(parts), list(policies), list(seeds)
        tables = [p.table for p in parts]
        shard_offsets = np.cumsum([0] + [len(p.paths) for p in parts])[:-1]
        if len(tables) == 1:  # one dataset: its own table (a copy would be 16 more bytes per record)
            self.table = tables[0]
        else:
            self.table = RecordTable(
                np.concatenate([t.shard + off for t, off in zip(tables, shard_offsets)] or [np.empty(0, np.int64)]),
                np.concatenate([t.windows for t in tables] or [np.empty(0, np.int64)]),
            )
        self.record_offsets = np.cumsum([0] + [len(t) for t in tables]).astype(np.int64)
        self.window_offsets = np.cumsum([0] + [t.n_windows for t in tables]).astype(np.int64)
        self.total = max(int(self.window_offsets[-1]), 1)
        # what the reader asks of the shards: whether to work out and prefetch what comes next
        self.shards = SimpleNamespace(reads_ahead=any(p.shards.reads_ahead for p in parts))

    @property
    def tables(self) -> tuple[RecordTable, ...]:
        """Each source's record table (what the plan deals windows from)."""
        return tuple(p.table for p in self.parts)

    @property
    def rows_per_sample(self) -> float:
        """Stored rows a mixing block's sample keeps decoded in the reader's cache: a window is a row."""
        return 1.0

    def part(self, record: int) -> tuple[int, int]:
        """(source, record within it) of a record of the table."""
        d = int(np.searchsorted(self.record_offsets, record, side="right")) - 1
        return d, record - int(self.record_offsets[d])

    def windows(self, ids: np.ndarray) -> np.ndarray:
        """Virtual plan ids -> window ids of the table."""
        return split_virtual(ids, self.total)[0]

    def resolve(self, ids: np.ndarray) -> tuple[np.ndarray, list[int], list[tuple[int, int]]]:
        """Virtual plan ids -> (window ids of the table, source of each, (seed, pass) of each
        window's draws)."""
        windows, passes = split_virtual(ids, self.total)
        if len(self.parts) == 1:
            sources = [0] * len(windows)
        else:
            sources = (np.searchsorted(self.window_offsets, windows, side="right") - 1).tolist()
        seeds = self.seeds
        draws = [(seeds[d], p) for d, p in zip(sources, passes.tolist())]
        return windows, sources, draws

    def read(self, record: int, report: bool = True) -> BlockRows | None:
        """The record, read and checked by its source (whose policy reports damage, when `report`)."""
        d, local = self.part(record)
        return self.parts[d].read(local, self.policies[d], report)

    def prefetch(self, records: list[int]) -> None:
        """Start fetching these records' bytes (remote sources; in the order given)."""
        for d, wanted in by_source(records, self.record_offsets).items():
            self.parts[d].prefetch(wanted)

    def close(self) -> None:
        for part in self.parts:
            part.close()


def by_source(records: list[int], record_offsets: np.ndarray) -> dict[int, list[int]]:
    """Record numbers across sources (source d's record r is ``record_offsets[d] + r``) -> each
    source's own record numbers, in the order given."""
    sources = np.searchsorted(record_offsets, np.asarray(records, dtype=np.int64), side="right") - 1
    out: dict[int, list[int]] = {}
    for d, record in zip(sources.tolist(), records):
        out.setdefault(d, []).append(record - int(record_offsets[d]))
    return out


#: Rows checked at once (`_shard_checks`): about 4M, ~100 MB of temporaries.
_CHUNK_ROWS = 1 << 22


def record_table(index: SplitIndex) -> RecordTable:
    """The split's `RecordTable`: each record's shard and window count, as views that hold no int64
    per record (`plan.record_columns`: the shard from the index's first record of each shard, the
    window counts the index's own column)."""
    n = len(index.rows)
    if len(index.first) and int(index.first[-1]) == n:
        return RecordTable(RecordShards(index.first), Int64View(index.rows["windows"]))
    # shards past the rows' end (not an index `SplitIndex.of` makes): numbers from a cumulative sum
    # of marks where shards start (`numpy.repeat` of the shard numbers by count: ~20 ns per record)
    starts = index.first[1:-1]
    shard = np.cumsum(np.bincount(starts[starts < n], minlength=n)[:n]) if n else np.empty(0, np.int64)
    return RecordTable(shard.astype(np.int64, copy=False), index.rows["windows"].astype(np.int64))


def _shard_checks(
    index: SplitIndex, table: RecordTable, sizes: list[int | None]
) -> tuple[dict[int, list[int]], np.ndarray]:
    """(shard -> its records (numbers within it) that end past the end of the shard file, for the
    shards that have any; windows each shard's records hold), by the index, its `table` and the
    shard sizes found (`sizes`; None: missing). Computed over chunks of `_CHUNK_ROWS` rows: no
    Python step per record or per shard, and little memory beside the rows."""
    rows, first = index.rows, index.first
    nonempty = np.flatnonzero(np.diff(first) > 0)
    windows = np.zeros(len(first) - 1, dtype=np.int64)
    if len(nonempty):
        windows[nonempty] = np.add.reduceat(table.windows, first[nonempty])
    limit = np.fromiter((size or 0 for size in sizes), dtype=np.int64, count=len(sizes))
    past: dict[int, list[int]] = {}
    for lo in range(0, len(rows), _CHUNK_ROWS):
        part, shard = rows[lo : lo + _CHUNK_ROWS], table.shard[lo : lo + _CHUNK_ROWS]
        ends = part["offset"].astype(np.int64) + part["size"]
        for record in (np.flatnonzero(ends > limit[shard]) + lo).tolist():
            n = int(table.shard[record])
            past.setdefault(n, []).append(record - int(first[n]))
    return past, windows


def _to_look_at(
    entries: Sequence[ShardInfo],
    found: list[int | None],
    unindexed: set[int],
    past: Mapping[int, list[int]],
    windows: np.ndarray | None,
) -> list[int]:
    """The shards `SplitRecords.from_manifest` has something to do for, in order: not of their listed
    size (`found`), without an index, with records past their end, or whose windows (by the index)
    are not the manifest's count. Found without a Python step per shard, which at 100,000 shards
    would cost as much as the rest of the set-up."""
    listed = np.fromiter(shard_values(entries, "bytes"), dtype=np.int64, count=len(entries))
    sized = np.fromiter((-1 if size is None else size for size in found), dtype=np.int64, count=len(found))
    odd = listed != sized
    if windows is not None:
        counts = np.fromiter(shard_values(entries, "n_samples"), dtype=np.int64, count=len(entries))
        odd |= windows != counts
    return sorted({*np.flatnonzero(odd).tolist(), *unindexed, *past})


def _scan_shard(store: Store, shard: ShardInfo, policy: ShardErrorPolicy, size: int | None, path: str) -> RecordIndex:
    """The record index of a shard without one (a dataset written before the index), from one read
    of the shard; what cannot be read is reported to the policy (once per shard). `size` is the
    shard's size found (None: missing), `path` its URL."""
    index = RecordIndexBuilder()
    if size is None:
        return index.build()  # missing: reported by the caller, nothing to read
    sized = size == shard.bytes
    key = None
    try:
        with refusal_named(path), store.open(shard.path) as fh:  # the system refusing the file is not damage
            for key, offset, data in iter_record_members(fh, path):
                index.append(offset, data, len(decode_named(data, key, path)))
    except (OSError, ValueError) as exc:
        if sized:
            policy.damaged_shard(path, exc, key)
        return index.build()
    built = index.build()
    if sized:
        policy.check_count(path, int(built.windows.sum()))
    return built
