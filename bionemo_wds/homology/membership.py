"""Is this sequence in the dataset? `contains`: per query and split, the stored sequences holding it.

Two measures, side by side, for every (query, stored sequence) pair:

- **exact**: the share of the query's distinct canonical k-mers found among the stored sequence's
  (`kmers`), and the identity it implies (``C ** (1/k)``, `similarity.ani`). This decides: a query
  is *in* a split when some stored sequence reaches ``min_identity``.
- **sketch**: the same containment estimated from FracMinHash sketches (`sketch`, one hash kept in
  `scaled`), what `leakage` and ``--group-by similarity`` use; shown so the two can be compared.

Queries are FASTA (or FASTQ) files, plain or gzip/bzip2, read with screed (sourmash's reader).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bionemo_wds.errors import BadInputError, OptionError
from bionemo_wds.format import read_manifest
from bionemo_wds.homology.kmers import canonical_kmers
from bionemo_wds.homology.similarity import MIN_SHARED, ani, shared_hashes
from bionemo_wds.homology.sketch import Sketches, SketchParams, sketch_hashes
from bionemo_wds.homology.stored import QueryKmers, StoredSplit, read_splits
from bionemo_wds.load.spans import is_sequence_layout
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.storage.store import Store

#: Default ``--min-identity``: the share of identical bases, estimated from shared k-mers.
MIN_IDENTITY = 0.95


@dataclass(frozen=True)
class Query:
    """One query sequence: its name (the id, up to the first space), file and bases."""

    name: str
    file: str
    bases: bytes


def read_queries(paths: Sequence[str]) -> list[Query]:
    """Every sequence of the FASTA/FASTQ files `paths`; a missing, unreadable or non-FASTA file, or
    one without a sequence, is a `BadInputError` naming it."""
    try:
        import screed
    except ImportError as exc:
        raise BadInputError("reading query files needs screed: pip install 'bionemo-wds[homology]'") from exc
    queries: list[Query] = []
    for path in paths:
        try:
            with screed.open(path) as records:  # closed when read (screed leaves that to its caller)
                found = [Query(r.name.split()[0] if r.name else "", path, r.sequence.encode()) for r in records]
        except FileNotFoundError as exc:
            raise BadInputError(f"query file {path} does not exist") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"query file {path} cannot be read: {exc}") from exc
        except (ValueError, AssertionError, KeyError, IndexError) as exc:
            raise BadInputError(f"query file {path} is not FASTA (or FASTQ): {exc}") from exc
        if not found:
            raise BadInputError(f"query file {path} holds no sequence (is it FASTA?)")
        empty = next((q.name for q in found if not q.bases), None)
        if empty is not None:
            raise BadInputError(f"query file {path}: sequence {empty!r} has no bases")
        queries.extend(found)
    return queries


def check_identity(min_identity: float) -> float:
    """`min_identity`, or an `OptionError` when it is outside (0.5, 1]."""
    if not 0.5 <= min_identity <= 1.0:
        raise OptionError(f"--min-identity must be from 0.5 to 1 (a share of identical bases), got {min_identity}")
    return min_identity


def sketch_queries(queries: Sequence[Query], params: SketchParams) -> Sketches:
    """A sketch of every query."""
    return Sketches.build(
        params,
        [q.name for q in queries],
        [len(q.bases) for q in queries],
        [sketch_hashes([q.bases], params) for q in queries],
    )


@dataclass
class Hit:
    """A stored sequence holding (most of) a query."""

    seq_id: str
    shared_kmers: int
    containment: float  # exact: share of the query's k-mers in the sequence
    identity: float  # C ** (1/k)
    sketch_containment: float | None  # from sketches (None: fewer than MIN_SHARED shared hashes)
    sketch_identity: float | None


@dataclass
class SplitAnswer:
    """One query against one split: every sequence reaching the identity, best first."""

    split: str
    hits: list[Hit] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.hits)


@dataclass
class Membership:
    """One query's answers, per split."""

    query: str
    file: str
    length: int
    kmers: int
    sketch_hashes: int
    splits: list[SplitAnswer]


def answer(
    queries: Sequence[Query], qk: QueryKmers, qs: Sketches, stored: StoredSplit, min_identity: float
) -> list[SplitAnswer]:
    """Each query's answer in `stored`."""
    k = qk.ksize
    pairs = shared_hashes(qs, stored.sketches)
    sketch_c = {
        (int(q), stored.sketches.names[int(t)]): float(s / max(qs.sizes[q], 1))
        for q, t, s in zip(pairs.left, pairs.right, pairs.shared)
    }
    answers = [SplitAnswer(stored.split) for _ in queries]
    for seq_id, codes in stored.found.items():
        shared = qk.shared(codes)
        for q in np.flatnonzero(shared):
            c = float(shared[q] / max(qk.sizes[q], 1))
            identity = float(ani(c, k))
            if identity < min_identity:
                continue
            sc = sketch_c.get((int(q), seq_id))
            si = None if sc is None else float(ani(sc, k))
            answers[q].hits.append(Hit(seq_id, int(shared[q]), c, identity, sc, si))
    for a in answers:
        a.hits.sort(key=lambda h: (-h.identity, h.seq_id))
    return answers


def contains(
    dataset: str,
    query_files: Sequence[str],
    min_identity: float = MIN_IDENTITY,
    params: SketchParams | None = None,
    splits: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    place: TaskPlace | None = None,
) -> list[Membership]:
    """For every sequence of `query_files`: in which splits of `dataset` it (or a sequence of at least
    `min_identity`) is stored, and which stored sequences hold it. The shards are read once, as tasks
    at `place` (`homology.shard_pass`: this process by default, a process pool or Dask); the
    answers do not depend on it."""
    params = (params or SketchParams()).check()
    check_identity(min_identity)
    queries = read_queries(query_files)
    store = Store(dataset, storage_options)
    manifest = read_manifest(store)
    wanted = list(manifest.splits) if not splits else list(dict.fromkeys(splits))  # a split named twice: once
    unknown = [s for s in wanted if s not in manifest.splits]
    if unknown:
        raise OptionError(f"{store.root} has no split {unknown[0]!r}; it has {', '.join(manifest.splits)}")
    qk = QueryKmers.of([canonical_kmers(q.bases, params.ksize) for q in queries], params.ksize)
    empty = [q for q, size in zip(queries, qk.sizes) if size == 0]
    if empty:
        warnings.warn(
            f"{len(empty)} of {len(queries)} queries (the first {empty[0].name!r} of {empty[0].file}) hold no "
            f"{params.ksize} A/C/G/T bases in a row (shorter than --ksize, or mostly N): they cannot be found",
            stacklevel=2,
        )
    qs = sketch_queries(queries, params)
    layout = is_sequence_layout(manifest.params)
    place = place or TaskPlace(progress=progress)
    per_split = [
        answer(queries, qk, qs, stored, min_identity)
        for stored in read_splits(store, wanted, layout, params, qk, place)
    ]
    return [
        Membership(
            q.name, q.file, len(q.bases), int(qk.sizes[i]), int(qs.sizes[i]), [answers[i] for answers in per_split]
        )
        for i, q in enumerate(queries)
    ]


__all__ = ["MIN_SHARED", "Hit", "Membership", "Query", "SplitAnswer", "contains", "read_queries"]
