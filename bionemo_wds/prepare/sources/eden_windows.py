"""Eden's precomputed window databases: which windows of which contigs make up a split.

The sharded-Eden loader reads its samples from a SQLite database per split, written by its
``precompute`` step from the split's Parquet list:

- ``metadata(key TEXT PRIMARY KEY, value INTEGER NOT NULL)`` with ``window_size`` (the model's
  sequence length in tokens), ``stride``, ``window_min_length_threshold``, ``total_windows`` and
  ``distinct_sequences``;
- ``window_mappings(window_idx INTEGER PRIMARY KEY, sequence_id TEXT NOT NULL, window_in_seq_idx
  INTEGER NOT NULL)``, indexed on ``sequence_id``: contigs sorted by id, ``1 + (L - W) // S``
  windows per contig of length ``L >= W`` and one otherwise, numbered from 0 across the split.

Window k of a contig starts at base ``k * stride``. `write_window_db` writes such a database
(`bionemo-wds precompute-windows`); `read_window_db` reads one for `prepare --window-db`, so a
dataset can be made of exactly the windows an Eden run would have used.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bionemo_wds.errors import BadInputError, OptionError, SourceError
from bionemo_wds.storage.atomic import atomic_path

#: Metadata keys a window database must have for `prepare` (Eden's loader checks the same two).
REQUIRED_META = ("window_size", "stride")
#: Windows per `executemany` batch when writing (a few MB of Python tuples at a time).
INSERT_BATCH = 100_000
#: Windows per `fetchmany` when reading.
FETCH_BATCH = 1 << 16


def read_only(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection to the SQLite file `path` (``mode=ro``: never creates or changes it).

    The URI is built from the absolute path with percent-encoding, so names holding ``?``, ``#`` or
    ``%`` open the right file.
    """
    return sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)


def eden_window_counts(lengths: np.ndarray, window_size: int, stride: int, min_length: int = 0) -> np.ndarray:
    """Windows per contig as Eden's precompute counts them: ``1 + (L - W) // S`` for ``L >= W``, else 1.

    With `min_length` > 0 (Eden's ``window_min_length_threshold``) a window holding fewer than
    `min_length` bases is dropped: every window of a contig of ``L >= W`` holds W bases, the one
    window of a shorter contig holds L.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = np.where(lengths >= window_size, 1 + (lengths - window_size) // stride, 1)
    if min_length > 0:
        counts = np.where(np.minimum(lengths, window_size) >= min_length, counts, 0)
    return counts.astype(np.int64)


@dataclass(frozen=True)
class WindowDb:
    """The windows of one window database, as catalog rows, in ``window_idx`` order."""

    path: str
    meta: dict[str, int]  # its metadata table
    rows: np.ndarray  # int64 per window: the catalog row of its contig (from the caller's `row_of`)
    numbers: np.ndarray  # int64 per window: window_in_seq_idx (its start is number * stride)


def _query(conn: sqlite3.Connection, path: str, sql: str) -> sqlite3.Cursor:
    """`conn.execute(sql)`; a file that is no Eden window database is a `BadInputError` naming it."""
    try:
        return conn.execute(sql)
    except sqlite3.DatabaseError as exc:  # no such table / column, not a database, unreadable
        raise SourceError(
            f"window database {path} cannot be read as an Eden window database ({exc}); expected tables "
            "metadata(key, value) and window_mappings(window_idx, sequence_id, window_in_seq_idx), "
            "as `bionemo-wds precompute-windows` writes them"
        ) from exc


def read_window_meta(path: str) -> dict[str, int]:
    """The metadata table of window database `path`; without ``window_size`` or ``stride`` it is an error."""
    with contextlib.closing(_open(path)) as conn:
        meta = _meta(conn, path)
    return meta


def _open(path: str) -> sqlite3.Connection:
    try:
        return read_only(path)
    except sqlite3.Error as exc:
        raise SourceError(f"window database {path} cannot be opened: {exc}") from exc


def _meta(conn: sqlite3.Connection, path: str) -> dict[str, int]:
    meta: dict[str, int] = {}
    for key, value in _query(conn, path, "SELECT key, value FROM metadata").fetchall():
        if not isinstance(value, int):
            raise SourceError(f"window database {path}: metadata {key!r} is {value!r}, not an integer")
        meta[str(key)] = value
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise SourceError(f"window database {path}: its metadata table lacks {', '.join(missing)}")
    return meta


def check_window_meta(path: str, meta: dict[str, int], seq_length: int, stride: int) -> None:
    """Refuse a window database made for another model sequence length or stride than the run's.

    Eden's ``window_size`` is the model's sequence length (its `--seq-length`), and the windows
    start every ``stride`` bases, so both must equal `prepare`'s ``--seq-length`` and ``--stride``.
    """
    if meta["window_size"] != seq_length or meta["stride"] != stride:
        raise OptionError(
            f"window database {path} was made with window_size {meta['window_size']} and stride "
            f"{meta['stride']}, but this run has --seq-length {seq_length} and --stride {stride}; they must be "
            f"equal (make it with `bionemo-wds precompute-windows ... --window-size {seq_length} --stride {stride}` "
            f"or prepare with --seq-length {meta['window_size']} --stride {meta['stride']})"
        )


def read_window_db(path: str, row_of: Callable[[str], int], seq_length: int, stride: int) -> WindowDb:
    """Every window of window database `path` in ``window_idx`` order, its contig mapped by `row_of`.

    `row_of` turns a contig id into the catalog row (it may add the row, or raise a `BadInputError`
    for a contig the run does not know). The metadata must match `seq_length` and `stride`
    (`check_window_meta`); a negative or repeated window number of a contig, and a window count
    that differs from the metadata's ``total_windows``, are errors naming the file.
    """
    rows, numbers = array("q"), array("q")
    with contextlib.closing(_open(path)) as conn:
        meta = _meta(conn, path)
        check_window_meta(path, meta, seq_length, stride)
        cur = _query(conn, path, "SELECT sequence_id, window_in_seq_idx FROM window_mappings ORDER BY window_idx")
        last, row = None, -1
        while batch := cur.fetchmany(FETCH_BATCH):
            for contig, number in batch:
                if contig != last:  # windows of one contig are consecutive: one lookup per contig
                    if not isinstance(contig, str):
                        raise SourceError(f"window database {path}: sequence_id {contig!r} is not text")
                    row, last = row_of(contig), contig
                if not isinstance(number, int) or number < 0:
                    raise SourceError(
                        f"window database {path}: contig {contig!r} has window_in_seq_idx {number!r}, "
                        "not a whole number >= 0"
                    )
                rows.append(row)
                numbers.append(number)
    out = WindowDb(path, meta, np.frombuffer(rows, dtype=np.int64), np.frombuffer(numbers, dtype=np.int64))
    total = meta.get("total_windows")
    if total is not None and total != len(out.rows):
        raise SourceError(
            f"window database {path} holds {len(out.rows)} windows but its metadata says total_windows {total}"
        )
    _refuse_repeats(out)
    return out


def _refuse_repeats(db: WindowDb) -> None:
    """A window (contig, number) listed twice would be two identical samples: an error naming it."""
    if len(db.rows) == 0:
        return
    keys = db.rows * (int(db.numbers.max()) + 1) + db.numbers
    unique, first = np.unique(keys, return_index=True)
    if len(unique) != len(keys):
        again = np.setdiff1d(np.arange(len(keys)), first)[0]
        raise SourceError(
            f"window database {db.path} lists window {int(db.numbers[again])} of one contig twice "
            f"(window_idx {int(again)})"
        )


def _remove_dead_temporaries(final: Path) -> None:
    """Delete the temporaries of `final` that killed runs left (``.<name>.tmp-<pid>`` of a pid that is gone)."""
    for tmp in final.parent.glob(f".{final.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # alive, owned by another user
            pass


def _window_rows(ids: Sequence[str], counts: np.ndarray, batch: int) -> Iterator[list[tuple[int, str, int]]]:
    """``(window_idx, sequence_id, window_in_seq_idx)`` rows in batches of at most `batch` windows
    (a batch may end inside a contig, so a contig of millions of windows costs no more memory)."""
    ends = np.cumsum(counts)
    first = ends - counts
    total = int(ends[-1]) if len(ends) else 0
    for lo in range(0, total, batch):
        window = np.arange(lo, min(lo + batch, total), dtype=np.int64)
        contig = np.searchsorted(ends, window, side="right")
        number = window - first[contig]
        yield list(zip(window.tolist(), [ids[c] for c in contig.tolist()], number.tolist()))


def write_window_db(
    ids: Sequence[str],
    lengths: np.ndarray,
    out: str | os.PathLike[str],
    window_size: int,
    stride: int,
    min_length: int = 0,
    batch: int = INSERT_BATCH,
) -> dict[str, int]:
    """Write the window database of contigs `ids` with `lengths` to `out`, as Eden's precompute does;
    returns its metadata.

    Contigs are sorted by id, counted by `eden_window_counts` and numbered from 0. The database is
    built under a hidden temporary name beside `out` and renamed onto it only when complete
    (`atomic_path`), so an interrupted run leaves `out` as it was; temporaries of killed runs are
    removed first.
    """
    if window_size < 1 or stride < 1 or min_length < 0:
        raise OptionError(
            f"window size and stride must be at least 1 and the minimum length at least 0, got "
            f"window size {window_size}, stride {stride}, minimum length {min_length}"
        )
    final = Path(out)
    if final.is_dir():
        raise BadInputError(f"output {final} is a directory; give the path of the database file to write")
    if not final.parent.is_dir():
        raise BadInputError(f"output {final}: directory {final.parent} does not exist")
    order = sorted(range(len(ids)), key=ids.__getitem__)
    sorted_ids = [ids[i] for i in order]
    counts = eden_window_counts(np.asarray(lengths, dtype=np.int64)[order], window_size, stride, min_length)
    meta = {
        "window_size": int(window_size),
        "stride": int(stride),
        "window_min_length_threshold": int(min_length),
        "total_windows": int(counts.sum()),
        "distinct_sequences": int((counts > 0).sum()),
    }
    _remove_dead_temporaries(final)
    with atomic_path(final) as tmp:
        conn = sqlite3.connect(tmp)
        try:
            conn.execute("PRAGMA journal_mode=OFF")  # a fresh file renamed into place when whole: no journal
            conn.execute("PRAGMA synchronous=OFF")  # atomic_path fsyncs the finished file
            conn.execute("CREATE TABLE metadata (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            conn.execute(
                "CREATE TABLE window_mappings (window_idx INTEGER PRIMARY KEY, sequence_id TEXT NOT NULL, "
                "window_in_seq_idx INTEGER NOT NULL)"
            )
            conn.executemany("INSERT INTO metadata (key, value) VALUES (?, ?)", list(meta.items()))
            for rows in _window_rows(sorted_ids, counts, batch):
                conn.executemany(
                    "INSERT INTO window_mappings (window_idx, sequence_id, window_in_seq_idx) VALUES (?, ?, ?)", rows
                )
            conn.execute("CREATE INDEX idx_sequence_id ON window_mappings(sequence_id)")
            conn.commit()
        except sqlite3.Error as exc:
            raise BadInputError(f"cannot write window database {final}: {exc}") from exc
        finally:
            conn.close()
    return meta
