"""BED intervals over a reference as input: ``prepare --source bed INTERVALS.bed --reference hg38.fa``.

HyenaDNA and Caduceus train on hg38 intervals listed in a BED file (Basenji's
``sequences_human.bed``: ``chrom start end split``, tab-separated, no header). Each interval
(0-based, half-open, as BED is) becomes one catalog sequence whose bases are read from the
reference (`fasta.index_fasta`: any FASTA input, gzip, split parts or tar members included),
named ``chrom:start-end``; its control tag is its chromosome's under ``--tags`` (the reference's
headers). The BED files are the run's inputs (files, ``.bed.gz``, or directories of them).

The 4th column is a split when the file's first interval has ``train``, ``val``/``valid``/
``validation`` or ``test`` there (`splits.SPLIT_WORDS`, any case): then every interval of the file
must have one, and the splits are fixed (as split lists fix them; ``--split`` ratios, ``--split-list``
and ``--group-by`` would decide it twice and are refused). Without one (BED3, or a 4th column of
names) the intervals are split as any sequences are (stratified by length, ``--split-list`` of
interval ids, ``--group-by``); all inputs must agree on having the column. ``--split-from-names`` is
refused: the split belongs in the 4th column.

Bad input is one line naming file and line: a malformed line (fewer than three columns, a start or
end that is not a whole number), a start not below its end, a chromosome the reference lacks, an
interval past its chromosome's end, the same interval twice. ``#``, ``track`` and ``browser``
lines and blank lines are skipped.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.prepare.catalog import BaseReader, Catalog, Source
from bionemo_wds.prepare.splits import DEFAULT_RATIOS, SPLIT_WORDS
from bionemo_wds.prepare.tags import note_untagged

if TYPE_CHECKING:
    from bionemo_wds.prepare.executors.tasks import TaskPlace
    from bionemo_wds.prepare.options import PrepareOptions

BED_SUFFIXES = (".bed", ".bed.gz")
#: Lines that are no interval.
SKIPPED_PREFIXES = ("#", "track", "browser")


def is_bed_name(path: Path) -> bool:
    return path.name.lower().endswith(BED_SUFFIXES)


def bed_files(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """The BED files of `inputs` (directories expanded: their ``.bed``/``.bed.gz`` files, sorted)."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and is_bed_name(p))
            if not inside:
                raise SourceError(f"directory {path} holds no BED files ({', '.join(BED_SUFFIXES)})")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise SourceError(f"input {path} does not exist")
    if not found:
        raise OptionError("no input BED file given")
    return found


def reference_of(opts: PrepareOptions) -> str:
    """``--reference``, which ``--source bed`` needs."""
    if not opts.reference:
        raise OptionError("--source bed needs --reference FASTA: the genome the intervals are cut from")
    return opts.reference


def bed_input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """The BED files and the reference's files (for the request's fingerprint)."""
    from bionemo_wds.prepare.sources.fasta_inputs import find_fasta_files

    if opts.split_from_names:  # the reference is an input file too, and its name holds no split
        raise OptionError(
            "--split-from-names does not apply to --source bed: give each interval's split in the BED's 4th column"
        )
    return [*bed_files(inputs), *find_fasta_files([reference_of(opts)])]


@dataclass
class Intervals:
    """The intervals of BED files, in file and line order."""

    chroms: list[str]
    starts: list[int]
    ends: list[int]
    splits: list[int] | None  # split code per interval, when the files have a split column
    files: list[str]
    file_index: list[int]
    lines: list[int]


def read_bed(files: Sequence[Path]) -> Intervals:
    """Every interval of `files`; a malformed line, or files that disagree on the split column, refused."""
    out = Intervals([], [], [], [], [str(f) for f in files], [], [])
    with_split: dict[bool, Path] = {}
    for number, path in enumerate(files):
        has_split = None
        with open(path, "rb") as head:
            opener: Any = gzip.open if head.read(2) == b"\x1f\x8b" else open
        try:
            with opener(path, "rt", encoding="utf-8") as fh:
                for line_no, line in enumerate(fh, 1):
                    if not line.strip() or line.startswith(SKIPPED_PREFIXES):
                        continue
                    cols = line.split()
                    where = f"{path} line {line_no}"
                    if len(cols) < 3:
                        raise SourceError(f"{where}: a BED line needs chrom, start and end, got {line.strip()!r}")
                    try:
                        start, end = int(cols[1]), int(cols[2])
                    except ValueError:
                        raise SourceError(
                            f"{where}: start and end must be whole numbers, got {cols[1]!r} and {cols[2]!r}"
                        ) from None
                    if start < 0 or start >= end:
                        raise SourceError(f"{where}: start {start} must be 0 or more and below end {end}")
                    if has_split is None:
                        has_split = len(cols) > 3 and cols[3].lower() in SPLIT_WORDS
                        with_split.setdefault(has_split, path)
                    if has_split:
                        word = cols[3].lower() if len(cols) > 3 else ""
                        if word not in SPLIT_WORDS:
                            raise SourceError(
                                f"{where}: the split column (4th) holds {cols[3] if len(cols) > 3 else 'nothing'!r}, "
                                "not train, val, valid, validation or test, as the file's first interval does"
                            )
                        out.splits.append(SPLIT_WORDS[word])  # type: ignore[union-attr]
                    out.chroms.append(cols[0])
                    out.starts.append(start)
                    out.ends.append(end)
                    out.file_index.append(number)
                    out.lines.append(line_no)
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise SourceError(f"input {path} is not a readable BED file: {exc}") from exc
        if has_split is None:
            raise SourceError(f"input {path} holds no intervals")
    if len(with_split) > 1:
        raise SourceError(
            f"{with_split[True]} has a split column (4th) and {with_split[False]} has none: give BED files "
            "that all have one, or none"
        )
    if not with_split.get(True):
        out.splits = None
    return out


@dataclass
class BedSource:
    """Intervals of a reference: interval i is bases ``[starts[i], starts[i] + length)`` of the
    reference's sequence ``ref_seq[i]``."""

    reference: Source
    ref_seq: np.ndarray  # int64 per interval
    starts: np.ndarray  # int64 per interval
    names: list[str]
    files: list[str]  # the BED files
    file_index: np.ndarray  # int64 per interval: index into `files`
    lines: np.ndarray  # int64 per interval: its line in its file
    kind: str = "bed"

    def reader(self) -> BedReader:
        return BedReader(self)

    def describe(self, seq: int) -> str:
        return f"interval {self.names[seq]} ({self.file_of(seq)} line {int(self.lines[seq])})"

    def file_of(self, seq: int) -> str:
        return self.files[int(self.file_index[seq])]


class BedReader:
    """`BaseReader` of a `BedSource`: the reference's reader, shifted to each interval."""

    def __init__(self, source: BedSource) -> None:
        self.inner: BaseReader = source.reference.reader()
        self.ref_seq, self.starts = source.ref_seq.tolist(), source.starts.tolist()

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        at = self.starts[seq]
        return self.inner.read(self.ref_seq[seq], at + start, at + end, table)

    def close(self) -> None:
        self.inner.close()


def check_split_column(opts: PrepareOptions) -> None:
    """Refuse the options that would decide the split a BED split column fixes."""
    given = [
        flag
        for flag, value in (
            ("--split-list", opts.split_lists),
            ("--group-by", opts.group_by),
            ("--split", tuple(float(r) for r in opts.split) != DEFAULT_RATIOS),
        )
        if value
    ]
    if given:
        raise OptionError(
            f"the BED split column (4th) and {' and '.join(given)} both decide the split; leave "
            f"{' and '.join(given)} out, or give BED files without a split column"
        )


def catalog_bed(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path, place: TaskPlace) -> Catalog:
    """The catalog of the intervals of `inputs` over ``--reference`` (indexed into `cache_dir`)."""
    from bionemo_wds.prepare.sources.fasta import index_fasta

    files = bed_files(inputs)
    intervals = read_bed(files)
    if intervals.splits is not None:
        check_split_column(opts)
    ref = index_fasta([reference_of(opts)], cache_dir, opts.tags, opts.progress, opts.tag_map, place)
    number = {name: i for i, name in enumerate(ref.names)}
    ref_seq = np.empty(len(intervals.chroms), dtype=np.int64)
    names: list[str] = []
    first: dict[str, int] = {}
    for i, (chrom, start, end) in enumerate(zip(intervals.chroms, intervals.starts, intervals.ends)):
        where = f"{intervals.files[intervals.file_index[i]]} line {intervals.lines[i]}"
        seq = number.get(chrom)
        if seq is None:
            raise SourceError(f"{where}: chromosome {chrom!r} is not in the reference {opts.reference}")
        length = int(ref.lengths[seq])
        if end > length:
            raise SourceError(f"{where}: interval {chrom}:{start}-{end} ends past {chrom}'s end ({length} bases)")
        name = f"{chrom}:{start}-{end}"
        if name in first:
            j = first[name]
            raise SourceError(
                f"{where}: interval {name} is given twice (also {intervals.files[intervals.file_index[j]]} "
                f"line {intervals.lines[j]}); each interval is one sequence"
            )
        first[name] = i
        ref_seq[i] = seq
        names.append(name)
    starts = np.asarray(intervals.starts, dtype=np.int64)
    lengths = np.asarray(intervals.ends, dtype=np.int64) - starts
    source = BedSource(
        ref.source,
        ref_seq,
        starts,
        names,
        intervals.files,
        np.asarray(intervals.file_index, dtype=np.int64),
        np.asarray(intervals.lines, dtype=np.int64),
    )
    split = None if intervals.splits is None else np.asarray(intervals.splits, dtype=np.int8)
    tags = [ref.tags[s] for s in ref_seq.tolist()]
    notes = {"reference": str(opts.reference), "intervals": len(names), "split_column": split is not None}
    catalog = Catalog(source, names, tags, lengths, split=split, notes=notes)
    return note_untagged(catalog, opts.tags, opts.strict_tags)
