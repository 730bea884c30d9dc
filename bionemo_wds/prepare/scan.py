"""One pass over every base of a catalog before anything is written: refuse (or skip) unknown
characters, and cut sequences at long runs of N when asked (`--split-at-n K`).

Source-agnostic: bases come through the source's `BaseReader`. The pass is cut into tasks of about
`scan_tasks.TASK_BASES` bases (`scan_tasks.check_task`), run where the shard writers run
(`executors.tasks.run_tasks`: this process, a process pool of ``--workers``, or the Dask cluster),
each reporting only the rows where it found something; `scan` merges those findings in row order,
so the catalog it returns (and every split, plan and shard byte after it) is the same for any
number of workers and either executor, and the calling process holds no bases. Per-row Python
work in the merge is limited to the rows with findings, because metagenomic catalogs have
millions of short contigs.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.executors.tasks import TaskPlace, run_tasks
from bionemo_wds.prepare.scan_tasks import ON_INVALID, Finding, ScanContext, check_task, n_runs, scan_tasks

__all__ = ["SCAN_CHUNK", "merge_runs", "n_runs", "pieces", "scan"]

#: Bases per read while scanning (4 MiB).
SCAN_CHUNK = 1 << 22


def merge_runs(runs: list[tuple[int, int]], k: int) -> list[tuple[int, int]]:
    """Join runs that touch (the two halves of a run cut by a chunk boundary); keep those >= `k`."""
    merged: list[tuple[int, int]] = []
    for start, end in runs:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return [(s, e) for s, e in merged if e - s >= k]


def pieces(length: int, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of ``[0, length)`` between `runs` (sorted, disjoint), as ``(start, end)``; none empty."""
    out, at = [], 0
    for start, end in runs:
        if start > at:
            out.append((at, start))
        at = end
    if at < length:
        out.append((at, length))
    return out


def scan(
    catalog: Catalog,
    on_invalid: str = "error",
    split_at_n: int | None = None,
    progress: bool = True,
    place: TaskPlace | None = None,
) -> Catalog:
    """Check every base of `catalog` and, with `split_at_n`, cut its rows at runs of at least that
    many N (either case); returns the catalog of what remains (rows of skipped sequences removed,
    recorded in ``skipped``). `catalog` must hold whole sequences (origin 0), as sources build it.
    With ``replace-N`` the bases the writers will replace are counted: ``notes["replaced"]`` holds
    their total, the sequences holding them and the count per input file (for the manifest). The
    tasks run at `place` (default: this process)."""
    if on_invalid not in ON_INVALID:
        raise OptionError(f"--on-invalid must be one of {', '.join(ON_INVALID)}, got {on_invalid!r}")
    if split_at_n is not None and catalog.windows is not None:
        raise OptionError("--split-at-n cannot be combined with --window-db: the window databases fix the windows")
    place = place or TaskPlace(progress=progress)
    context = ScanContext(catalog.source, on_invalid, split_at_n, SCAN_CHUNK)
    tasks = scan_tasks(catalog)
    found: dict[int, Finding] = {}
    for findings in run_tasks(check_task, context, tasks, place, "check", [t.bases for t in tasks]):
        for row, finding in findings.items():
            if on_invalid == "error" and finding.bad >= 0:  # the first bad byte in row order
                raise SourceError(f"{_bad_byte(catalog, row, finding)}; use --on-invalid skip or replace-N to proceed")
            found[row] = found[row].then(finding) if row in found else finding
    kept = _kept(catalog, found, on_invalid, split_at_n)
    if catalog.windows is not None:
        if len(kept) != len(catalog):
            raise OptionError("--on-invalid skip dropped sequences that the --window-db windows name")
        kept.windows = catalog.windows
    if len(kept) == 0:
        raise SourceError("no usable sequences in the inputs (all were skipped)")
    return kept


def _kept(catalog: Catalog, found: dict[int, Finding], on_invalid: str, split_at_n: int | None) -> Catalog:
    """The catalog after the findings: rows skipped (recorded, in row order), rows cut at runs of N,
    replaced bases counted. Rows without a finding are kept whole."""
    replaced: dict[str, int] = {}  # --on-invalid replace-N: invalid bases per input file
    replaced_seqs = 0
    dropped: list[int] = []
    parts: dict[int, list[tuple[int, int]]] = {}  # --split-at-n: rows not kept whole
    for row in sorted(found):
        finding, seq = found[row], int(catalog.seq[row])
        if finding.bad >= 0:
            if on_invalid == "skip":
                where = f"{catalog.source.describe(seq)} has {finding.char} at position {finding.bad} (0-based)"
                catalog.skipped.append(
                    {
                        "seq_id": catalog.names[row],
                        "file": catalog.source.file_of(seq),
                        "reason": f"{where}, not an IUPAC code",
                    }
                )
                dropped.append(row)
                continue
            file = catalog.source.file_of(seq)
            replaced[file] = replaced.get(file, 0) + finding.n_bad
            replaced_seqs += 1
        if split_at_n is not None:
            parts[row] = pieces(int(catalog.lengths[row]), merge_runs(finding.runs, split_at_n))
            if not parts[row]:
                reason = f"only runs of N (--split-at-n {split_at_n})"
                catalog.skipped.append(
                    {"seq_id": catalog.names[row], "file": catalog.source.file_of(seq), "reason": reason}
                )
    if split_at_n is None:
        kept = catalog.take(np.setdiff1d(np.arange(len(catalog)), dropped)) if dropped else catalog
    else:
        arr = _cut_rows(catalog.lengths, parts, dropped)
        kept = catalog.take(arr[:, 0])
        kept.origin = arr[:, 1].copy()
        kept.lengths = arr[:, 2] - arr[:, 1]
        kept.notes["split_at_n"] = {"min_run": split_at_n, "pieces": len(arr), "sequences_cut": _n_cut(arr)}
    if on_invalid == "replace-N":
        total = sum(replaced.values())
        kept.notes["replaced"] = {"bases": total, "sequences": replaced_seqs, "by_file": replaced}
    return kept


def _bad_byte(catalog: Catalog, row: int, finding: Finding) -> str:
    """Where a row's first unknown byte is, and what it is."""
    where = catalog.source.describe(int(catalog.seq[row]))
    return f"{where} has {finding.char} at position {finding.bad} (0-based), not an IUPAC code"


def _cut_rows(lengths: np.ndarray, parts: dict[int, list[tuple[int, int]]], dropped: list[int]) -> np.ndarray:
    """(row, start, end) per piece, in row order: every row whole except those in `parts` (their
    pieces) and `dropped` (none)."""
    counts = np.ones(len(lengths), dtype=np.int64)
    counts[dropped] = 0
    for row, cut in parts.items():
        counts[row] = len(cut)
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    starts, ends = np.zeros(len(rows), dtype=np.int64), lengths[rows].astype(np.int64)
    first = np.cumsum(counts) - counts
    for row, cut in parts.items():
        at = int(first[row])
        for i, (s, e) in enumerate(cut):
            starts[at + i], ends[at + i] = s, e
    return np.stack([rows, starts, ends], axis=1)


def _n_cut(rows: np.ndarray) -> int:
    """Sequences that became more than one piece."""
    if len(rows) == 0:
        return 0
    _, counts = np.unique(rows[:, 0], return_counts=True)
    return int((counts > 1).sum())
