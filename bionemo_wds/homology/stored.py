"""What a prepared dataset holds, as k-mers: one pass over a split's shards, per sequence (as tasks:
`shard_pass`).

`contains` and `leakage` judge what a model was trained on, which is what the shards store (not the
input files, which may have moved or changed): every stored stretch of bases (a window of a windows
layout, a whole sequence of the sequence layout) is added to its sequence's sketch, so overlapping
windows count once and bases the windows left out (``--tail drop``) do not count. With a set of
query k-mers (`QueryKmers`), the same pass also finds which of those k-mers each sequence holds,
exactly (`kmers.canonical_kmers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bionemo_wds.core.distinct import distinct
from bionemo_wds.format.manifest import read_manifest
from bionemo_wds.homology.kmers import kmer_codes
from bionemo_wds.homology.shard_pass import read_splits as read_pass
from bionemo_wds.homology.sketch import Sketches, SketchParams
from bionemo_wds.homology.sketch_cache import is_kept, keep_sketches, kept_sketches
from bionemo_wds.prepare.executors.tasks import TaskPlace

#: Bits of `QueryKmers.filter`'s index (a 16 MB bitmap as numpy bools).
FILTER_BITS = 24
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads codes that differ in any base


def bucket(codes: np.ndarray) -> np.ndarray:
    """The filter bit of each k-mer code."""
    return (codes * _MIX) >> np.uint64(64 - FILTER_BITS)


@dataclass
class QueryKmers:
    """The distinct k-mers of a set of queries: ``codes`` sorted, the queries holding ``codes[i]``
    at ``owners[starts[i]:starts[i+1]]``, and each query's k-mer count (``sizes``)."""

    ksize: int
    codes: np.ndarray
    starts: np.ndarray
    owners: np.ndarray
    sizes: np.ndarray
    #: A bitmap of `FILTER_BITS` bits, set at each code's `bucket`: most k-mers of a stored sequence
    #: are no query's and are dropped by one lookup in it (a binary search of the codes costs ~4x more).
    filter: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        if len(self.filter) == 0:
            self.filter = np.zeros(1 << FILTER_BITS, dtype=bool)
            self.filter[bucket(self.codes)] = True

    @classmethod
    def of(cls, queries: Sequence[np.ndarray], ksize: int) -> QueryKmers:
        """From each query's sorted distinct codes (`kmers.canonical_kmers`)."""
        codes = np.concatenate(list(queries)) if queries else np.zeros(0, np.uint64)
        owner = np.repeat(np.arange(len(queries), dtype=np.int64), [len(q) for q in queries])
        order = np.argsort(codes, kind="stable")
        codes, owner = codes[order], owner[order]
        unique, starts = np.unique(codes, return_index=True)
        bounds = np.append(starts, len(codes)).astype(np.int64)
        sizes = np.array([len(q) for q in queries], dtype=np.int64)
        return cls(ksize, unique, bounds, owner, sizes)

    def found_in(self, bases: np.ndarray) -> np.ndarray:
        """The query k-mers (codes) that `bases` hold."""
        kmers = kmer_codes(bases, self.ksize)
        kmers = kmers[self.filter[bucket(kmers)]]
        if len(self.codes) == 0 or len(kmers) == 0:
            return kmers[:0]
        at = np.minimum(np.searchsorted(self.codes, kmers), len(self.codes) - 1)
        return distinct(kmers[self.codes[at] == kmers])

    def shared(self, found: np.ndarray) -> np.ndarray:
        """How many of each query's k-mers are among the distinct codes `found` (int64 per query)."""
        at = np.searchsorted(self.codes, found)
        first, last = self.starts[at], self.starts[at + 1]
        counts = last - first
        entries = np.repeat(first, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
        return np.bincount(self.owners[entries], minlength=len(self.sizes)).astype(np.int64)


@dataclass
class StoredSplit:
    """A split's sequences as stored: their sketches (first-stored order) and, when queried, the
    query k-mers each holds (``found[name]``: sorted distinct codes)."""

    split: str
    sketches: Sketches
    found: dict[str, np.ndarray] = field(default_factory=dict)


def read_split(
    store: Any,
    split: str,
    sequences: bool,
    params: SketchParams,
    queries: QueryKmers | None = None,
    progress: bool = False,
    place: TaskPlace | None = None,
) -> StoredSplit:
    """Sketch every sequence of `split` (and find `queries`' k-mers in it) in one pass over its shards
    (`read_splits`)."""
    return read_splits(store, [split], sequences, params, queries, place or TaskPlace(progress=progress))[0]


def read_splits(
    store: Any,
    splits: Sequence[str],
    sequences: bool,
    params: SketchParams,
    queries: QueryKmers | None = None,
    place: TaskPlace | None = None,
    keep: bool = True,
) -> list[StoredSplit]:
    """Sketch every sequence of `splits` (and find `queries`' k-mers in it) in one pass over their
    shards, as tasks at `place` (`shard_pass`; this process by default); `sequences`: the dataset has
    the sequence layout (a sequence's pieces are joined before their k-mers are taken). A sequence's
    length here is the bases its stored stretches cover (first to last base).

    Without `queries`, a split whose sketches are kept beside the dataset (`sketch_cache`) is not
    read; with `keep`, the sketches of every split read are kept for the next call."""
    manifest = read_manifest(store)
    shards = {split: manifest.splits[split].shards for split in splits}
    kept = {}
    if queries is None:
        for split in splits:
            found = kept_sketches(store, shards[split], split, params)
            if found is not None:
                kept[split] = StoredSplit(split, found)
    to_read = {split: listed for split, listed in shards.items() if split not in kept}
    passes = read_pass(store, to_read, sequences, params, queries, place) if to_read else {}
    for split, listed in to_read.items():
        kept[split] = StoredSplit(split, passes[split].sketches, passes[split].found)
        if keep and (queries is None or not is_kept(store, listed, split, params)):  # read: none kept, or damaged
            keep_sketches(store, listed, split, passes[split].sketches)
    return [kept[split] for split in splits]
