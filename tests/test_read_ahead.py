"""The remote reader's read-ahead with small records: a mixing block whose records do not fit the
shards' read-ahead limit is asked for in slices that do, so every record is fetched once, ahead of
its batch, and the batches are those of the local disk."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import servers
import torch
from conftest import KLEBSIELLA, tool_module

from bionemo_wds.format import read_manifest
from bionemo_wds.format.record_index import INDEX_DTYPE
from bionemo_wds.format.split_index_file import SplitIndex
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.plan import RecordTable, rank_plan, worker_units
from bionemo_wds.load.plan.modes import one_table
from bionemo_wds.load.reader import READ_AHEAD_RECORDS, PlannedBatches
from bionemo_wds.load.records import SourceRecords
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.splits import Split
from bionemo_wds.prepare import PrepareOptions, prepare

pytest.importorskip("aiohttp")

http_server = servers.http_server


def read_traffic() -> Any:
    return tool_module("read_traffic")


def synthetic(windows_per_record: int, records: int = 3000, per_shard: int = 4) -> tuple[RecordTable, SplitIndex]:
    """`records` records of `windows_per_record` windows, `per_shard` to a shard, laid out as in a tar."""
    rows = np.zeros(records, INDEX_DTYPE)
    rows["windows"] = windows_per_record
    rows["size"] = 1000 * windows_per_record
    rows["offset"] = 512 + (np.arange(records) % per_shard) * (rows["size"].astype(np.int64) + 1024)
    shards = np.arange(records) // per_shard
    first = np.searchsorted(shards, np.arange(shards[-1] + 2)).astype(np.int64)
    return RecordTable(shards.astype(np.int64), rows["windows"].astype(np.int64)), SplitIndex(rows, first)


@pytest.mark.parametrize("windows_per_record", [1, 3, 16])
def test_every_record_is_fetched_once_and_ahead(windows_per_record):
    table, index = synthetic(windows_per_record)
    traffic = read_traffic()
    micro, mix = 8, 1000
    ids = rank_plan("exact", one_table(table, 4, 0, 1, micro, mix=mix), 0).batches.ravel()
    shards = traffic.RecordingShards(traffic.RecordingStore("/"), [f"s{n}" for n in range(len(index.first) - 1)])
    result = traffic.reader_traffic(ids, table, index, len(index.first) - 1, micro, mix, shards=shards)
    sent = [s[:3] for s in shards.store.sent]
    read = set(table.locate(ids)[0].tolist())
    assert len(sent) == len(set(sent)) == len(read)  # each record read, fetched once
    assert result["ahead_share"] == 1.0  # all of them by the read-ahead
    # what each read-ahead call asked for fits half the shards' limit
    assert max(len(set(call)) for call in shards.calls) <= READ_AHEAD_RECORDS


@pytest.mark.parametrize("windows_per_record", [1, 2, 16])
def test_slices_hold_at_most_half_the_read_ahead(windows_per_record):
    """A slice of batches asked for at once touches at most READ_AHEAD_RECORDS records (counted on
    the plan), unless it is a whole unit, as before."""
    table, index = synthetic(windows_per_record)
    records = SourceRecords([traffic_records(table, index)], [ShardErrorPolicy("raise")], [0])
    micro, mix = 8, 1000
    plan = rank_plan("exact", one_table(table, 4, 0, 1, micro, mix=mix), 0)
    reader = PlannedBatches(records, ShardErrorPolicy("raise"), lambda: plan, mix, micro)
    mine = worker_units(len(plan), 0, 1, reader.unit)
    step = reader.slice_batches
    touched = [
        len(set(table.locate(plan.batches[mine[i : i + step]].ravel())[0].tolist())) for i in range(0, len(mine), step)
    ]
    if step == reader.unit:
        assert windows_per_record == 16
    assert max(touched) <= READ_AHEAD_RECORDS


def traffic_records(table: RecordTable, index: SplitIndex) -> Any:
    traffic = read_traffic()
    shards = traffic.RecordingShards(traffic.RecordingStore("/"), [f"s{n}" for n in range(len(index.first) - 1)])
    return traffic.UnreadRecords(shards, index, table=table)


@pytest.mark.slow
def test_small_records_over_http_equal_local_disk_each_fetched_once(tmp_path, http_server):
    root = tmp_path / "small"
    opts = PrepareOptions(seq_length=1024, stride=1000, samples_per_shard=64, windows_per_record=2, progress=False)
    prepare([KLEBSIELLA], root, opts)
    server = http_server(root)

    def epoch(where: str) -> tuple[list[dict[str, Any]], set[int]]:
        """The epoch's batches, and the records its plan reads."""
        dm = GenomicWebDataModule(where, micro_batch_size=8, seed=5)
        dm.setup("fit")
        batches = list(dm.train_dataloader())
        ids = dm.plans[Split.train].batches
        return batches, set(dm.records[Split.train].table.locate(ids[ids >= 0])[0].tolist())

    local, _ = epoch(str(root))
    server.requests.clear()
    remote, records = epoch(server.url)
    assert len(remote) == len(local) > 0
    for got, want in zip(remote, local):
        assert list(got["keys"]) == list(want["keys"])
        for key, value in want.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got[key], value), key
    ranged = [r for r in server.requests if r[0] == "GET" and r[1].endswith(".tar") and r[2] is not None]
    first = np.concatenate([[0], np.cumsum([s.n_samples for s in read_manifest(str(root)).splits["train"].shards])])
    assert len(first) > 60  # many shards, records of 2 windows: a mixing block holds ~500 records
    assert len(ranged) == len({(r[1], r[2]) for r in ranged}) == len(records)  # each record read, fetched once
