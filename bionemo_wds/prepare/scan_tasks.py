"""The check of every base, cut into tasks: what one task reads and what it reports.

A task is a stretch of about `TASK_BASES` consecutive bases of the catalog, in row order: whole
rows, and pieces of the rows that cross its ends (a chromosome longer than a task is read by
several, each its own byte range). `check_task` reads its stretch through the source's
`BaseReader` in chunks of at most ``chunk`` bases, so memory is bounded by a chunk, and reports
only the rows where it found something (`Finding`: the first unknown byte, how many, runs of N);
a clean row costs nothing in the result. `scan.scan` runs the tasks (`executors.tasks.run_tasks`:
here, in a process pool or on Dask) and merges their findings in row order.

The common case (every base valid, no long N run) costs two C-level byte operations per chunk
(`bytes.translate` with a delete set, a substring test); numpy runs only on chunks that have
something to find. Short rows (metagenomic contigs) are read and checked together, up to a chunk
at a time, and checked one by one only when their chunk holds a bad byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bionemo_wds.core.tokenizer import UPPERCASE_TABLE, VALID_BASE, first_invalid, shown_character
from bionemo_wds.errors import SourceError
from bionemo_wds.prepare.catalog import BaseReader, Catalog, Source

#: What a task does with a byte that is no IUPAC code (``--on-invalid``): report it as an error,
#: skip its sequence, or replace it with N.
ON_INVALID = ("error", "skip", "replace-N")

#: Bases per scan task.
TASK_BASES = 256_000_000
#: Every IUPAC byte of either case: `bytes.translate(None, VALID)` leaves only the invalid ones.
VALID = bytes(b for b in range(256) if VALID_BASE[b])
_N = ord("N")


def n_runs(upper: bytes, k: int, offset: int = 0) -> list[tuple[int, int]]:
    """Runs of ``N`` in upper-cased bases that are at least `k` long or touch either end of `upper`
    (a run cut by a chunk boundary may continue in the next chunk), as absolute ``(start, end)``."""
    if b"N" * min(k, len(upper)) not in upper and upper[:1] != b"N" and upper[-1:] != b"N":
        return []
    is_n = np.frombuffer(upper, dtype=np.uint8) == _N
    edges = np.diff(np.concatenate(([False], is_n, [False])).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    keep = (ends - starts >= k) | (starts == 0) | (ends == len(upper))
    return [(offset + int(s), offset + int(e)) for s, e in zip(starts[keep], ends[keep])]


@dataclass(frozen=True)
class ScanContext:
    """What every task shares: the source, the rules, the read size. Sent once to each process."""

    source: Source
    on_invalid: str  # error, skip or replace-N
    split_at_n: int | None
    chunk: int  # bases per read


@dataclass(frozen=True)
class ScanTask:
    """Spans of catalog rows, in row order: bases ``[starts[i], ends[i])`` of row ``rows[i]``
    (source sequence ``seqs[i]``)."""

    rows: np.ndarray
    seqs: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @property
    def bases(self) -> int:
        return int((self.ends - self.starts).sum())


@dataclass
class Finding:
    """What a span (then a whole row, merged) holds: the first unknown byte (`bad`, -1: none) and
    how it is shown, the unknown bytes counted (all of them only with replace-N), runs of N."""

    bad: int = -1
    char: str = ""
    n_bad: int = 0
    runs: list[tuple[int, int]] = field(default_factory=list)

    def then(self, later: Finding) -> Finding:
        """This finding followed by that of a later span of the same row."""
        if self.bad < 0:
            self.bad, self.char = later.bad, later.char
        self.n_bad += later.n_bad
        self.runs.extend(later.runs)
        return self


def scan_tasks(catalog: Catalog, task_bases: int | None = None) -> list[ScanTask]:
    """The catalog's bases in tasks of `task_bases` (default `TASK_BASES`): task t covers bases
    ``[t*B, (t+1)*B)`` of the rows laid end to end."""
    size = task_bases or TASK_BASES
    ends = np.cumsum(catalog.lengths)
    starts = ends - catalog.lengths
    total = int(ends[-1]) if len(ends) else 0
    tasks = []
    for lo in range(0, total, size):
        hi = min(lo + size, total)
        first, last = int(np.searchsorted(ends, lo, side="right")), int(np.searchsorted(starts, hi, side="left"))
        rows = np.arange(first, last, dtype=np.int64)
        base = starts[first:last]
        tasks.append(
            ScanTask(
                rows,
                catalog.seq[first:last],
                np.maximum(lo - base, 0),
                np.minimum(hi - base, catalog.lengths[first:last]),
            )
        )
    return tasks


def check_task(context: ScanContext, task: ScanTask) -> dict[int, Finding]:
    """The rows of `task` where its spans hold something, with what (in row order). With
    ``error`` it stops at the first bad byte: the merge raises there."""
    reader = context.source.reader()
    found: dict[int, Finding] = {}
    rows, seqs = task.rows.tolist(), task.seqs.tolist()
    starts, ends = task.starts.tolist(), task.ends.tolist()
    chunk = context.chunk
    try:
        i, n = 0, len(rows)
        while i < n:
            if context.split_at_n is not None or ends[i] - starts[i] > chunk:
                finding = check_span(context, reader, seqs[i], starts[i], ends[i])
                if finding is not None:
                    found[rows[i]] = finding
                    if context.on_invalid == "error" and finding.bad >= 0:
                        break
                i += 1
                continue
            # short spans: one validity check for up to a chunk of them; only a batch holding a bad
            # byte is checked again span by span
            end, total, raws = i, 0, []
            while end < n and (end == i or total + ends[end] - starts[end] <= chunk):
                raws.append(read(context, reader, seqs[end], starts[end], ends[end]))
                total += ends[end] - starts[end]
                end += 1
            if b"".join(raws).translate(None, VALID):
                for r in range(i, end):
                    finding = check_span(context, reader, seqs[r], starts[r], ends[r])
                    if finding is not None:
                        found[rows[r]] = finding
                        if context.on_invalid == "error" and finding.bad >= 0:
                            return found
            i = end
    finally:
        reader.close()
    return found


def read(context: ScanContext, reader: BaseReader, seq: int, lo: int, hi: int) -> bytes:
    """Bases ``[lo, hi)`` of a sequence; a short read means the source's index is wrong."""
    raw = reader.read(seq, lo, hi)
    if len(raw) != hi - lo:
        raise SourceError(f"{context.source.describe(seq)} is shorter than its index says")
    return raw


def check_span(context: ScanContext, reader: BaseReader, seq: int, lo: int, hi: int) -> Finding | None:
    """What bases ``[lo, hi)`` of a sequence hold (None: nothing), read a chunk at a time; without
    replace-N it stops at the first chunk with an unknown byte (the row is refused or skipped)."""
    finding: Finding | None = None
    for at in range(lo, hi, context.chunk):
        raw = read(context, reader, seq, at, min(at + context.chunk, hi))
        invalid = raw.translate(None, VALID)
        if invalid:
            finding = finding or Finding()
            finding.n_bad += len(invalid)
            if finding.bad < 0:
                finding.bad = at + first_invalid(raw)
                finding.char = shown_character(raw, finding.bad - at)
            if context.on_invalid != "replace-N":
                break  # nothing more to learn from this sequence
        if context.split_at_n is not None:  # a replaced byte is no N of the source: it never joins a run
            runs = n_runs(raw.translate(UPPERCASE_TABLE), context.split_at_n, at)
            if runs:
                finding = finding or Finding()
                finding.runs.extend(runs)
    return finding
