"""Reading what the epoch plan says: records by their index, windows into the planned batches.

`split_records.SplitRecords` knows where every record of a split lies (the dataset's record index,
or one built by scanning the shards of a dataset written before there was one) and reads a record
with one positioned read, checking its crc32 and window count. `PlannedBatches` is the loader's dataset:
each loader worker produces the batches `plan.worker_units` deals it, as lists of `Window` views,
then the same `reverse_complement` and `collate_compact` as every other loader; each batch carries
its index so the main process can put them back in order (`in_order`). A record that fails its
checks raises (naming shard and record) or, under ``handler="warn"``, is counted and its windows are
replaced by filler, so every rank still yields its planned number of batches.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset
from webdataset.filters import pipelinefilter

from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.plan import FILLER, UNIT_BATCHES, RankPlan, worker_units
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.split_records import SplitRecords
from bionemo_wds.load.stages import BlockRows, Window, collate_compact, reverse_complement
from bionemo_wds.load.stages import tag_dropout as tag_dropout_stage
from bionemo_wds.load.world import Worker

#: Records a loader worker keeps decoded (about two mixing blocks of 8 kb windows: ~16 MB).
CACHE_RECORDS = 128


class FillerRows(BlockRows):
    """The one row of every filler window: no bases, no tag."""

    def __init__(self) -> None:  # no record behind it
        self.tokens = np.empty(0, dtype=np.uint8)
        self.offsets, self.seq_id, self.start, self.window, self.tag = [0, 0], [""], [0], [0], [b""]


FILLER_ROWS = FillerRows()


class PlannedBatches(IterableDataset):
    """The dataset of a planned loader: this worker's batches of the current pass, as `Window` lists."""

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
        # two mixing blocks of records decoded at once: a unit's records are read once, not per batch
        smallest = int(records.table.windows.min()) if len(records.table) else 1
        self.cache_records = max(CACHE_RECORDS, 2 * -(-mix // max(smallest, 1)) + 2)

    def __iter__(self) -> Iterator[tuple[int, list[Window]]]:
        plan, worker = self.current(), Worker.detect()
        cache: OrderedDict[int, BlockRows | None] = OrderedDict()
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

    def prefetch(self, plan: RankPlan, batches: list[int], cache: OrderedDict[int, BlockRows | None]) -> None:
        """Ask for the records of `batches` not decoded already, in the order they are read."""
        if not self.records.shards.reads_ahead:
            return  # local files: the page cache reads ahead, so no need to work out which records
        ids = plan.batches[batches].ravel()
        records, _ = self.records.table.locate(self.records.resolve(ids[ids != FILLER])[0])
        self.records.prefetch([r for r in dict.fromkeys(records.tolist()) if r not in cache])

    def windows(
        self, plan: RankPlan, b: int, cache: OrderedDict[int, BlockRows | None], worker: Worker
    ) -> list[Window]:
        """The windows of batch `b` of the plan (filler where the plan or a damaged record says so)."""
        ids = plan.batches[b]
        real = ids != FILLER
        found, sources, draws = self.records.resolve(ids[real])
        records, rows = self.records.table.locate(found)
        windows, it = [], iter(enumerate(zip(records.tolist(), rows.tolist())))
        source_of = sources.tolist() if sources is not None else None
        for is_real in real.tolist():
            if not is_real:
                windows.append(Window(FILLER_ROWS, 0))
                continue
            n, (record, row) = next(it)
            if record in cache:
                cache.move_to_end(record)
            else:
                report = self.policy.mode == "raise" or self.reporter(plan, record, worker.count) == worker.id
                cache[record] = self.records.read(record, self.policy, report)
                if len(cache) > self.cache_records:
                    cache.popitem(last=False)
            block = cache[record]
            window = Window(block, row) if block is not None else Window(FILLER_ROWS, 0)
            if source_of is not None and draws is not None and block is not None:
                window.source, window.draw = source_of[n], draws[n]
            windows.append(window)
        return windows

    def reporter(self, plan: RankPlan, record: int, workers: int) -> int:
        """The worker that reports a damaged record: the one producing its first window's batch
        (so a record is counted once however many workers read it)."""
        first, ids = self.records.table.first, plan.batches.copy()
        ids[ids != FILLER] = self.records.resolve(ids[ids != FILLER])[0]
        hits = np.flatnonzero(((ids >= first[record]) & (ids < first[record + 1])).any(axis=1))
        return int(hits[0]) // self.unit % max(workers, 1) if len(hits) else 0


def _assemble(
    src: Iterable[tuple[int, list[Window]]],
    window: int,
    max_tag: int,
    rc_prob: float,
    seed: int,
    epoch: EpochState,
    tag_dropout: float = 0.0,
) -> Iterator[dict[str, Any]]:
    """(index, windows) -> compact batch with its index, reverse-complemented and with tags dropped
    as every loader does (both seeded by seed, epoch and the window's key)."""
    marks = [
        *([reverse_complement(rc_prob, seed, epoch)] if rc_prob > 0 else []),
        *([tag_dropout_stage(tag_dropout, seed, epoch)] if tag_dropout > 0 else []),
    ]
    for index, windows in src:
        real = [w for w in windows if w.block is not FILLER_ROWS]
        for mark in marks:
            for _ in mark(iter(real)):  # marks each Window in place
                pass
        if tag_dropout > 0:
            check_tag_room(real, max_tag)
        batch = collate_compact(windows, window, max_tag)
        batch["filler"] = np.fromiter((w.block is FILLER_ROWS for w in windows), dtype=bool, count=len(windows))
        batch["keys"] = [k if w.block is not FILLER_ROWS else "" for k, w in zip(batch["keys"], windows)]
        batch["dataset"] = np.fromiter(
            (w.source if w.block is not FILLER_ROWS else -1 for w in windows), dtype=np.int16, count=len(windows)
        )
        batch["index"] = index
        yield batch


def check_tag_room(windows: list[Window], max_tag: int) -> None:
    """A dropped lineage tag can grow (``p__Ab`` -> ``p__None``); prepare leaves room for that since
    lineage dropout exists, a dataset prepared before did not: say so instead of a layout error."""
    for w in windows:
        if len(w.tag) > max_tag:
            raise ValueError(
                f"window {w.key}: its control tag after tag dropout ({w.tag.decode('ascii')!r}, {len(w.tag)} bytes) "
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
