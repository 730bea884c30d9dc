"""Reading what the epoch plan says: records by their index, windows into the planned batches.

`split_records.SplitRecords` knows where every record of a split lies (the dataset's record index,
or one built by scanning the shards of a dataset written before there was one) and reads a record
with one positioned read, checking its crc32 and window count. `PlannedBatches` is the loader's dataset:
each loader worker produces the batches `plan.worker_units` deals it, as `PlannedRows` (each
window's decoded record and row, kept in a `RecordCache`), and `assemble` writes them into compact
batches with the same coins and bytes as the per-window `reverse_complement` and `collate_compact`
stages, without a Python object per window; each batch carries its index so the main process can
put them back in order (`in_order`). A record that fails its
checks raises (naming shard and record) or, under ``handler="warn"``, is counted and its windows are
replaced by filler, so every rank still yields its planned number of batches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
from torch.utils.data import IterableDataset
from webdataset.filters import pipelinefilter

from bionemo_wds.errors import OptionError
from bionemo_wds.format import WindowBlock
from bionemo_wds.load.compact import compact_batch
from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.plan import FILLER, UNIT_BATCHES, RankPlan, worker_units
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.split_records import SplitRecords
from bionemo_wds.load.stages import BlockRows, dropped_tag
from bionemo_wds.load.world import Worker
from bionemo_wds.seeds import flip_salt, tag_salt

#: The fewest windows a loader worker keeps decoded (records of 16 windows: 128 records).
CACHE_WINDOWS = 2048


class FillerRows(BlockRows):
    """The one row of every filler window: no bases, no tag."""

    def __init__(self) -> None:  # no record behind it
        super().__init__(FILLER_BLOCK)


FILLER_BLOCK = WindowBlock(
    tokens=np.empty(0, dtype=np.uint8),
    lengths=np.zeros(1, dtype=np.int64),
    seq_id=[""],
    start=np.zeros(1, dtype=np.int64),
    window=np.zeros(1, dtype=np.int64),
    tag=[""],
)
FILLER_ROWS = FillerRows()
#: Not in the cache (a cached record may be None: damaged and skipped).
MISSING: Any = object()


class PlannedRows(NamedTuple):
    """The windows of one planned batch: each one's record (`FILLER_ROWS` for filler) and row, the
    dataset it comes from (0 for one dataset), and the (seed, pass) of its random draws when not
    the pass's own (a mix's datasets draw by their own streams: `mixed.MixedRecords.resolve`)."""

    blocks: list[BlockRows]
    rows: list[int]
    sources: list[int]
    draws: list[tuple[int, int] | None]


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
        records: SplitRecords,
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
        # block's records are read once, not per batch; counted in windows, so the memory is the same
        # whatever the records' sizes and however many there are
        largest = int(records.table.windows.max()) if len(records.table) else 1
        self.cache_windows = max(CACHE_WINDOWS, 2 * (mix + 2 * largest))

    def __iter__(self) -> Iterator[tuple[int, PlannedRows]]:
        plan, worker = self.current(), Worker.detect()
        cache = RecordCache(self.cache_windows)
        units: OrderedDict[int, list[int]] = OrderedDict()
        for b in worker_units(len(plan), worker.id, worker.count, self.unit):
            units.setdefault(b // self.unit, []).append(b)
        ordered = list(units.values())
        for u, unit in enumerate(ordered):
            # what the plan says comes next: this unit's records (first unit) and the next unit's
            for ahead in ordered[u : u + 2] if u == 0 else ordered[u + 1 : u + 2]:
                self.prefetch(plan, ahead, cache)
            for b in unit:
                yield plan.first_batch + b, self.windows(plan, b, cache, worker)

    def prefetch(self, plan: RankPlan, batches: list[int], cache: RecordCache) -> None:
        """Ask for the records of `batches` not decoded already, in the order they are read."""
        if not self.records.shards.reads_ahead:
            return  # local files: the page cache reads ahead, so no need to work out which records
        ids = plan.batches[batches].ravel()
        records, _ = self.records.table.locate(self.records.resolve(ids[ids != FILLER])[0])
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
                block = cache.put(record, self.records.read(record, self.policy, report))
            blocks.append(block if block is not None else FILLER_ROWS)
        row_list = [row if block is not FILLER_ROWS else 0 for row, block in zip(rows.tolist(), blocks)]
        source_list = sources.tolist() if sources is not None else [0] * len(blocks)
        draw_list: list[tuple[int, int] | None] = list(draws) if draws is not None else [None] * len(blocks)
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
        ids[ids != FILLER] = self.records.resolve(ids[ids != FILLER])[0]
        hits = np.flatnonzero(((ids >= first[record]) & (ids < first[record + 1])).any(axis=1))
        return int(hits[0]) // self.unit % max(workers, 1) if len(hits) else 0


def _assemble(
    src: Iterable[tuple[int, PlannedRows]],
    window: int,
    max_tag: int,
    rc_prob: float,
    seed: int,
    epoch: EpochState,
    tag_dropout: float = 0.0,
) -> Iterator[dict[str, Any]]:
    """(index, planned rows) -> compact batch with its index, reverse-complemented and with tags
    dropped as every loader does (`stages.reverse_complement`, `stages.tag_dropout`: seeded by seed,
    epoch and the window's key), without a Python object per window: each record's coins come as
    one array (`BlockRows.flips`) and the batch is written by `compact.compact_batch`."""
    pass_draw = (seed, epoch.epoch)
    rc_salts, drop_salts = Salts(flip_salt), Salts(tag_salt)
    for index, planned in src:
        blocks, rows = planned.blocks, planned.rows
        filler = [block is FILLER_ROWS for block in blocks]
        draws = [pass_draw if d is None else d for d in planned.draws]
        keys = [block.keys[row] if not f else "" for block, row, f in zip(blocks, rows, filler)]
        tags = [block.tag[row] for block, row in zip(blocks, rows)]
        if rc_prob > 0:
            salts = [rc_salts[d] for d in draws]
            rc = [
                not f and (rc_prob >= 1 or block.flips(rc_prob, salt)[row])
                for block, row, f, salt in zip(blocks, rows, filler, salts)
            ]
        else:
            rc = [False] * len(blocks)
        if tag_dropout > 0:
            salts = [drop_salts[d] for d in draws]
            tags = [
                tag if f else dropped_tag(tag, key, tag_dropout, salt)
                for tag, key, f, salt in zip(tags, keys, filler, salts)
            ]
            check_tag_room(tags, keys, max_tag)
        batch = compact_batch(
            [block.bases(row) for block, row in zip(blocks, rows)],
            rc,
            tags,
            rc,
            [block.start[row] for block, row in zip(blocks, rows)],
            [block.seq_id[row] for block, row in zip(blocks, rows)],
            keys,
            window,
            max_tag,
        )
        batch["filler"] = np.array(filler, dtype=bool)
        batch["dataset"] = np.array([-1 if f else s for f, s in zip(filler, planned.sources)], dtype=np.int16)
        batch["index"] = index
        yield batch


class Salts(dict):
    """The salt of each (seed, pass) a batch's windows draw by, derived once (`seeds.flip_salt`,
    `seeds.tag_salt`)."""

    def __init__(self, derive: Callable[[int, int], int]):
        super().__init__()
        self.derive = derive

    def __missing__(self, draw: tuple[int, int]) -> int:
        salt = self[draw] = self.derive(*draw)
        return salt


def check_tag_room(tags: list[bytes], keys: list[str], max_tag: int) -> None:
    """A dropped lineage tag can grow (``p__Ab`` -> ``p__None``); prepare leaves room for that since
    lineage dropout exists, a dataset prepared before did not: say so instead of a layout error."""
    for tag, key in zip(tags, keys):
        if len(tag) > max_tag:
            raise OptionError(
                f"window {key}: its control tag after tag dropout ({tag.decode('ascii')!r}, {len(tag)} bytes) "
                f"is longer than the {max_tag} bytes the dataset leaves for tags; prepare the dataset again "
                "with this version (it leaves room for lineage dropout) or set tag_dropout=0"
            )


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


assemble = pipelinefilter(_assemble)
in_order = pipelinefilter(_in_order)
