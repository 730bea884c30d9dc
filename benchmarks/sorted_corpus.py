"""A JSON lines corpus shaped like OpenGenome2's metagenome subset: files sorted longest to shortest.

OpenGenome2's ``json/`` tree ships the metagenome subset as ``data_metagenomics_train_chunk<k>.jsonl.gz``
files, one record per line with the sequence in ``text``, and each file's records sorted from the
longest sequence to the shortest. `write_sorted_corpus` writes such files: record lengths drawn
log-normal as `benchmarks.metagenome` draws contig lengths (median `metagenome.MEDIAN`, sigma
`metagenome.SIGMA`, none under `metagenome.MIN_LENGTH`), as many records per file as make about
`windows_per_file` windows of `seq_length` tokens (`core.windowing`'s count, no control tags), then
sorted longest first. The bases are cut one after another from the bundled genomes, going round
them as often as needed (the shuffle measures look at lengths and files, not at the bases); every
second file's records also carry a ``record`` field, as some of OpenGenome2's files do. Everything
is a pure function of the seed.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.metagenome import BUNDLED, MEDIAN, MIN_LENGTH, SIGMA, source_bases
from bionemo_wds.core.tokenizer import N_SPECIALS_PER_SAMPLE
from bionemo_wds.core.windowing import default_stride, tail_window_counts

#: The source word of the file names (OpenGenome2's metagenome subset).
SOURCE = "metagenomics"


@dataclass(frozen=True)
class SortedCorpus:
    """The files written and each one's record lengths, in line order (line ``i + 1`` is record ``i``)."""

    files: list[Path]
    lengths: list[np.ndarray]


def file_name(k: int, split: str = "train") -> str:
    """OpenGenome2's name for chunk `k` of a split of the metagenome subset."""
    return f"data_{SOURCE}_{split}_chunk{k}.jsonl.gz"


def sorted_lengths(windows: int, seq_length: int, seed: int) -> np.ndarray:
    """Log-normal record lengths, longest first, whose windows (tail rule ``end``, default stride)
    reach `windows` (the last record may pass it by a few)."""
    rng = np.random.default_rng([seed, 31])
    bases, stride = seq_length - N_SPECIALS_PER_SAMPLE, default_stride(seq_length)
    drawn: list[np.ndarray] = []
    total = 0
    while total < windows:
        block = rng.lognormal(np.log(MEDIAN), SIGMA, size=max(256, windows // 4)).astype(np.int64)
        block = block[block >= MIN_LENGTH]
        counts = np.cumsum(tail_window_counts(block, bases, stride, "end"))
        keep = int(np.searchsorted(counts, windows - total)) + 1
        drawn.append(block[:keep])
        total += int(counts[min(keep, len(counts)) - 1])
    return np.sort(np.concatenate(drawn))[::-1]


def write_sorted_corpus(
    out: str | Path, files: int, windows_per_file: int, seq_length: int, seed: int = 0
) -> SortedCorpus:
    """`files` gzip JSON lines files named as OpenGenome2's train chunks in `out` (module text)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pool = source_bases(BUNDLED).tobytes().decode()
    twice = pool + pool  # a record that runs past the end goes round to the start
    at = 0
    paths, all_lengths = [], []
    for k in range(1, files + 1):
        # no record longer than the genomes (a draw 7.5 sigma above the median)
        lengths = np.minimum(sorted_lengths(windows_per_file, seq_length, seed * 100_003 + k), len(pool))
        lines = []
        for i, n in enumerate(lengths.tolist()):
            text = twice[at : at + n]
            at = (at + n) % len(pool)
            record = {"record": f"contig_{k}_{i}", "text": text} if k % 2 == 0 else {"text": text}
            lines.append(json.dumps(record))
        path = out / file_name(k)
        # mtime 0: the same corpus is the same bytes (gzip stamps the time of writing otherwise)
        path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=1, mtime=0))
        paths.append(path)
        all_lengths.append(lengths)
    return SortedCorpus(paths, all_lengths)
