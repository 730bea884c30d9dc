"""Reading what the epoch plan says: records by their index, windows into the planned batches.

`SplitRecords` knows where every record of a split lies (the manifest's record index, or one built
by scanning the shards of a dataset written before there was one) and reads a record with one
positioned read, checking its crc32 and window count. `PlannedBatches` is the loader's dataset:
each loader worker produces the batches `plan.worker_units` deals it, as lists of `Window` views,
then the same `reverse_complement` and `collate_compact` as every other loader; each batch carries
its index so the main process can put them back in order (`in_order`). A record that fails its
checks raises (naming shard and record) or, under ``handler="warn"``, is counted and its windows are
replaced by filler, so every rank still yields its planned number of batches.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset
from webdataset.filters import pipelinefilter

from bionemo_wds.format import decode_record
from bionemo_wds.format.index import RecordIndex, record_crc32
from bionemo_wds.format.tar import decode_named, iter_record_members
from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.plan import FILLER, UNIT_BATCHES, RankPlan, RecordTable, worker_units
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.stages import BlockRows, Window, collate_compact, reverse_complement
from bionemo_wds.load.world import Worker

#: Records a loader worker keeps decoded (about two mixing blocks of 8 kb windows: ~16 MB).
CACHE_RECORDS = 128


class FillerRows(BlockRows):
    """The one row of every filler window: no bases, no tag."""

    def __init__(self) -> None:  # no record behind it
        self.tokens = np.empty(0, dtype=np.uint8)
        self.offsets, self.seq_id, self.start, self.window, self.tag = [0, 0], [""], [0], [0], [b""]


FILLER_ROWS = FillerRows()


class Unreported:
    """Takes a damaged record's report and drops it: another process reports that record."""

    def bad_record(self, *args: Any) -> None:
        pass

    def bad_checksum(self, *args: Any) -> None:
        pass

    def bad_window_count(self, *args: Any) -> None:
        pass


class SplitRecords:
    """Every record of a split: its shard file, byte range, window count and crc32.

    Damage found here (a shard shorter than its index, one that cannot be read to its end, a window
    count that disagrees with the manifest) goes to the policy once per shard: an error, or under
    ``handler="warn"`` a counted skip whose unreadable records are read as filler.
    """

    def __init__(self, paths: list[str], indexes: list[RecordIndex], damaged: set[int] | None = None):
        self.paths, self.indexes = paths, indexes
        self.table = RecordTable.from_counts([index.windows for index in indexes])
        self.local = np.concatenate(
            [np.arange(len(index), dtype=np.int64) for index in indexes] or [np.empty(0, np.int64)]
        )
        self.damaged = damaged or set()  # record ids read as filler (already reported)
        self._files: dict[int, int] = {}

    @classmethod
    def from_manifest(cls, root: str, split_info: dict[str, Any], policy: ShardErrorPolicy) -> SplitRecords:
        """From the manifest's record index; shards of a dataset without one are scanned once here."""
        paths, indexes, damaged_local = [], [], []
        for number, shard in enumerate(split_info["shards"]):
            path = os.path.join(root, shard["path"])
            paths.append(path)
            index, bad = _shard_index(path, number, shard, policy)
            indexes.append(index)
            damaged_local.append(bad)
        records = cls(paths, indexes)
        first = np.concatenate([[0], np.cumsum([len(index) for index in indexes])]).astype(int)
        records.damaged = {int(first[n]) + r for n, bad in enumerate(damaged_local) for r in bad}
        return records

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": {}}  # descriptors stay in the process that opened them

    def key(self, record: int) -> str:
        """The record's member key, as prepare names it."""
        return f"{int(self.table.shard[record]):06d}-{int(self.local[record]):06d}"

    def read(self, record: int, policy: ShardErrorPolicy, report: bool = True) -> BlockRows | None:
        """The record, decoded and checked; None when it is damaged and the policy skips it (told
        only when `report`: one process reports a record, whichever reads it)."""
        if record in self.damaged:
            return None
        block = self._read(record, policy if report else Unreported())
        if block is None:
            self.damaged.add(record)
        return block

    def _read(self, record: int, policy: ShardErrorPolicy | Unreported) -> BlockRows | None:
        shard, n = int(self.table.shard[record]), int(self.local[record])
        index, path = self.indexes[shard], self.paths[shard]
        try:
            if shard not in self._files:
                self._files[shard] = os.open(path, os.O_RDONLY)
            data = os.pread(self._files[shard], index.size[n], index.offset[n])
            if len(data) != index.size[n]:
                raise OSError(f"read {len(data)} of {index.size[n]} bytes at offset {index.offset[n]}: truncated")
        except OSError as exc:
            policy.bad_record(path, self.key(record), exc)
            return None
        crc = record_crc32(data)
        if crc != index.crc32[n]:
            policy.bad_checksum(path, self.key(record), crc, index.crc32[n])
            return None
        try:
            block = decode_record(data)
        except Exception as exc:
            policy.bad_record(path, self.key(record), exc)
            return None
        if len(block) != index.windows[n]:
            policy.bad_window_count(path, self.key(record), len(block), index.windows[n])
            return None
        return BlockRows(block)

    def close(self) -> None:
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()


def _key(shard: int, record: int) -> str:
    return f"{shard:06d}-{record:06d}"


def _shard_index(
    path: str, number: int, shard: dict[str, Any], policy: ShardErrorPolicy
) -> tuple[RecordIndex, list[int]]:
    """One shard's record index and the records of it that cannot be read (reported to the policy)."""
    if shard.get("records"):
        index = RecordIndex.from_dict(shard["records"])
        size = os.path.getsize(path)
        past = [r for r in range(len(index)) if index.offset[r] + index.size[r] > size]
        if past:
            exc = OSError(
                f"record {_key(number, past[0])} ends at byte {index.offset[past[0]] + index.size[past[0]]}, "
                f"past the end of the file ({size} bytes)"
            )
            policy.damaged_shard(path, exc, _key(number, past[0] - 1) if past[0] else None)
        if sum(index.windows) != shard["n_samples"]:
            policy.check_count(path, sum(index.windows))
        return index, past
    index = RecordIndex()  # a dataset written before the index: scan the shard once
    key = None
    try:
        with open(path, "rb") as fh:
            for key, offset, data in iter_record_members(fh, path):
                index.append(offset, data, len(decode_named(data, key, path)))
    except (OSError, ValueError) as exc:
        policy.damaged_shard(path, exc, key)
        return index, []
    policy.check_count(path, sum(index.windows))
    return index, []


class PlannedBatches(IterableDataset):
    """The dataset of a planned loader: this worker's batches of the current pass, as `Window` lists."""

    def __init__(
        self, records: SplitRecords, policy: ShardErrorPolicy, current: Callable[[], RankPlan], mix: int, micro: int
    ):
        super().__init__()
        self.records, self.policy, self.current = records, policy, current
        # a worker's unit of batches spans a mixing block, so workers mostly read different records
        self.unit = max(UNIT_BATCHES, -(-mix // max(micro, 1)))
        # two mixing blocks of records decoded at once: a unit's records are read once, not per batch
        smallest = int(records.table.windows.min()) if len(records.table) else 1
        self.cache_records = max(CACHE_RECORDS, 2 * -(-mix // max(smallest, 1)) + 2)

    def __iter__(self) -> Iterator[tuple[int, list[Window]]]:
        plan, worker = self.current(), Worker.detect()
        cache: OrderedDict[int, BlockRows | None] = OrderedDict()
        for b in worker_units(len(plan), worker.id, worker.count, self.unit):
            ids = plan.batches[b]
            real = ids != FILLER
            records, rows = self.records.table.locate(ids[real])
            windows, it = [], iter(zip(records.tolist(), rows.tolist()))
            for is_real in real.tolist():
                if not is_real:
                    windows.append(Window(FILLER_ROWS, 0))
                    continue
                record, row = next(it)
                if record in cache:
                    cache.move_to_end(record)
                else:
                    report = self.policy.mode == "raise" or self.reporter(plan, record, worker.count) == worker.id
                    cache[record] = self.records.read(record, self.policy, report)
                    if len(cache) > self.cache_records:
                        cache.popitem(last=False)
                block = cache[record]
                windows.append(Window(block, row) if block is not None else Window(FILLER_ROWS, 0))
            yield plan.first_batch + b, windows

    def reporter(self, plan: RankPlan, record: int, workers: int) -> int:
        """The worker that reports a damaged record: the one producing its first window's batch
        (so a record is counted once however many workers read it)."""
        first = self.records.table.first
        hits = np.flatnonzero(((plan.batches >= first[record]) & (plan.batches < first[record + 1])).any(axis=1))
        return int(hits[0]) // self.unit % max(workers, 1) if len(hits) else 0


def _assemble(
    src: Iterable[tuple[int, list[Window]]], window: int, max_tag: int, rc_prob: float, seed: int, epoch: EpochState
) -> Iterator[dict[str, Any]]:
    """(index, windows) -> compact batch with its index, reverse-complemented as every loader does."""
    flip = reverse_complement(rc_prob, seed, epoch) if rc_prob > 0 else None
    for index, windows in src:
        real = [w for w in windows if w.block is not FILLER_ROWS]
        if flip is not None:
            for _ in flip(iter(real)):  # marks each Window (seeded by seed, epoch and its key)
                pass
        batch = collate_compact(windows, window, max_tag)
        batch["filler"] = np.fromiter((w.block is FILLER_ROWS for w in windows), dtype=bool, count=len(windows))
        batch["keys"] = [k if w.block is not FILLER_ROWS else "" for k, w in zip(batch["keys"], windows)]
        batch["index"] = index
        yield batch


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
