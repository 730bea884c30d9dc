"""The pass over a dataset's shards that `contains` and `leakage` make, as tasks where `prepare`'s
passes run (`prepare.executors.tasks.run_tasks`: this process, a process pool of ``--workers``, or a
Dask cluster), merged into exactly what one front-to-back pass gives (`stored.read_split`'s answer).

A task reads a run of consecutive shards of one split (`ShardRange`, about `TASK_BYTES` of them) and
returns, per stored sequence, the sketch hashes, the stored stretch it covers and the query k-mers
found (`RangePart`). Windows (the windows layout) are whole documents, so the parts merge by union.
In the sequence layout a sequence's pieces may run on into the next task: each task keeps the first
``k - 1`` and last ``k - 1`` bases of the document it starts with and the one it ends with
(`Fragment`), and the merge adds the k-mers that cross a task boundary from those (`join`). A sketch
and a set of k-mers of a document are the union of those of its parts and of the k-mers across each
junction, so the result is the same for any number of tasks, workers or either executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bionemo_wds.core.distinct import distinct
from bionemo_wds.format.manifest_types import ShardInfo
from bionemo_wds.format.stored_records import joined_documents, stored_records
from bionemo_wds.homology.sketch import Sketches, SketchParams, sourmash_module
from bionemo_wds.prepare.executors.tasks import TaskPlace, run_tasks

#: Shard bytes a task reads at most (fewer when that leaves the workers too few tasks).
TASK_BYTES = 256 << 20


@dataclass(frozen=True)
class PassContext:
    """What every task shares (sent once to each process): the dataset, the shards of each split,
    the layout, the sketch parameters and the query k-mers (None: sketches only)."""

    store: Any
    shards: dict[str, Sequence[ShardInfo]]
    sequences: bool
    params: SketchParams
    queries: Any  # stored.QueryKmers | None


@dataclass(frozen=True)
class ShardRange:
    """Shards ``[first, stop)`` of `split`: one task."""

    split: str
    first: int
    stop: int


@dataclass(frozen=True)
class Fragment:
    """The piece of a document a task holds at one of its ends (sequence layout): its sequence, whether
    it opens a document (a first piece at base 0, or a new name: `joined_documents`), its length
    and its first and last ``k - 1`` bases (the whole fragment when shorter)."""

    seq_id: str
    opens: bool
    length: int
    head: bytes
    tail: bytes


@dataclass
class RangePart:
    """One task's answer: per sequence (first-stored order) its sorted sketch hashes, its stretch
    ``[first base, end, bases]`` and the query k-mers it holds; the fragments at its two ends."""

    hashes: dict[str, list[np.ndarray]] = field(default_factory=dict)
    span: dict[str, list[int]] = field(default_factory=dict)
    found: dict[str, list[np.ndarray]] = field(default_factory=dict)
    first: Fragment | None = None
    last: Fragment | None = None


@dataclass
class SplitPass:
    """A split as read: its sketches and the query k-mers each sequence holds."""

    sketches: Sketches
    found: dict[str, np.ndarray]


def shard_ranges(shards: dict[str, Sequence[ShardInfo]], workers: int) -> list[ShardRange]:
    """The tasks: each split's shards in runs of about `TASK_BYTES` bytes, or fewer so that every
    worker gets about four tasks."""
    total = sum(int(s.bytes) for split in shards.values() for s in split)
    target = max(1, min(TASK_BYTES, -(-total // (4 * max(1, workers)))))
    ranges = []
    for split, listed in shards.items():
        first, size = 0, 0
        for i, shard in enumerate(listed):
            size += int(shard.bytes)
            if size >= target:
                ranges.append(ShardRange(split, first, i + 1))
                first, size = i + 1, 0
        if first < len(listed):
            ranges.append(ShardRange(split, first, len(listed)))
    return ranges


def read_range(context: PassContext, task: ShardRange) -> RangePart:
    """One task: the sketch, stretch and query k-mers of every document of its shards."""
    k = context.params.ksize
    part = RangePart()
    first = True
    shards = context.shards[task.split][task.first : task.stop]
    for seq_id, start, bases in joined_documents(stored_records(context.store, shards), context.sequences):
        _add(part, context, seq_id, start, bases)
        if context.sequences:
            data = bases.tobytes()
            fragment = Fragment(seq_id, start == 0, len(data), data[: k - 1], data[-(k - 1) :])
            if first:
                part.first, first = fragment, False
            part.last = fragment
    return part


def _add(part: RangePart, context: PassContext, seq_id: str, start: int, bases: np.ndarray) -> None:
    """Add a document's (or a junction's: `start` < 0) hashes, stretch and query k-mers to `part`."""
    if start >= 0:
        where = part.span.setdefault(seq_id, [start, start + len(bases), 0])
        where[0], where[1] = min(where[0], start), max(where[1], start + len(bases))
        where[2] += len(bases)
    part.hashes.setdefault(seq_id, [])
    if len(bases) >= context.params.ksize:
        part.hashes[seq_id].append(sketch_of(bases.tobytes(), context.params))
    if context.queries is not None:
        hits = context.queries.found_in(bases)
        if len(hits):
            part.found.setdefault(seq_id, []).append(hits)


def sketch_of(bases: bytes, params: SketchParams) -> np.ndarray:
    """The sorted FracMinHash hashes of one stretch of bases (k-mers with a base other than A/C/G/T skipped)."""
    mh = sourmash_module().MinHash(n=0, ksize=params.ksize, scaled=params.scaled)
    mh.add_sequence(bases.decode("ascii", "replace"), force=True)
    hashes = np.fromiter(mh.hashes, dtype=np.uint64, count=len(mh))
    hashes.sort()
    return hashes


def add_across(into: RangePart, context: PassContext, seq_id: str, bases: bytes) -> None:
    """Add the k-mers of `bases`, a document's last ``k - 1`` bases before a task boundary and its
    first ``k - 1`` after it: every k-mer of them crosses the boundary."""
    _add(into, context, seq_id, -1, np.frombuffer(bases, dtype=np.uint8))


def join(into: RangePart, context: PassContext, parts: Sequence[RangePart]) -> None:
    """Merge one split's task parts (in task order) into `into`, adding the k-mers across each task
    boundary that a document continues over (sequence layout)."""
    k = context.params.ksize
    open_doc: tuple[str, bytes] | None = None  # the document still open at the previous task's end, its last k-1 bases
    for part in parts:
        for name, hashes in part.hashes.items():
            into.hashes.setdefault(name, []).extend(hashes)
        for name, span in part.span.items():
            where = into.span.get(name)
            if where is None:
                into.span[name] = list(span)
            else:
                where[0], where[1], where[2] = min(where[0], span[0]), max(where[1], span[1]), where[2] + span[2]
        for name, found in part.found.items():
            into.found.setdefault(name, []).extend(found)
        first, last = part.first, part.last
        if first is None:
            continue  # no record: the open document runs on
        tail = first.tail
        if open_doc is not None and first.seq_id == open_doc[0] and not first.opens:
            add_across(into, context, first.seq_id, open_doc[1] + first.head)
            tail = (open_doc[1] + first.tail)[-(k - 1) :]
        open_doc = (first.seq_id, tail) if last is first or last is None else (last.seq_id, last.tail)


def read_splits(
    store: Any,
    shards: dict[str, Sequence[ShardInfo]],
    sequences: bool,
    params: SketchParams,
    queries: Any = None,
    place: TaskPlace | None = None,
) -> dict[str, SplitPass]:
    """Every split of `shards` read in one pass of tasks at `place` (this process by default)."""
    place = place or TaskPlace()
    context = PassContext(store, shards, sequences, params, queries)
    tasks = shard_ranges(shards, place.workers)
    sizes = [task.stop - task.first for task in tasks]
    by_split: dict[str, list[RangePart]] = {split: [] for split in shards}
    for task, part in zip(tasks, run_tasks(read_range, context, tasks, place, "read shards", sizes, "shard")):
        by_split[task.split].append(part)
    out = {}
    for split, parts in by_split.items():
        merged = RangePart()
        join(merged, context, parts)
        names = list(merged.hashes)
        covered = [merged.span[n][2] if sequences else merged.span[n][1] - merged.span[n][0] for n in names]
        hashes = [
            distinct(np.concatenate(merged.hashes[n])) if merged.hashes[n] else np.zeros(0, np.uint64) for n in names
        ]
        found = {name: distinct(np.concatenate(parts_)) for name, parts_ in merged.found.items()}
        out[split] = SplitPass(Sketches.build(params, names, covered, hashes), found)
    return out
