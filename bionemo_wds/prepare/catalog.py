"""The catalog: what every input sequence is and where its bases come from, without its bases.

A source (`prepare/sources/`: FASTA, sharded-Eden SQLite, HDF5) builds one from its index or
database; everything downstream (splits, windows, shard plan, writers) works from these arrays and
reads bases only through the source's `BaseReader`. A row is a stretch of one source sequence: the
whole sequence, or a piece of it when `--split-at-n` cuts it at runs of N (`scan.cut_rows`); a piece
keeps its sequence's id, and ``origin`` says where in the sequence it starts, so every window can be
traced back to its source position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from bionemo_wds.core.lineage import dropout_length


class BaseReader(Protocol):
    """Reads bases of a source's sequences; opened in the process that reads (a writer, a scan)."""

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        """Bases ``[start, end)`` of sequence number `seq`, as the source's bytes (no newlines),
        mapped through the `bytes.translate` `table` when one is given (the writers upper-case with
        ``--case upper`` or replace invalid bytes this way; a source that must strip bytes anyway
        does both in one pass)."""
        ...

    def close(self) -> None:
        """Release open files and connections."""
        ...


class Source(Protocol):
    """One kind of input, after its sequences were found: picklable, so pool workers get a copy."""

    #: The `--source` name (``fasta``, ``sharded-eden``, ``hdf5``).
    kind: str

    def reader(self) -> BaseReader:
        """A reader over this source's sequences (each process opens its own)."""
        ...

    def describe(self, seq: int) -> str:
        """Where sequence number `seq` lives, for messages: "sequence 'x' in FILE"."""
        ...

    def file_of(self, seq: int) -> str:
        """The input file (as the user named it) holding sequence number `seq`."""
        ...


@dataclass
class Catalog:
    """Parallel per-row arrays, the source that reads them, and what the source decided already."""

    source: Source
    names: list[str]  # per row: its sequence's id (pieces of one sequence share it)
    tags: list[str]  # per row: control tag text
    lengths: np.ndarray  # int64 per row: bases
    # None in the constructor only (then filled in): typed as arrays for every reader
    seq: np.ndarray = None  # type: ignore[assignment]  # int64 per row: the source's sequence number (default: row)
    origin: np.ndarray = None  # type: ignore[assignment]  # int64 per row: where it starts in its sequence (default 0)
    #: int64 per row: the group the split keeps together (`groups.py`); None: every sequence alone.
    groups: np.ndarray | None = None
    #: Names of the groups, indexed by `groups`.
    group_names: list[str] | None = None
    #: int8 per row: a split the source fixed (0 train, 1 val, 2 test, -1 left out), e.g. from Parquet lists.
    split: np.ndarray | None = None
    #: Per split: the windows the source fixed (Eden window DBs), as (row, window number in its sequence).
    windows: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    skipped: list[dict] = field(default_factory=list)  # sequences left out, with the reason
    #: What the source and the scan decided, for the manifest (`params.source`).
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.names)
        if self.seq is None:
            self.seq = np.arange(n, dtype=np.int64)
        if self.origin is None:
            self.origin = np.zeros(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_bases(self) -> int:
        return int(self.lengths.sum())

    def max_tag_bytes(self) -> int:
        """Bytes a window leaves for its tag: the longest tag after lineage dropout (a rank value
        shorter than ``None`` grows to it, `lineage.dropout_length`; any other tag keeps its length),
        so a tag the loader drops ranks of still fits."""
        return max((dropout_length(t) for t in set(self.tags)), default=0)

    def take(self, rows: np.ndarray) -> Catalog:
        """The catalog of `rows` only (same source), as a scan keeps the sequences it does not skip."""
        rows = np.asarray(rows, dtype=np.int64)
        pick = rows.tolist()
        return Catalog(
            self.source,
            [self.names[i] for i in pick],
            [self.tags[i] for i in pick],
            self.lengths[rows],
            self.seq[rows],
            self.origin[rows],
            None if self.groups is None else self.groups[rows],
            self.group_names,
            None if self.split is None else self.split[rows],
            None,  # fixed windows name rows; a source that fixes them never has rows dropped (`scan` refuses)
            self.skipped,
            self.notes,
        )
