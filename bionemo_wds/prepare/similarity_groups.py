"""Homology-aware splits: ``prepare --group-by similarity:T[,k=K][,scaled=S]``.

Every row of the catalog (a sequence, or a piece `--split-at-n` cut) is sketched (`homology.sketch`),
near-identical rows (estimated ANI of the smaller in the larger >= T: `homology.similarity`) are
linked, and each connected cluster becomes one group, so the split keeps it in one split. Rows the
source or the sequence already ties together (the pieces of one sequence, a sharded-Eden sample)
stay linked too. A cluster is named by its first row's sequence id (input order); the sequence
table (``sequences.tsv``, column ``group``) records every sequence's cluster.

Sketching is a pass over the bases and runs as tasks of about `TASK_BASES` bases each
(`executors.tasks.run_tasks`): in a process pool of ``--workers`` (``--executor local``) or on the
Dask cluster (``--executor dask``).
The tasks' results are joined in row order, so the clusters (and every byte written after them)
are the same for any number of workers and for either executor.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from bionemo_wds.homology.similarity import MIN_SHARED, clusters_with, near_identical_pairs
from bionemo_wds.homology.sketch import Sketches, SketchParams, sketch_hashes, sourmash_module
from bionemo_wds.prepare.catalog import Catalog, Source
from bionemo_wds.prepare.executors.tasks import TaskPlace, run_tasks
from bionemo_wds.prepare.groups import parse_similarity

#: Bases per sketch task.
TASK_BASES = 32_000_000


@dataclass(frozen=True)
class SketchContext:
    """What every sketch task shares: the source, the writers' base table, the sketch parameters.
    Sent once to each process (a pool's initializer; ``Client.scatter`` to every Dask worker)."""

    source: Source
    table: bytes | None
    params: SketchParams


@dataclass(frozen=True)
class SketchTask:
    """A run of catalog rows: their source sequences, where they start, their lengths."""

    seq: np.ndarray
    origin: np.ndarray
    length: np.ndarray


def sketch_rows(context: SketchContext, task: SketchTask) -> list[np.ndarray]:
    """The hashes of each row of `task` (one reader, opened here)."""
    reader = context.source.reader()
    try:
        return [
            sketch_hashes([reader.read(int(s), int(o), int(o + n), context.table)], context.params)
            for s, o, n in zip(task.seq, task.origin, task.length)
        ]
    finally:
        reader.close()


def tasks_of(catalog: Catalog) -> list[SketchTask]:
    """The catalog's rows in runs of about `TASK_BASES` bases (at least one row each)."""
    ends = np.cumsum(catalog.lengths)
    cuts = np.searchsorted(ends, np.arange(TASK_BASES, int(ends[-1]) if len(ends) else 0, TASK_BASES), side="left")
    bounds = [0, *sorted({int(c) + 1 for c in cuts if int(c) + 1 < len(catalog)}), len(catalog)]
    return [
        SketchTask(catalog.seq[a:b], catalog.origin[a:b], catalog.lengths[a:b])
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]


def sketch_catalog(
    catalog: Catalog,
    table: bytes | None,
    params: SketchParams,
    place: TaskPlace | None = None,
) -> Sketches:
    """A sketch of every row of `catalog`, in row order; the tasks run at `place` (default: here)."""
    sourmash_module()  # the install hint before any task starts
    context = SketchContext(catalog.source, table, params)
    tasks = tasks_of(catalog)
    sizes = [int(t.length.sum()) for t in tasks]
    hashes = [h for part in run_tasks(sketch_rows, context, tasks, place or TaskPlace(), "sketch", sizes) for h in part]
    return Sketches.build(params, catalog.names, catalog.lengths, hashes)


def apply_similarity(
    catalog: Catalog,
    rule: str,
    table: bytes | None,
    place: TaskPlace | None = None,
) -> Catalog:
    """Set `catalog.groups` to the clusters of near-identical rows under `rule`, keeping rows that
    are already grouped (`catalog.groups`, the pieces of one sequence) together; notes for the manifest."""
    parsed = parse_similarity(rule)
    sketches = sketch_catalog(catalog, table, parsed.params, place)
    pairs = near_identical_pairs(sketches, parsed.min_identity)
    tied = catalog.groups if catalog.groups is not None else catalog.seq
    cluster = clusters_with(len(catalog), pairs.query, pairs.target, tied)
    first, groups = np.unique(cluster, return_inverse=True)
    catalog.groups = groups.astype(np.int64)
    catalog.group_names = [catalog.names[int(i)] for i in first]
    catalog.notes["group_by"] = {
        "rule": rule,
        "groups": len(first),
        "ungrouped_sequences": 0,
        "similarity": {
            "threshold": parsed.min_identity,
            "measure": "max containment ANI (FracMinHash, sourmash)",
            "ksize": parsed.params.ksize,
            "scaled": parsed.params.scaled,
            "near_identical_pairs": len(pairs.query),
            "too_short_to_sketch": int((sketches.sizes < MIN_SHARED).sum()),
            "multi_member_clusters": int((np.bincount(groups) > 1).sum()),
        },
    }
    return catalog
