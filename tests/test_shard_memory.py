"""What a rank holds per shard of the dataset stays small: shard entries as columns
(`format.shard_columns`), URL maps as views over them (`load.shard_urls`), a record table without a
copy per record (`load.plan.record_columns`), and each behaves as what it replaced."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tool_module
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds import GenomicWebDataModule
from bionemo_wds.format import read_manifest
from bionemo_wds.format.shard_columns import ShardColumns, ShardInfo, shard_values
from bionemo_wds.load.plan.record_columns import Int64View, RecordShards
from bionemo_wds.load.shard_urls import MISSING, ShardUrls, UrlValues, match_listing, split_sizes
from bionemo_wds.load.splits import Split
from bionemo_wds.storage.store import Store

#: The most bytes a rank may hold per shard it does not read (16 records per shard).
BYTES_PER_SHARD = 300


ms = tool_module("manifest_scale")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Synthetic datasets of 300 and 2,300 shards of 16 records (sparse shard files of their listed size)."""
    out = {}
    for shards in (300, 2300):
        root = tmp_path_factory.mktemp(f"shards{shards}")
        args = ms.parse_args(
            ["--out", str(root), "--shards", str(shards), "--records-per-shard", "16", "--seq-length", "512"]
        )
        ms.write_synthetic(root, args)
        ms.make_sparse_shards(root, read_manifest(root))
        out[shards] = root
    return out


def _held_after_setup(root: Path) -> int:
    """Bytes Python holds after rank 0 of 8 set up `root` (the data module kept alive)."""
    gc.collect()
    tracemalloc.start()
    try:
        dm = GenomicWebDataModule(str(root), seq_length=512, micro_batch_size=8, num_workers=0, dp_rank=0, dp_size=8)
        dm.setup("fit")
        assert len(dm.records[Split.train].table) > 0  # the record table is part of what is held
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        del dm
    finally:
        tracemalloc.stop()
    return held


def test_a_rank_holds_little_per_shard(datasets: dict[int, Path]) -> None:
    small, large = sorted(datasets)
    _held_after_setup(datasets[small])  # imports and first-use caches out of the way
    per_shard = (_held_after_setup(datasets[large]) - _held_after_setup(datasets[small])) / (large - small)
    assert 0 < per_shard < BYTES_PER_SHARD, f"{per_shard:.0f} bytes per shard"


def _entry(n: int, **changes: Any) -> dict[str, Any]:
    entry = {
        "path": f"train/wdshards-{n:06d}.tar",
        "n_samples": 16 + n,
        "n_tokens": 100 * n,
        "bytes": 2**40 + n,
        "sha256": f"{n:064x}",
        "n_records": 4,
    }
    return {**entry, **changes}


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"n_records": None},
        {"sha256": "AB" * 32},
        {"sha256": "not hex"},
        {"bytes": 12.0},
        {"bytes": True},
        {"n_samples": 2**70},
        {"extra_key": [1, 2]},
        {"path": "train/é-000001.tar"},
    ],
)
def test_columns_give_back_the_entries_as_read(changes: dict[str, Any]) -> None:
    entries = [_entry(0), _entry(1, **changes), _entry(2)]
    columns = ShardColumns.from_json(entries)
    old = tuple(ShardInfo.from_json(entry) for entry in entries)
    assert columns == old and tuple(columns) == old and columns[1:] == old[1:] and columns[-1] == old[-1]
    assert columns.to_json() == [shard.to_json() for shard in old]
    for name in ("n_samples", "bytes", "sha256", "n_records"):
        assert list(shard_values(columns, name)) == [entry.get(name) for entry in entries]
        assert [type(getattr(shard, name)) for shard in columns] == [type(e.get(name)) for e in entries]
    assert [columns.position(entry["path"]) for entry in entries] == [0, 1, 2]
    assert columns.position("train/other.tar") is None
    assert ShardColumns.of(old) == columns


def test_urls_and_their_values_are_those_of_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path)
    shards = ShardColumns.from_json([_entry(n) for n in (3, 1, 2)])  # not in sorted order
    urls = ShardUrls(store, shards)
    assert list(urls) == store.urls([shard.path for shard in shards]) == urls[:]
    sizes = UrlValues(store)
    sizes.add("train", shards, np.array([5, -1, 7]))
    assert dict(sizes) == {urls[0]: 5, urls[1]: None, urls[2]: 7} and len(sizes) == 3
    assert sizes.get(store.url("train/wdshards-000009.tar")) is None and "elsewhere" not in sizes
    assert split_sizes(sizes, "train", urls, shards) == [5, None, 7]
    assert split_sizes({urls[1]: 9}, "train", urls, shards) == [shards[0].bytes, 9, shards[2].bytes]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=12))
def test_record_shards_are_those_of_the_counts(counts: list[int]) -> None:
    first = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    want = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    shards = RecordShards(first)
    assert len(shards) == len(want) and shards.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(shards), want)
    assert [int(shards[r]) for r in range(len(want))] == want.tolist()
    for lo in range(len(want) + 1):
        np.testing.assert_array_equal(shards[lo : lo + 3], want[lo : lo + 3])
    picks = np.arange(len(want))[::-1]
    np.testing.assert_array_equal(shards[picks], want[picks])
    np.testing.assert_array_equal(shards + 5, want + 5)


def test_an_int64_view_reads_a_narrow_column_as_int64() -> None:
    base = np.array([3, 0, 4_000_000_000], dtype="<u4")
    view = Int64View(base)
    assert view.dtype == np.int64 and len(view) == 3 and int(view.sum()) == 4_000_000_003
    assert view[np.array([2, 0])].dtype == np.int64 and view[1:].tolist() == [0, 4_000_000_000]
    assert np.cumsum(view)[-1] == 4_000_000_003 and int(view.max()) == 4_000_000_000


def test_a_listing_matched_in_numpy_is_the_listing_matched_by_name() -> None:
    shards = ShardColumns.from_json([_entry(n) for n in (3, 1, 2, 7)])
    names = ["wdshards-000002.tar", "stray.tar", "wdshards-000003.tar", "wdshards-000001.tar"]
    matched = match_listing(shards.paths, "train/", names, [20, 5, 30, 10])
    assert matched is not None
    found, unlisted = matched
    assert found.tolist() == [30, 10, 20, MISSING] and unlisted == ["stray.tar"]
    assert match_listing(shards.paths, "train/", [], []) is not None
    assert match_listing(shards.paths, "val/", names, [20, 5, 30, 10]) is None  # paths elsewhere: by name
    assert match_listing(ShardColumns.from_json([_entry(1, path="train/a/b.tar")]).paths, "train/", [], []) is None
