"""tools/shuffle_quality.py --plan: its statistics against brute-force counts on a small synthetic
record index, its plan against the data module's, and its request counts against the ranges the
records lie in."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from typing import Any

import numpy as np
import pytest
from conftest import tool_module

from bionemo_wds import GenomicWebDataModule
from bionemo_wds.format.record_index import INDEX_DTYPE
from bionemo_wds.format.split_index_file import SplitIndex
from bionemo_wds.load.plan import RecordTable
from bionemo_wds.load.splits import Split

#: Shards of the synthetic record index (about 3,900 windows).
SHARDS = 200


sq = tool_module("shuffle_quality")
traffic = tool_module("read_traffic")


@pytest.fixture(scope="module")
def synthetic() -> tuple[RecordTable, SplitIndex, int]:
    """SHARDS shards of 1-5 records of 1-12 windows, laid out as a tar lays members out."""
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 6, size=SHARDS)
    rows = np.zeros(int(counts.sum()), INDEX_DTYPE)
    rows["windows"] = rng.integers(1, 13, size=len(rows))
    rows["size"] = rows["windows"] * 1100 + rng.integers(0, 512, size=len(rows))
    r = 0
    for n in counts.tolist():
        offset = 512
        for _ in range(n):
            rows[r]["offset"] = offset
            offset += -(-int(rows[r]["size"]) // 512) * 512 + 512
            r += 1
    index = SplitIndex(rows, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    table = RecordTable(np.repeat(np.arange(SHARDS), counts).astype(np.int64), rows["windows"].astype(np.int64))
    return table, index, SHARDS


def args_of(**kw: Any) -> Any:
    return sq.parse_args(["unused", "--plan", *[f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]])


def brute_stats(ids: list[int], table: RecordTable, micro: int) -> dict[str, float]:
    """The statistics by Python loops over the windows' (record, shard), found by walking the table."""
    record_of, shard_of = [], []
    for record, (shard, windows) in enumerate(zip(table.shard.tolist(), table.windows.tolist())):
        record_of += [record] * windows
        shard_of += [shard] * windows
    n = len(record_of)
    steps = sorted(abs(b - a) / n for a, b in itertools.pairwise(ids))
    mid = len(steps) // 2
    median = steps[mid] if len(steps) % 2 else (steps[mid - 1] + steps[mid]) / 2
    groups = [ids[i : i + 1000] for i in range(0, len(ids) - 999, 1000)]
    batches = [ids[i : i + micro] for i in range(0, len(ids) - micro + 1, micro)]
    return {
        "mean_step": sum(steps) / len(steps),
        "median_step": median,
        "shards_per_1000": sum(len({shard_of[i] for i in g}) for g in groups) / len(groups),
        "records_per_batch": sum(len({record_of[i] for i in b}) for b in batches) / len(batches),
    }


@pytest.mark.parametrize("world", [1, 3])
def test_orders_and_statistics_match_brute_force(synthetic, world):
    table, _, n_shards = synthetic
    args = args_of(samples=0, micro_batch_size=4, shuffle_buffer=50, seed=5, wds_shard_buffer=10, wds_buffer=100)
    first = sq.shard_first_windows(table, n_shards)
    for rank in range(world):
        mine = [s for s in range(n_shards)][rank::world]
        mine_windows = sorted(w for s in mine for w in range(int(first[s]), int(first[s + 1])))
        wds, opened = sq.webdataset_order(first, args, rank, world)
        local = sq.shard_local(first, args, rank, world)
        assert opened == len(mine)
        assert sorted(wds.tolist()) == mine_windows  # every window of the rank's shards once
        assert sorted(local.tolist()) == sorted(
            w
            for s in sorted(set(np.searchsorted(first, local, side="right") - 1))
            for w in range(first[s], first[s + 1])
        )
        shard_run = (np.searchsorted(first, local, side="right") - 1).tolist()
        assert sum(a != b for a, b in itertools.pairwise(shard_run)) == len(set(shard_run)) - 1  # shards whole
        ours = sq.ours(table, args, rank, world)
        for ids in (ours, wds, local):
            got, want = sq.order_stats(ids, table, 4), brute_stats(ids.tolist(), table, 4)
            for key, value in want.items():
                assert got[key] == pytest.approx(value), key


def test_our_order_is_the_data_modules_plan(kleb_1024, tmp_path):
    table, _, n_shards = sq.load_split(kleb_1024)
    args = args_of(samples=0, micro_batch_size=8, shuffle_buffer=256, seed=3)
    for rank in range(2):
        dm = GenomicWebDataModule(
            str(kleb_1024), micro_batch_size=8, seed=3, shuffle_buffer=256, dp_rank=rank, dp_size=2
        )
        dm.setup("fit")
        plan = dm.plan_for(Split.train, 0).batches.ravel()
        assert sq.ours(table, args, rank, 2).tolist() == plan.tolist()
    out = tmp_path / "out.txt"
    with open(out, "w") as fh, contextlib.redirect_stdout(fh):
        sq.main([str(kleb_1024), "--plan", "--world", "1", "2", "--samples", "2000", "--json"])
    result = json.loads(out.read_text().splitlines()[-1])
    assert result["shards"] == n_shards and set(result["worlds"]) == {"1", "2"}
    assert set(result["worlds"]["2"]) == set(sq.ORDERS)


def brute_merged(calls: list[list[tuple[int, int, int]]], gap: int) -> int:
    """Requests after merging: a new range joins the previous one of its call when the previous
    new range of the call (by shard and offset) is of the same shard and ends at most `gap` before."""
    seen: set[tuple[int, int, int]] = set()
    total = 0
    for call in calls:
        new = [k for k in dict.fromkeys(call) if k not in seen]
        seen |= set(new)
        new.sort()
        total += sum(
            1 for i, k in enumerate(new) if i == 0 or new[i - 1][0] != k[0] or k[1] - sum(new[i - 1][1:]) > gap
        )
    return total


def test_reader_requests_cover_every_record_read(synthetic):
    table, index, n_shards = synthetic
    args = args_of(samples=0, micro_batch_size=4, shuffle_buffer=40, seed=2)
    ids = sq.ours(table, args, 0, 1)
    store = traffic.RecordingStore("/")
    shards = traffic.RecordingShards(store, [f"s{n}" for n in range(n_shards)])
    result = traffic.reader_traffic(ids, table, index, n_shards, 4, 40, shards=shards)
    records = sorted(set(table.locate(ids[: len(ids) // 4 * 4])[0].tolist()))
    spans = {(f"s{int(table.shard[r])}", int(index.rows[r]["offset"]), int(index.rows[r]["size"])) for r in records}
    sent = [s[:3] for s in store.sent]
    assert set(sent) == spans  # every record read was asked for, nothing else
    assert result["requests_per_1000"] == pytest.approx(len(sent) * 1000 / (len(ids) // 4 * 4))
    assert traffic.merged_requests(shards.calls) == brute_merged(shards.calls, traffic.COALESCE_GAP)
    # a shard's records in order, in one call: one request per shard
    calls = [
        [
            (s, int(index.rows[r]["offset"]), int(index.rows[r]["size"]))
            for r in range(len(table))
            if table.shard[r] == s
        ]
        for s in range(n_shards)
    ]
    random.Random(0).shuffle(calls[0])
    assert traffic.merged_requests(calls) == n_shards
