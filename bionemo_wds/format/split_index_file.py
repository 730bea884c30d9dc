"""The record index of a split, as one reading API for every format version that has one.

Format version 4 keeps a split's record index in one binary file, ``<split>/record-index.npy``: a
NumPy ``.npy`` file (`numpy.save`'s format) of rows of `record_index.INDEX_DTYPE` (offset ``<u8``, size,
windows and crc32 ``<u4``: 20 bytes per record, packed), every shard's records in shard order, each
shard's in its own order. The manifest's split entry lists the file::

    "record_index": {"path": "train/record-index.npy", "records": N, "bytes": ..., "sha256": "..."}

and each shard entry says how many rows are its own (``"n_records": k``: the k rows after those of
the shards before it). Why a file: as JSON in the manifest (version 3) the index costs ~30 bytes and
~0.4 us per record to read; 100,000 shards of 2048 records were a 6.3 GB manifest, ~80 s to parse
into ~27 GB of Python objects. As rows it is 20 bytes per record, read by nobody until used: a local
file is memory-mapped (`storage.mapped.load_npy`: no descriptor stays open), a remote one fetched once.

`write_record_index` writes the file (atomically, before the manifest that lists it: `write_manifest`
is its one caller); `read_split_index` / `shard_indexes` read a split's index for versions 3 (the
manifest's JSON columns) and 4 (the file), None before version 3. A version-4 file missing, of
another size or row count than listed, or not of rows of `INDEX_DTYPE` is a `ManifestError`
naming the file; its sha256 is checked where the whole file is read anyway (`verify`, a remote read).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from bionemo_wds.errors import ManifestError, os_error, refusal_named
from bionemo_wds.format.manifest_types import INDEX_ENTRY_KEYS, Manifest, RecordIndexEntry, ShardInfo
from bionemo_wds.format.record_index import INDEX_DTYPE, RecordIndex, json_split_rows, paused_gc
from bionemo_wds.format.shard_columns import shard_values
from bionemo_wds.storage.atomic import HashingReader, HashingWriter
from bionemo_wds.storage.mapped import load_npy
from bionemo_wds.storage.store import Store

#: A split's record index file, in the split's folder.
RECORD_INDEX_NAME = "record-index.npy"
#: Bytes gathered before one write (a file of 100,000 small shards is not 100,000 writes).
_WRITE_BYTES = 8 << 20


def record_index_path(split: str) -> str:
    """Where a split's record index file lies, relative to the dataset root."""
    return f"{split}/{RECORD_INDEX_NAME}"


@dataclass
class SplitIndex:
    """The record index of every shard of a split: `rows` of `INDEX_DTYPE` in shard order (the
    memory-mapped file of a local version-4 dataset), shard ``n`` owning ``rows[first[n]:first[n + 1]]``.
    `unindexed`: shards whose (version-3) entry has no index (no rows; the loader scans them)."""

    rows: np.ndarray
    first: np.ndarray  # int64, one more than there are shards
    unindexed: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, indexes: Sequence[RecordIndex]) -> SplitIndex:
        """The split index of these shard indexes (copied into one array)."""
        counts = np.fromiter(map(len, indexes), dtype=np.int64, count=len(indexes))
        rows = np.concatenate([index.rows for index in indexes]) if indexes else np.empty(0, INDEX_DTYPE)
        return cls(rows.astype(INDEX_DTYPE, copy=False), _first(counts))

    def __len__(self) -> int:
        return len(self.first) - 1

    def shard(self, n: int) -> RecordIndex | None:
        """Shard `n`'s index (a view of the rows), None for an unindexed one."""
        if n in self.unindexed:
            return None
        return RecordIndex.from_rows(self.rows[int(self.first[n]) : int(self.first[n + 1])])

    def indexes(self) -> list[RecordIndex | None]:
        """Every shard's index, in shard order."""
        views: list[RecordIndex | None] = [
            RecordIndex.from_rows(self.rows[a:b]) for a, b in pairwise(self.first.tolist())
        ]
        for n in self.unindexed:
            views[n] = None
        return views


def _first(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def write_record_index(store: Store, split: str, indexes: Sequence[RecordIndex]) -> dict[str, Any]:
    """Write `split`'s record index file from its shards' indexes (in shard order), atomically (one
    object on an object store); returns the manifest's ``record_index`` entry for it. The bytes are
    exactly `numpy.save`'s of the concatenated rows, written without concatenating them."""
    rel = record_index_path(split)
    n = sum(len(index) for index in indexes)
    header = {"descr": np.lib.format.dtype_to_descr(INDEX_DTYPE), "fortran_order": False, "shape": (n,)}
    with store.write(rel) as fh:
        out = HashingWriter(fh)
        np.lib.format.write_array_header_1_0(out, header)
        pending: list[bytes] = []
        size = 0
        for index in indexes:
            pending.append(np.ascontiguousarray(index.rows, dtype=INDEX_DTYPE).tobytes())
            size += len(pending[-1])
            if size >= _WRITE_BYTES:
                out.write(b"".join(pending))
                pending, size = [], 0
        out.write(b"".join(pending))
    return {"path": rel, "records": n, "bytes": out.size, "sha256": out.sha.hexdigest()}


def shard_indexes(
    store: Store, manifest: Manifest, split: str, problems: list[str] | None = None
) -> list[RecordIndex | None] | None:
    """Every shard's record index of `split` (`read_split_index`), one per shard entry in order;
    None for a dataset without one (format versions 1 and 2)."""
    index = read_split_index(store, manifest, split, problems)
    return None if index is None else index.indexes()


def read_split_index(
    store: Store, manifest: Manifest, split: str, problems: list[str] | None = None
) -> SplitIndex | None:
    """`split`'s record index: from the file (version 4; memory-mapped when local, fetched whole when
    remote), from the manifest's JSON columns (version 3), None before version 3.

    A version-4 file that cannot be used is a `ManifestError` naming it. `problems` (what `verify`
    passes) collects what verify reports and reads on past: the file's sha256 differing from the
    manifest's (checked then, by reading the whole file), a version-3 shard entry's malformed
    columns (that shard is then unindexed); without it these raise (the sha256 is checked only
    where the file is read whole anyway: remote).
    """
    version = manifest.format_version
    shards = manifest.splits[split].shards
    if version < 3:
        return None
    if version == 3:
        return _json_index(shards, problems)
    entry = manifest.splits[split].record_index
    counts = _record_counts(store, shards, split)
    if entry is None:
        raise ManifestError(
            f"{store.url('manifest.json')} is damaged: its {split} split has no complete record_index entry "
            f"({', '.join(INDEX_ENTRY_KEYS)}); prepare the dataset again"
        )
    rows = _load_rows(store, entry, problems)
    listed = {int(entry.records), int(counts.sum())}
    if listed != {len(rows)}:
        raise ManifestError(
            f"{store.url(str(entry.path))} holds {len(rows)} records, but the manifest lists "
            f"{' and '.join(map(str, sorted(listed)))} (record_index.records, the shards' n_records): "
            "the record index file disagrees with the manifest (run `bionemo-wds verify`, or prepare again)"
        )
    return SplitIndex(rows, _first(counts))


def _json_index(shards: Sequence[ShardInfo], problems: list[str] | None) -> SplitIndex:
    """A version-3 split's index from its shard entries' JSON columns; under `problems` a shard whose
    columns are malformed is reported there and left unindexed."""
    columns = [(shard.path, shard.records) for shard in shards]
    if problems is not None:
        kept = []
        for path, records in columns:
            try:
                json_split_rows([(path, records)])
            except ValueError as exc:
                problems.append(str(exc))
                records = None
            kept.append((path, records))
        columns = kept
    with paused_gc():  # collections would walk the millions of objects of a large version-3 manifest again
        rows, counts, unindexed = json_split_rows(columns)
    return SplitIndex(rows, _first(counts), unindexed)


def _record_counts(store: Store, shards: Sequence[ShardInfo], split: str) -> np.ndarray:
    """Each shard entry's ``n_records`` (version 4); a `ManifestError` for one without a count."""
    values = shard_values(shards, "n_records")
    try:
        counts = values if isinstance(values, np.ndarray) else np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        counts = None
    if counts is None or (len(counts) and counts.min() < 0):
        if counts is not None:
            bad = int(np.flatnonzero(counts < 0)[0])
        else:
            bad = next(n for n, count in enumerate(values) if not (isinstance(count, int) and count >= 0))
        raise ManifestError(
            f"{store.url('manifest.json')} is damaged: splits.{split}.shards[{bad}].n_records is not a record "
            "count (prepare the dataset again)"
        )
    return counts


def _load_rows(store: Store, entry: RecordIndexEntry, problems: list[str] | None) -> np.ndarray:
    """The rows of a version-4 index file, checked against its manifest entry (size; sha256 where
    the file is read whole, or always under `problems`)."""
    return load_npy_rows(store, str(entry.path), int(entry.bytes), str(entry.sha256), INDEX_DTYPE, problems)


def load_npy_rows(
    store: Store,
    rel: str,
    size_listed: int,
    sha_listed: str,
    dtype: np.dtype,
    problems: list[str] | None,
    what: str = "record index",
    row: str = "record",
) -> np.ndarray:
    """The rows of a ``.npy`` file a manifest lists (`rel`, relative to the root) with its size and
    sha256: memory-mapped when local, fetched whole when remote (its sha256 then checked, as it is
    always under `problems`, where a differing sha256 is reported instead of raised). A file missing,
    of another size, or not a 1-d array of `dtype` is a `ManifestError` naming it; `what` is what
    the file is to the split (the record index, the sequence index), `row` what one row stands for."""
    url = store.url(rel)
    data = None
    try:
        if store.remote:  # not counted as shard reads are (`Store.uncounted`)
            data = store.uncounted().read_bytes(rel)
            size = len(data)
        else:
            size = store.size(rel)
    except FileNotFoundError:
        raise ManifestError(
            f"{url} is missing: the manifest lists it as the {what} of its split (prepare the dataset again)"
        ) from None
    except OSError as exc:
        raise _refused(exc, url) from exc
    if size != size_listed:
        raise ManifestError(
            f"{url} has {size} bytes, but the manifest lists {size_listed}: the {what} file is truncated "
            "or replaced (run `bionemo-wds verify`, or prepare the dataset again)"
        )
    if data is not None or problems is not None:
        if data is not None:
            sha = HashingReader(io.BytesIO(data)).finish()[1]
        else:
            try:
                with store.open(rel) as fh:
                    sha = HashingReader(fh).finish()[1]
            except OSError as exc:
                raise _refused(exc, url) from exc
        if sha != sha_listed:
            message = (
                f"{url}: sha256 {sha[:12]}... differs from the manifest's {str(sha_listed)[:12]}...: the "
                f"{what} file changed after it was written"
            )
            if problems is None:
                raise ManifestError(f"{message} (run `bionemo-wds verify`, or prepare the dataset again)")
            problems.append(message)
    try:
        with refusal_named(url):  # the system refusing the file is not damage
            rows = np.load(io.BytesIO(data), allow_pickle=False) if data is not None else load_npy(url)
    except (ValueError, OSError, EOFError) as exc:
        raise ManifestError(f"{url} is damaged: it is not a {what} file ({exc})") from exc
    if rows.dtype != dtype or rows.ndim != 1:
        raise ManifestError(
            f"{url} is damaged: it holds an array of {rows.dtype} and shape {rows.shape}, not a {what} "
            f"(one row of {dtype} per {row})"
        )
    return rows


def _refused(exc: OSError, url: str) -> Exception:
    """What an `OSError` reading a listed index file is reported as: the system's refusal
    (`errors.os_error`), else a `ManifestError` naming the file and the error."""
    return os_error(exc, url) or ManifestError(f"{url} cannot be read: {exc}")
