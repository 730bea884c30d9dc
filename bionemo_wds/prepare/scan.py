"""One pass over every base of a catalog before anything is written: refuse (or skip) unknown
characters, and cut sequences at long runs of N when asked (`--split-at-n K`).

Source-agnostic: bases come through the source's `BaseReader` in chunks of `SCAN_CHUNK` bases, so
memory is bounded by a chunk, not a sequence. The common case (all bases valid, no long N run) costs
two C-level byte operations per chunk (`bytes.translate` with a delete set, a substring test);
numpy is used only on chunks that have something to find. Per-sequence Python work is kept small
because metagenomic catalogs have millions of short contigs.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from bionemo_wds.core.tokenizer import UPPERCASE_TABLE, VALID_BASE, first_invalid, shown_byte
from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.prepare.catalog import Catalog

ON_INVALID = ("error", "skip", "replace-N")
#: Bases per read while scanning (4 MiB).
SCAN_CHUNK = 1 << 22
#: Every IUPAC byte of either case: `bytes.translate(None, _VALID)` leaves only the invalid ones.
_VALID = bytes(b for b in range(256) if VALID_BASE[b])
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


def scan(catalog: Catalog, on_invalid: str = "error", split_at_n: int | None = None, progress: bool = True) -> Catalog:
    """Check every base of `catalog` and, with `split_at_n`, cut its rows at runs of at least that
    many N (either case); returns the catalog of what remains (rows of skipped sequences removed,
    recorded in ``skipped``). `catalog` must hold whole sequences (origin 0), as sources build it.
    With ``replace-N`` the bases the writers will replace are counted: ``notes["replaced"]`` holds
    their total, the sequences holding them and the count per input file (for the manifest)."""
    if on_invalid not in ON_INVALID:
        raise OptionError(f"--on-invalid must be one of {', '.join(ON_INVALID)}, got {on_invalid!r}")
    if split_at_n is not None and catalog.windows is not None:
        raise OptionError("--split-at-n cannot be combined with --window-db: the window databases fix the windows")
    reader = catalog.source.reader()
    keep: list[int] = []
    cut: list[tuple[int, int, int]] = []  # (row, start, end) when cutting
    lengths = catalog.lengths.tolist()
    seqs = catalog.seq.tolist()
    bar = tqdm(total=catalog.total_bases, desc="check", unit="base", unit_scale=True, disable=not progress)
    replaced: dict[str, int] = {}  # --on-invalid replace-N: invalid bases per input file
    replaced_seqs = 0

    def read(seq: int, lo: int, hi: int) -> bytes:
        raw = reader.read(seq, lo, hi)
        if len(raw) != hi - lo:
            raise SourceError(f"{catalog.source.describe(seq)} is shorter than its index says")
        return raw

    def check_row(row: int) -> None:
        nonlocal replaced_seqs
        seq, length = seqs[row], lengths[row]
        runs: list[tuple[int, int]] = []
        bad, n_bad = -1, 0
        for lo in range(0, length, SCAN_CHUNK):
            raw = read(seq, lo, min(lo + SCAN_CHUNK, length))
            invalid = raw.translate(None, _VALID)
            if invalid:
                n_bad += len(invalid)
                if bad < 0:
                    bad = lo + first_invalid(raw)
                if on_invalid != "replace-N":
                    break  # nothing more to learn from this sequence
            if split_at_n is not None:  # a replaced byte is no N of the source: it never joins a run
                runs.extend(n_runs(raw.translate(UPPERCASE_TABLE), split_at_n, lo))
        if bad >= 0:
            char = shown_byte(reader.read(seq, bad, bad + 1)[0])
            where = f"{catalog.source.describe(seq)} has {char} at position {bad} (0-based), not an IUPAC code"
            if on_invalid == "error":
                raise SourceError(f"{where}; use --on-invalid skip or replace-N to proceed")
            if on_invalid == "skip":
                skipped = {"seq_id": catalog.names[row], "file": catalog.source.file_of(seq), "reason": where}
                catalog.skipped.append(skipped)
                return
            file = catalog.source.file_of(seq)
            replaced[file] = replaced.get(file, 0) + n_bad
            replaced_seqs += 1
        if split_at_n is None:
            keep.append(row)
            return
        parts = pieces(length, merge_runs(runs, split_at_n))
        if not parts:
            reason = f"only runs of N (--split-at-n {split_at_n})"
            catalog.skipped.append(
                {"seq_id": catalog.names[row], "file": catalog.source.file_of(seq), "reason": reason}
            )
        cut.extend((row, s, e) for s, e in parts)

    try:
        row, n = 0, len(lengths)
        while row < n:
            if split_at_n is not None or lengths[row] > SCAN_CHUNK:
                check_row(row)
                bar.update(lengths[row])
                row += 1
                continue
            # short sequences (metagenomic contigs): one validity check for up to SCAN_CHUNK bases of
            # them; only a batch holding a bad byte is checked again sequence by sequence
            end, total, raws = row, 0, []
            while end < n and (end == row or total + lengths[end] <= SCAN_CHUNK):
                raws.append(read(seqs[end], 0, lengths[end]))
                total += lengths[end]
                end += 1
            if b"".join(raws).translate(None, _VALID):
                for r in range(row, end):
                    check_row(r)
            else:
                keep.extend(range(row, end))
            bar.update(total)
            row = end
    finally:
        bar.close()
        reader.close()
    if split_at_n is None:
        kept = catalog.take(np.asarray(keep, dtype=np.int64)) if len(keep) != len(catalog) else catalog
    else:
        arr = np.asarray(cut, dtype=np.int64).reshape(-1, 3)
        kept = catalog.take(arr[:, 0])
        kept.origin = arr[:, 1].copy()
        kept.lengths = arr[:, 2] - arr[:, 1]
        kept.notes["split_at_n"] = {"min_run": split_at_n, "pieces": len(arr), "sequences_cut": _n_cut(arr)}
    if on_invalid == "replace-N":
        total = sum(replaced.values())
        kept.notes["replaced"] = {"bases": total, "sequences": replaced_seqs, "by_file": replaced}
    if catalog.windows is not None:
        if len(kept) != len(catalog):
            raise OptionError("--on-invalid skip dropped sequences that the --window-db windows name")
        kept.windows = catalog.windows
    if len(kept) == 0:
        raise SourceError("no usable sequences in the inputs (all were skipped)")
    return kept


def _n_cut(rows: np.ndarray) -> int:
    """Sequences that became more than one piece."""
    if len(rows) == 0:
        return 0
    _, counts = np.unique(rows[:, 0], return_counts=True)
    return int((counts > 1).sum())
