"""Reading what the epoch plan says: records by their index, windows into the planned batches.

`records.SourceRecords` knows where every record of a split of one or more datasets lies and reads
a record with one positioned read, checked against its index row. `PlannedBatches` is the loader's
dataset: each loader worker produces the batches `plan.unit_ranges` deals it, as
`batch.PlannedRows` (each window's decoded record and row, kept in a `RecordCache`), which the batch
builder (`batch.assemble`) turns into compact batches; each batch carries its index so the main
process can put them back in order (`in_order`). A record that fails its checks raises (naming
shard and record) or, under ``handler="warn"``, is counted and its windows are replaced by filler,
so every rank still yields its planned number of batches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset
from webdataset.filters import pipelinefilter

from bionemo_wds.load.batch.assemble import PlannedRows
from bionemo_wds.load.plan import FILLER, UNIT_BATCHES, RankPlan, unit_ranges
from bionemo_wds.load.records import SourceRecords
from bionemo_wds.load.rows import FILLER_ROWS, BlockRows
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.world import Worker
from bionemo_wds.storage.shards import MAX_AHEAD

#: The fewest windows a loader worker keeps decoded (records of 16 windows: 128 records).
CACHE_WINDOWS = 2048
#: Records a loader worker asks its shards to fetch ahead at once, at most: half the shards' limit.
READ_AHEAD_RECORDS = MAX_AHEAD // 2


#: Not in the cache (a cached record may be None: damaged and skipped).
MISSING: Any = object()


class RecordCache:
    """A loader worker's decoded records (None for a damaged one), the least recently used dropped
    first once they hold more than `budget` windows (the last one put is always kept)."""

    def __init__(self, budget: int):
        self.budget, self.held = budget, 0
        self.records: OrderedDict[int, BlockRows | None] = OrderedDict()

    def __contains__(self, record: int) -> bool:
        return record in self.records

    def get(self, record: int) -> Any:
        """The record's block (or None), marked as just used; `MISSING` when it is not held."""
        block = self.records.get(record, MISSING)
        if block is not MISSING:
            self.records.move_to_end(record)
        return block

    def put(self, record: int, block: BlockRows | None) -> BlockRows | None:
        """Hold `block` as the record's, dropping the least recently used beyond the budget."""
        self.records[record] = block
        self.held += len(block) if block is not None else 1
        while self.held > self.budget and len(self.records) > 1:
            _, old = self.records.popitem(last=False)
            self.held -= len(old) if old is not None else 1
        return block


class PlannedBatches(IterableDataset):
    """The dataset of a planned loader: this worker's batches of the current pass, as `PlannedRows`."""

    def __init__(
        self,
        records: SourceRecords,
        policy: ShardErrorPolicy,
        current: Callable[[], RankPlan],
        mix: int,
        micro: int,
        unit: int | None = None,
    ):
        super().__init__()
        self.records, self.policy, self.current = records, policy, current
        # a worker's unit of batches spans a mixing block, so workers mostly read different records;
        # `unit=1` deals batches round-robin, the order a plain DataLoader takes them from its workers
        self.unit = unit or max(UNIT_BATCHES, -(-mix // max(micro, 1)))
        # two mixing blocks of records decoded at once (with the records cut at their edges), so a
        # block's records are read once, not per batch; counted in stored rows (windows, or the pieces
        # of a sequence layout's samples: `rows_per_sample`), so the memory is the same whatever the
        # records' sizes and however many there are
        largest = int(records.table.windows.max()) if len(records.table) else 1
        self.cache_windows = max(CACHE_WINDOWS, 2 * (int(mix * records.rows_per_sample) + 2 * largest))
        self.slice_batches = ahead_batches(records, self.unit, micro)

    def __iter__(self) -> Iterator[tuple[int, PlannedRows]]:
        plan, worker = self.current(), Worker.detect()
        cache = RecordCache(self.cache_windows)
        units = unit_ranges(len(plan), worker.id, worker.count, self.unit)  # one at a time: no list of the pass
        # slices of this worker's batches in order (its units, or fewer batches: `ahead_batches`)
        step = self.slice_batches
        slices = (unit[i : i + step] for unit in units for i in range(0, len(unit), step))
        current = next(slices, None)
        if current is not None:
            self.prefetch(plan, list(current), cache)
        while current is not None:
            following = next(slices, None)  # what the plan says comes next: the next slice's records
            if following is not None:
                self.prefetch(plan, list(following), cache)
            for b in current:
                yield plan.first_batch + b, self.windows(plan, b, cache, worker)
            current = following

    def prefetch(self, plan: RankPlan, batches: list[int], cache: RecordCache) -> None:
        """Ask for the records of `batches` not decoded already, in the order they are read."""
        if not self.records.shards.reads_ahead:
            return  # local files: the page cache reads ahead, so no need to work out which records
        ids = plan.batches[batches].ravel()
        records, _ = self.records.table.locate(self.records.windows(ids[ids != FILLER]))
        self.records.prefetch([r for r in dict.fromkeys(records.tolist()) if r not in cache])

    def windows(self, plan: RankPlan, b: int, cache: RecordCache, worker: Worker) -> PlannedRows:
        """The windows of batch `b` of the plan (filler where the plan or a damaged record says so)."""
        ids = plan.batches[b]
        real = ids != FILLER
        all_real = bool(real.all())
        found, sources, draws = self.records.resolve(ids if all_real else ids[real])
        records, rows = self.records.table.locate(found)
        blocks: list[BlockRows] = []
        for record in records.tolist():
            block = cache.get(record)
            if block is MISSING:
                report = self.policy.raises or self.reporter(plan, record, worker.count) == worker.id
                block = cache.put(record, self.records.read(record, report))
            blocks.append(block if block is not None else FILLER_ROWS)
        row_list = [row if block is not FILLER_ROWS else 0 for row, block in zip(rows.tolist(), blocks)]
        source_list: list[int] = sources
        draw_list: list[tuple[int, int] | None] = list(draws)
        if not all_real:  # filler rows where the plan has no window
            it = iter(zip(blocks, row_list, source_list, draw_list))
            blocks, row_list, source_list, draw_list = (
                list(column) for column in zip(*(next(it) if r else (FILLER_ROWS, 0, 0, None) for r in real.tolist()))
            )
        return PlannedRows(blocks, row_list, source_list, draw_list)

    def reporter(self, plan: RankPlan, record: int, workers: int) -> int:
        """The worker that reports a damaged record: the one producing its first window's batch
        (so a record is counted once however many workers read it)."""
        first, ids = self.records.table.first, plan.batches.copy()
        ids[ids != FILLER] = self.records.windows(ids[ids != FILLER])
        hits = np.flatnonzero(((ids >= first[record]) & (ids < first[record + 1])).any(axis=1))
        return int(hits[0]) // self.unit % max(workers, 1) if len(hits) else 0


def ahead_batches(records: Any, unit: int, micro: int) -> int:
    """Batches whose records a worker asks for at once: two such slices (the one being read and the
    next) must fit the shards' read-ahead (`MAX_AHEAD` ranges), else the shards forget fetched
    records before they are read, or fetch them one at a time when a batch needs them. A unit's
    batches when their records (about its samples over the windows of a record) fit half of it;
    else as many batches as have at most that many samples' records."""
    table = records.table
    per_sample = max(1.0, float(records.rows_per_sample))  # records a sample reads, at most about
    rows_per_record = table.n_windows / max(len(table), 1)
    if unit * micro * per_sample / max(rows_per_record, 1.0) + 2 <= READ_AHEAD_RECORDS:
        return unit
    return max(1, min(unit, int(READ_AHEAD_RECORDS // (micro * per_sample))))


def _in_order(src: Iterable[dict[str, Any]], first: Callable[[], int]) -> Iterator[dict[str, Any]]:
    """(main side) Batches from several workers -> in plan order (workers produce units of batches)."""
    expected: int | None = None
    held: dict[int, dict[str, Any]] = {}
    for batch in src:
        if expected is None:  # asked only now: the pass's plan is set when its first batch is asked for
            expected = first()
        held[batch.pop("index")] = batch
        while expected in held:
            yield held.pop(expected)
            expected += 1
    for index in sorted(held):  # only when a worker's batches went missing (a damaged shard skipped)
        yield held.pop(index)


in_order = pipelinefilter(_in_order)
