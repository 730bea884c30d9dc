"""Provenance of a batch: each sample traced back to the FASTA bases it holds.

A batch carries compact ids for every sample (`keys`, `seq_id`, `start`, `rc`, `lengths`,
`dataset`: the compact batch's fields, passed through into model inputs); `batch_provenance` turns
them into `Provenance` records, with the split, group, tag and input file looked up in the source
dataset's sequence table (`format.sequence_table`, read once per dataset and kept: `TableCache`).

- Stored windows (format 4): key ``<seq_id>/<window>``; the window's bases are
  ``[start, start + lengths)`` of its source sequence.
- Windows cut at load and packed samples (format 5): each document's key is
  ``<seq_id>:<start>+<length>``, its bases exactly those; a packed row holds several documents
  (keys joined by ``;``), each with its own strand (``doc_rc``; ``rc`` is the first document's).
- A row reverse-complemented holds the reverse complement of ``seq[start:end]``: strand ``"-"``.
- Filler rows (``dataset`` -1) and a packed row's unused samples (no key) have no record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bionemo_wds.format import Manifest
from bionemo_wds.format.sequence_table import SequenceRow, SequenceRows, read_sequence_table
from bionemo_wds.storage.store import Store


@dataclass(frozen=True)
class Provenance:
    """Where one sample (one document of a packed sample) comes from: `row` of the batch, the
    dataset's root, the split, the input file, the sequence and its bases ``[start, end)`` (0-based,
    end exclusive, coordinates in the source FASTA sequence), the strand (``"-"``: the sample holds
    the reverse complement of those bases), the control tag and group of the sequence."""

    row: int
    dataset: str
    split: str
    file: str
    seq_id: str
    start: int
    end: int
    strand: str
    tag: str
    group: str


class TableCache:
    """Each dataset's sequence table, read the first time it is needed and then kept (a plain dict:
    it travels with a pickled dataset, read or not)."""

    def __init__(self) -> None:
        self.tables: dict[str, SequenceRows] = {}

    def table(self, store: Store, manifest: Manifest) -> SequenceRows:
        """The sequence table of the dataset at `store` (a `MissingSequenceTableError` when it has none)."""
        if store.root not in self.tables:
            self.tables[store.root] = read_sequence_table(store, manifest)
        return self.tables[store.root]


def parse_document_key(key: str) -> tuple[str, int, int]:
    """``<seq_id>:<start>+<length>`` -> (seq_id, start, length); a ValueError when `key` is not one."""
    seq_id, sep, span = key.rpartition(":")
    start, plus, length = span.partition("+")
    if not sep or not plus or not seq_id or not start.isdigit() or not length.isdigit():
        raise ValueError(f"{key!r} is not a document key <seq_id>:<start>+<length>")
    return seq_id, int(start), int(length)


def parse_window_key(key: str) -> tuple[str, int]:
    """``<seq_id>/<window>`` -> (seq_id, window number); a ValueError when `key` is not one."""
    seq_id, sep, number = key.rpartition("/")
    if not sep or not seq_id or not number.isdigit():
        raise ValueError(f"{key!r} is not a window key <seq_id>/<window>")
    return seq_id, int(number)


def record(row: int, root: str, table: SequenceRows, seq_id: str, start: int, length: int, rc: bool) -> Provenance:
    """The provenance of bases ``[start, start + length)`` of `seq_id`, from its table row; a
    ValueError naming the sequence and dataset when the table has no row holding `start`."""
    found: SequenceRow | None = table.locate(seq_id, start)
    if found is None:
        raise ValueError(f"{table.url} has no row of sequence {seq_id!r} holding position {start} (dataset {root})")
    return Provenance(
        row, root, found.split, found.file, seq_id, start, start + length, "-" if rc else "+", found.tag, found.group
    )


def _column(batch: dict[str, Any], name: str) -> list[Any] | None:
    """A batch field as a list (numpy arrays, tensors, lists and `SampleNames` alike), None if absent."""
    value = batch.get(name)
    if value is None:
        return None
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value)


def batch_provenance(
    batch: dict[str, Any], datasets: Sequence[tuple[Store, Manifest]], cache: TableCache
) -> list[Provenance]:
    """One `Provenance` per sample of `batch` (per document of a packed sample), in row order;
    `datasets` are the (store, manifest) of the datasets the batch's ``dataset`` field indexes."""
    keys = _column(batch, "keys")
    if keys is None:
        raise ValueError("the batch has no 'keys': provenance needs a batch as a loader yields it (keys, start, rc)")
    n = len(keys)
    source = _column(batch, "dataset") or [0] * n
    rc = _column(batch, "rc") or [False] * n
    starts = _column(batch, "start")
    lengths = _column(batch, "lengths")
    doc_rc = _column(batch, "doc_rc")
    out: list[Provenance] = []
    for i, key in enumerate(keys):
        d = int(source[i])
        if d < 0 or not key:  # filler, or a packed row left unused
            continue
        store, manifest = datasets[d]
        table = cache.table(store, manifest)
        if manifest.params.layout == "sequences":
            docs = str(key).split(";")
            if doc_rc is None and len(docs) > 1:
                raise ValueError("a packed batch without 'doc_rc': the strand of each document is unknown")
            for j, doc in enumerate(docs):
                seq_id, start, length = parse_document_key(doc)
                strand = bool(doc_rc[i][j]) if doc_rc is not None else bool(rc[i])
                out.append(record(i, store.root, table, seq_id, start, length, strand))
        else:
            if starts is None or lengths is None:
                raise ValueError("the batch has no 'start'/'lengths': provenance of stored windows needs both")
            seq_id, _ = parse_window_key(str(key))
            out.append(record(i, store.root, table, seq_id, int(starts[i]), int(lengths[i]), bool(rc[i])))
    return out
