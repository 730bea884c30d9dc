"""Reading a sharded-Eden contig's bases: the `Source` and `BaseReader` of `sharded_eden`.

Picklable source (paths and ids only); each process's reader opens its own read-only connection
per sample database, lazily, so nothing crosses a fork.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

from bionemo_wds.errors import SourceError
from bionemo_wds.prepare.sources.eden_windows import read_only


@dataclass
class EdenSource:
    """Sample databases and, per contig, which one holds it: picklable (no open connection)."""

    db_paths: list[str]  # per sample database
    names: list[str]  # contig id per sequence
    db_index: np.ndarray  # int64 per sequence: index into `db_paths`
    kind: str = "sharded-eden"

    def reader(self) -> EdenReader:
        return EdenReader(self)

    def describe(self, seq: int) -> str:
        return f"contig {self.names[seq]!r} in {self.file_of(seq)}"

    def file_of(self, seq: int) -> str:
        return self.db_paths[int(self.db_index[seq])]


class EdenReader:
    """`BaseReader` of an `EdenSource`: one read-only connection per sample database.

    A window is read as a range of the stored value through SQLite's incremental blob I/O
    (`Connection.blobopen`, seek, read) where that gives the same bases as ``substr``: a UTF-8
    database and ASCII text (checked on every read), Python 3.11+. ``substr`` loads the whole
    value before it cuts (a 50 Mb contig: 68 ms per window, 4.6 Mb: 4 ms against 0.7 ms), so only the
    blob path keeps memory bounded by the window. Other databases fall back to the ``substr`` query.
    """

    QUERY = "SELECT substr(nt_sequence, ?, ?) FROM sequences WHERE contig_id = ?"
    ROWID = "SELECT rowid FROM sequences WHERE contig_id = ?"

    def __init__(self, source: EdenSource) -> None:
        self.source = source
        self.db_of = source.db_index.tolist()  # a list: indexed once per window
        self.conns: dict[int, sqlite3.Connection] = {}
        self.blob_ok: dict[int, bool] = {}
        self.rowids: dict[int, int] = {}  # seq -> rowid, for the blob path

    def _conn(self, db: int) -> sqlite3.Connection:
        conn = self.conns.get(db)
        if conn is None:
            conn = self.conns[db] = connect_sample_db(self.source.db_paths[db])
            encoding = conn.execute("PRAGMA encoding").fetchone()[0]
            self.blob_ok[db] = hasattr(conn, "blobopen") and encoding == "UTF-8"
        return conn

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        if end <= start:
            return b""
        db = self.db_of[seq]
        conn = self._conn(db)
        name = self.source.names[seq]
        path = self.source.db_paths[db]
        try:
            raw = self._blob_range(conn, seq, start, end) if self.blob_ok[db] else None
            if raw is None:
                raw = self._substr(conn, name, path, start, end)
        except sqlite3.Error as exc:
            raise SourceError(f"cannot read contig {name!r} from {path}: {exc}") from exc
        if not raw.isascii():
            bad = next(i for i, b in enumerate(raw) if b >= 128)
            raise SourceError(
                f"contig {name!r} in {path} holds non-ASCII text at position {start + bad} (0-based); "
                "nt_sequence must be ASCII bases"
            )
        return raw if table is None else raw.translate(table)

    def _blob_range(self, conn: sqlite3.Connection, seq: int, start: int, end: int) -> bytes | None:
        """Bytes [start, end) of the stored value (None: not found, left to `_substr` to report)."""
        rowid = self.rowids.get(seq)
        if rowid is None:
            found = conn.execute(self.ROWID, (self.source.names[seq],)).fetchone()
            if found is None:
                return None
            rowid = self.rowids[seq] = int(found[0])
        with conn.blobopen("sequences", "nt_sequence", rowid, readonly=True) as blob:
            blob.seek(min(start, len(blob)))
            return blob.read(end - start)

    def _substr(self, conn: sqlite3.Connection, name: str, path: str, start: int, end: int) -> bytes:
        found = conn.execute(self.QUERY, (start + 1, end - start, name)).fetchone()
        if found is None or found[0] is None:
            raise SourceError(f"contig {name!r} is not in {path}")
        text = found[0]
        if isinstance(text, bytes):  # stored as a BLOB: substr counted bytes
            return text
        try:
            return text.encode("ascii")
        except UnicodeEncodeError as exc:
            raise SourceError(
                f"contig {name!r} in {path} holds non-ASCII text {text[exc.start]!r} at "
                f"position {start + exc.start} (0-based); nt_sequence must be ASCII bases"
            ) from exc

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


def connect_sample_db(path: str) -> sqlite3.Connection:
    """A read-only connection to a sample database; failure is a `BadInputError` naming it."""
    try:
        return read_only(path)
    except sqlite3.Error as exc:
        raise SourceError(f"sample database {path} cannot be opened: {exc}") from exc
