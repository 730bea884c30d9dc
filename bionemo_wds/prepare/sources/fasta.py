"""FASTA inputs: plain or gzip/bgzip, one or many files, directories of them, split gzip parts
and tar archives of FASTA files (`fasta_inputs`).

Indexing writes a samtools-compatible ``.fai`` (`fai.build_fai`, which also checks headers, line
lengths and duplicate names within a file, as samtools and pyfaidx do), in tasks per input and per
byte range of a large file (`fasta_index`). Gzip inputs (bgzip is gzip too), joined split parts
and inputs whose lines differ in width get a plain copy in the output's cache (`fasta_copies`),
because plain gzip has no random access; every index goes to that cache, so inputs in read-only
places work and nothing is written beside them.
`index_fasta` reads no base; `catalog_fasta` adds the check of every base (`prepare.scan`), which
reports a bad one with its sequence and position before any shard is written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.scan import scan
from bionemo_wds.prepare.scan_tasks import ON_INVALID
from bionemo_wds.prepare.sources.fasta_index import index_files
from bionemo_wds.prepare.sources.fasta_inputs import fasta_inputs
from bionemo_wds.prepare.tags import reads_headers, tag_all, tag_rule_problem, tagger


def read_span(
    fh, offset: int, start: int, end: int, line_bases: int, line_bytes: int, table: bytes | None = None
) -> bytes:
    """Bases [start, end) of a record with .fai layout, newlines removed (and mapped by `table`).

    Written here rather than via pyfaidx.fetch: one positioned read and one C-level pass that strips
    newlines and applies `table` together, without pyfaidx's str round-trip and per-call objects (the
    writers call it once per window; two passes cost a third of the write time on short contigs).
    """
    if end <= start:
        return b""
    first = offset + (start // line_bases) * line_bytes + start % line_bases
    last = offset + ((end - 1) // line_bases) * line_bytes + (end - 1) % line_bases + 1
    raw = os.pread(fh.fileno(), last - first, first)
    return raw.translate(table, b"\r\n")


@dataclass
class FastaSource:
    """Indexed FASTA files: the .fai layout of every sequence, so any window is one positioned read."""

    files: list[str]  # readable plain FASTA per input: the file, a tar member's archive, or a cached copy
    origins: list[str]  # the input as the user gave it (a tar member: ARCHIVE/MEMBER), for messages and the manifest
    file_index: np.ndarray  # int64 per sequence: index into `files`
    offsets: np.ndarray  # int64 per sequence: byte offset of the first base
    line_bases: np.ndarray  # int64 per sequence: bases per full line
    line_bytes: np.ndarray  # int64 per sequence: bytes per full line, newline included
    names: list[str]
    kind: str = "fasta"

    def reader(self) -> FastaReader:
        return FastaReader(self)

    def describe(self, seq: int) -> str:
        return f"sequence {self.names[seq]!r} in {self.file_of(seq)}"

    def file_of(self, seq: int) -> str:
        return self.origins[int(self.file_index[seq])]


class FastaReader:
    """`BaseReader` of a `FastaSource`: one open handle per file (the members of a tar archive
    share its handle), positioned reads."""

    def __init__(self, source: FastaSource) -> None:
        self.paths = list(dict.fromkeys(source.files))
        slot = {path: i for i, path in enumerate(self.paths)}
        handle_of = [slot[path] for path in source.files]
        self.handles: dict[int, Any] = {}
        # plain lists: indexing them is several times faster than numpy scalars, per window
        self.layout = list(
            zip(
                [handle_of[f] for f in source.file_index.tolist()],
                source.offsets.tolist(),
                source.line_bases.tolist(),
                source.line_bytes.tolist(),
            )
        )

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        f, offset, line_bases, line_bytes = self.layout[seq]
        fh = self.handles.get(f)
        if fh is None:
            fh = self.handles[f] = open(self.paths[f], "rb")
        return read_span(fh, offset, start, end, line_bases, line_bytes, table)

    def close(self) -> None:
        for fh in self.handles.values():
            fh.close()
        self.handles.clear()


def index_fasta(
    inputs: Sequence[str | os.PathLike],
    cache_dir: Path,
    tag_mode: str = "none",
    progress: bool = True,
    tag_map: Mapping[str, str] | None = None,
    place: TaskPlace | None = None,
) -> Catalog:
    """Index every input sequence (names, lengths, layout, tags under rule `tag_mode` and its
    `tag_map`, `prepare.tags`); no base is read (`scan` checks them). The files are indexed in tasks
    (`fasta_index.index_files`: per file, per byte range of a large one) run at `place` (default:
    this process); the tables are joined in input order."""
    problem = tag_rule_problem(tag_mode)
    if problem is not None:
        raise OptionError(f"--tags {problem}, got {tag_mode!r}")
    headers = reads_headers(tag_mode)
    tag_of = None if tag_mode == "none" else tagger(tag_mode, tag_map)  # a tsv: table is read once
    files = fasta_inputs(inputs)
    cache_dir.mkdir(parents=True, exist_ok=True)
    indexed = index_files(files, cache_dir, headers, place or TaskPlace(progress=progress))
    locals_: list[str] = []
    names: list[str] = []
    tags: list[str] = []
    cols: list[list[int]] = [[], [], [], [], []]  # file, length, offset, line bases, line bytes
    seen: dict[str, str] = {}
    for (number, unit), (local, table) in zip(enumerate(files), indexed):
        origin = unit.origin
        locals_.append(local)
        if not len(table):
            raise SourceError(f"input {origin} holds no sequences")
        if not seen.keys().isdisjoint(table.names):  # whole lists at a time: millions of contigs
            name = next(n for n in table.names if n in seen)
            raise SourceError(f"sequence name {name!r} appears in both {seen[name]} and {origin}; names must be unique")
        seen.update(dict.fromkeys(table.names, origin))
        if 0 in table.lengths:
            name = table.names[table.lengths.index(0)]
            raise SourceError(f"sequence {name!r} in {origin} is empty (length 0)")
        if tag_of is None:
            tags.extend([""] * len(table))
        else:
            texts = table.headers if headers else table.names
            assert texts is not None
            tags.extend(tag_all(table.names, texts, tag_of))
        names.extend(table.names)
        cols[0].extend([number] * len(table))
        for col, values in zip(cols[1:], (table.lengths, table.offsets, table.line_bases, table.line_bytes)):
            col.extend(values)
    file_index, lengths, offsets, line_bases, line_bytes = (np.asarray(c, dtype=np.int64) for c in cols)
    source = FastaSource(locals_, [unit.origin for unit in files], file_index, offsets, line_bases, line_bytes, names)
    return Catalog(source, names, tags, lengths)


def catalog_fasta(
    inputs: Sequence[str | os.PathLike],
    cache_dir: Path,
    tag_mode: str = "none",
    on_invalid: str = "error",
    progress: bool = True,
) -> Catalog:
    """Index and check every input sequence; refuse bad input before anything is written."""
    if on_invalid not in ON_INVALID:
        raise OptionError(f"--on-invalid must be one of {', '.join(ON_INVALID)}, got {on_invalid!r}")
    return scan(index_fasta(inputs, cache_dir, tag_mode, progress), on_invalid, None, progress)
