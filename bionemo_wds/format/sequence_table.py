"""The sequence table of a prepared dataset: every sequence it holds, in one file (``sequences.tsv``).

"What is in the training set" is this file: one line per catalog row (a FASTA record, or a piece of
one cut by ``--split-at-n``), in input order, after a header line, tab-separated:

    split  seq_id  start  length  group  tag  file

``split`` is ``train``, ``val``, ``test`` or ``none`` (a row in no split: left out of every
``--split-list``; sequences `prepare` skipped are in the manifest's ``skipped`` instead); ``start``
is where the row begins in its source sequence (0 unless ``--split-at-n`` cut it) and ``length`` its
bases; ``group`` the group the split kept together (the sequence id itself without ``--group-by``),
``tag`` its control tag, ``file`` the input file holding it, as the user named it.

A field holding a backslash, tab, newline or carriage return is written with backslash escapes
(``\\\\``, ``\\t``, ``\\n``, ``\\r``; `escape`), as PostgreSQL's text format does, so every line
has exactly seven fields; `read_sequence_table` undoes them. Sequence ids never need it (a FASTA id
ends at whitespace); tags and paths may.

The manifest lists it at its top level (`Manifest.sequence_table`; both layouts; no format version
change: an older reader keeps the key as an unknown one):
``"sequence_table": {"path": "sequences.tsv", "rows": n, "bytes": ..., "sha256": ...}``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from bionemo_wds.errors import ManifestError
from bionemo_wds.format.manifest_types import SEQUENCE_TABLE_KEY, Manifest
from bionemo_wds.storage.atomic import HashingWriter
from bionemo_wds.storage.store import Store

#: The file, at the dataset root.
SEQUENCE_TABLE_NAME = "sequences.tsv"
#: What that entry holds.
SEQUENCE_TABLE_ENTRY_KEYS = ("path", "rows", "bytes", "sha256")
#: The columns, in order (the header line).
COLUMNS = ("split", "seq_id", "start", "length", "group", "tag", "file")
#: The split of a row in no split.
NO_SPLIT = "none"

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


class SequenceRow(NamedTuple):
    """One line of the table."""

    split: str
    seq_id: str
    start: int
    length: int
    group: str
    tag: str
    file: str


def escape(text: str) -> str:
    """`text` with backslash, tab, newline and carriage return written as ``\\\\ \\t \\n \\r``."""
    if not any(c in text for c in _ESCAPES):
        return text
    return "".join(_ESCAPES.get(c, c) for c in text)


def unescape(text: str) -> str:
    """The inverse of `escape`; a ValueError for a backslash not followed by one of ``\\ t n r``."""
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt not in _UNESCAPES:
                raise ValueError(f"a backslash followed by {nxt!r}")
            out.append(_UNESCAPES[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _line(row: SequenceRow) -> str:
    cells = (row.split, row.seq_id, str(int(row.start)), str(int(row.length)), row.group, row.tag, row.file)
    return "\t".join(map(escape, cells)) + "\n"


def write_sequence_table(store: Store, rows: Iterable[SequenceRow]) -> dict[str, Any]:
    """Write the table of `rows` (in catalog order) to ``sequences.tsv`` at `store`'s root,
    atomically (a local file or one object); returns the manifest's ``sequence_table`` entry."""
    n = 0
    with store.write(SEQUENCE_TABLE_NAME) as fh:
        out = HashingWriter(fh)
        out.write(("\t".join(COLUMNS) + "\n").encode())
        chunk: list[str] = []
        for row in rows:
            chunk.append(_line(row))
            n += 1
            if len(chunk) >= 4096:
                out.write("".join(chunk).encode())
                chunk = []
        out.write("".join(chunk).encode())
    return {"path": SEQUENCE_TABLE_NAME, "rows": n, "bytes": out.size, "sha256": out.sha.hexdigest()}


def table_entry(manifest: Manifest) -> dict[str, Any] | None:
    """The manifest's ``sequence_table`` entry, or None when it has none (a dataset prepared before
    the table existed)."""
    entry = manifest.sequence_table
    return entry if isinstance(entry, dict) else None


def missing_table_message(root: str) -> str:
    """What to say when a dataset has no sequence table: what is missing and how to get it."""
    return (
        f"{root} has no sequence table ({SEQUENCE_TABLE_NAME}, listed in its manifest as "
        f"{SEQUENCE_TABLE_KEY!r}): it was prepared before bionemo-wds wrote one. Run the same "
        "`bionemo-wds prepare` command again: it adds the table without rewriting the shards"
    )


class MissingSequenceTableError(ManifestError):
    """A dataset without a sequence table (prepared before it existed): `missing_table_message`."""


@dataclass
class SequenceRows:
    """A dataset's sequence table, read: its rows in catalog order, and where each sequence id's rows are."""

    url: str
    rows: list[SequenceRow]
    by_id: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.by_id:
            for i, row in enumerate(self.rows):
                self.by_id.setdefault(row.seq_id, []).append(i)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[SequenceRow]:
        return iter(self.rows)

    def names_of(self, split: str) -> list[str]:
        """The names of `split`'s sequences, in input order, each once (a sequence cut by
        --split-at-n has several rows)."""
        return list(dict.fromkeys(row.seq_id for row in self.rows if row.split == split))

    def of_sequence(self, seq_id: str) -> list[SequenceRow]:
        """The rows of sequence `seq_id` (several when --split-at-n cut it), in order; empty if none."""
        return [self.rows[i] for i in self.by_id.get(seq_id, ())]

    def locate(self, seq_id: str, position: int) -> SequenceRow | None:
        """The row of `seq_id` whose bases ``[start, start + length)`` hold `position` (a coordinate
        in the source sequence), or None."""
        for i in self.by_id.get(seq_id, ()):
            row = self.rows[i]
            if row.start <= position < row.start + row.length:
                return row
        return None


def read_sequence_table(
    store: Store | str | os.PathLike[str], manifest: Manifest, problems: list[str] | None = None
) -> SequenceRows:
    """The dataset's sequence table, checked against the manifest's entry: a file missing, of
    another size, sha256 or row count, or not of seven fields a line, is a `ManifestError` naming
    it; no entry (a dataset prepared before the table existed) a `MissingSequenceTableError`
    saying how to add it. `problems` (what `verify` passes) collects those instead of raising."""
    store = store if isinstance(store, Store) else Store(store)
    entry = table_entry(manifest)
    if entry is None:
        raise MissingSequenceTableError(missing_table_message(store.root))
    if any(key not in entry for key in SEQUENCE_TABLE_ENTRY_KEYS):
        raise ManifestError(
            f"{store.url('manifest.json')} is damaged: its {SEQUENCE_TABLE_KEY} entry lacks one of "
            f"{', '.join(SEQUENCE_TABLE_ENTRY_KEYS)} (prepare the dataset again)"
        )
    rel = str(entry["path"])
    url = store.url(rel)
    found: list[str] = []
    try:
        data = store.uncounted().read_bytes(rel) if store.remote else store.read_bytes(rel)
    except FileNotFoundError:
        raise ManifestError(
            f"{url} is missing: the manifest lists it as the dataset's sequence table (prepare the dataset again)"
        ) from None
    if len(data) != int(entry["bytes"]):
        found.append(f"{url}: {len(data)} bytes, the manifest lists {entry['bytes']} (truncated or replaced)")
    sha = hashlib.sha256(data).hexdigest()
    if sha != entry["sha256"]:
        found.append(f"{url}: sha256 {sha[:12]}... differs from the manifest's {str(entry['sha256'])[:12]}...")
    rows = _parse(data, url, found)
    if rows is not None and len(rows) != int(entry["rows"]):
        found.append(f"{url}: holds {len(rows)} rows, the manifest lists {entry['rows']}")
    if found and problems is None:
        raise ManifestError(f"{found[0]}: the sequence table disagrees with the manifest (prepare the dataset again)")
    if problems is not None:
        problems.extend(found)
    return SequenceRows(url, rows or [])


def split_names(store: Store | str | os.PathLike[str], manifest: Manifest, split: str) -> list[str]:
    """The names of `split`'s sequences, in input order, each once, for any format version: from the
    sequence table (the one place version 6 keeps them); a dataset prepared before the table existed
    (versions 3-5) from its manifest's ``seq_ids``. Neither: `MissingSequenceTableError`."""
    info = manifest.splits[split]
    if table_entry(manifest) is None and info.seq_ids is not None:
        return list(info.seq_ids)
    return read_sequence_table(store, manifest).names_of(split)


def _parse(data: bytes, url: str, found: list[str]) -> list[SequenceRow] | None:
    """The rows of the file's bytes; None (and the reason in `found`) when it is not such a table."""
    try:
        lines = data.decode().split("\n")
    except UnicodeDecodeError as exc:
        found.append(f"{url}: not UTF-8 text ({exc})")
        return None
    if lines[0] != "\t".join(COLUMNS):
        found.append(f"{url}: its header line is not {' '.join(COLUMNS)!r}")
        return None
    if lines[-1] != "":
        found.append(f"{url}: its last line has no newline (truncated)")
        return None
    rows = []
    for number, line in enumerate(lines[1:-1], start=2):
        cells = line.split("\t")
        try:
            if len(cells) != len(COLUMNS):
                raise ValueError(f"{len(cells)} fields, not {len(COLUMNS)}")
            split, seq_id, start, length, group, tag, file = map(unescape, cells)
            rows.append(SequenceRow(split, seq_id, int(start), int(length), group, tag, file))
        except ValueError as exc:
            found.append(f"{url}: line {number} is not a row of the table ({exc})")
            return None
    return rows


def table_problems(table: SequenceRows, manifest: Manifest) -> list[str]:
    """Where the table disagrees with the manifest's splits, each naming the file: per split its
    bases (``n_bases``), sequences (``n_sequences``, distinct ids) and, in the sequence layout, rows
    (the sequence index's ``sequences``); splits the table has and the manifest lacks, or the reverse;
    rows in no split against ``unassigned_sequences``."""
    bases: dict[str, int] = {}
    rows: dict[str, int] = {}
    ids: dict[str, set[str]] = {}
    for row in table.rows:
        bases[row.split] = bases.get(row.split, 0) + row.length
        rows[row.split] = rows.get(row.split, 0) + 1
        ids.setdefault(row.split, set()).add(row.seq_id)
    out = []
    for split, info in manifest.splits.items():
        if split not in rows:
            out.append(f"{table.url}: has no row of the {split} split the manifest lists")
            continue
        if info.n_bases is not None and bases[split] != int(info.n_bases):
            out.append(f"{table.url}: its {split} rows hold {bases[split]} bases, the manifest's split {info.n_bases}")
        if info.n_sequences is not None and len(ids[split]) != int(info.n_sequences):
            out.append(
                f"{table.url}: its {split} rows name {len(ids[split])} sequences, "
                f"the manifest's split {info.n_sequences}"
            )
        if info.seq_ids is not None and table.names_of(split) != list(info.seq_ids):  # versions 3-5 name them twice
            out.append(f"{table.url}: its {split} rows name other sequences than the manifest's seq_ids")
        index = info.sequence_index
        if index is not None and rows[split] != int(index.sequences):
            out.append(
                f"{table.url}: has {rows[split]} {split} rows, the split's sequence index {index.sequences} sequences"
            )
    for split in rows:
        if split != NO_SPLIT and split not in manifest.splits:
            out.append(f"{table.url}: has rows of a {split!r} split the manifest does not list")
    unassigned = manifest.unassigned_sequences
    if unassigned is not None and len(ids.get(NO_SPLIT, ())) != int(unassigned):
        out.append(
            f"{table.url}: names {len(ids.get(NO_SPLIT, ()))} sequences in no split, the manifest {unassigned} "
            "(unassigned_sequences)"
        )
    return out
