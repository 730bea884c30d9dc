"""Start-up at scale: the readable many-shard datasets of tools/first_batch.py give the batches a real
copy gives, a rank's plan holds its own share only (filled in chunks, the same ids), and a loader
worker's units of batches come one at a time with the same batches as the listed ones."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tool_module
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds import GenomicWebDataModule
from bionemo_wds.format import read_manifest
from bionemo_wds.load.plan import Consumed, EpochOrder, RecordTable, cut, unit_ranges, worker_batches_from, worker_units
from bionemo_wds.load.splits import Split
from bionemo_wds.storage.store import Store

LAMBDA = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data" / "lambda_phage_NC_001416.fa.gz"
#: The template of the small readable datasets: lambda phage, shards of 4 records of 2 windows of 1,024 tokens.
SEQ, RECORDS, WINDOWS = 1024, 4, 2


ms = tool_module("manifest_scale")
fb = sys.modules["first_batch"]  # what manifest_scale imports


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fb.make_template(tmp_path_factory.mktemp("template") / "lambda", SEQ, RECORDS, WINDOWS, LAMBDA)


def _first_batch(root: Path, **kwargs: Any) -> tuple[GenomicWebDataModule, str]:
    dm = GenomicWebDataModule(str(root), seq_length=SEQ, micro_batch_size=8, **kwargs)
    dm.setup("fit")
    return dm, fb.batch_digest(next(iter(dm.train_dataloader())))


def test_linked_shards_read_as_a_real_copy(tmp_path: Path, template: Path) -> None:
    linked, copied = tmp_path / "linked", tmp_path / "copied"
    assert fb.write_linked(linked, template, 200, ms.SYNTHETIC) == 200
    fb.write_linked(copied, template, 200, link=False)
    shard = template / "train" / "wdshards-000000.tar"
    assert (linked / "train" / "wdshards-000199.tar").samefile(shard)
    assert not (copied / "train" / "wdshards-000199.tar").samefile(shard)
    assert ms.is_synthetic(linked, missing_ok=False) and not ms.is_synthetic(copied, missing_ok=False)
    manifest = read_manifest(linked)  # written by the real writer: accepted, the index file listed
    info = manifest.splits["train"]
    assert len(info.shards) == 200 and info.n_samples == 200 * RECORDS * WINDOWS
    assert info.record_index is not None and info.record_index.records == 200 * RECORDS
    assert {s.sha256 for s in info.shards} == {read_manifest(template).splits["train"].shards[0].sha256}

    got = fb.measure(linked, SEQ, 8, 0, 0, 1)
    dm, want = _first_batch(copied)  # the plain loader on shards that are files of their own
    assert got["batch_sha256"] == want
    assert got["plan_batches"] == 200 * RECORDS * WINDOWS // 8 == len(dm.plans[Split.train])
    assert got["peak_rss_mb"] >= got["base_rss_mb"] > 0 and got["to_first_batch_s"] >= got["setup_fit_s"]
    batch = next(iter(dm.train_dataloader()))
    assert set(np.unique(batch["bases"].numpy())) >= set(b"ACGT")  # bases read, checked (crc32), not filler
    assert (batch["lengths"].numpy() == SEQ - 3).all()
    # rank 0 of 8 starts the epoch where rank 0 of 1 does, and holds an eighth of its batches
    eighth = fb.measure(linked, SEQ, 8, 0, 0, 8)
    assert eighth["batch_sha256"] == want and eighth["plan_batches"] == got["plan_batches"] // 8
    assert fb.measure(linked, SEQ, 8, 2, 0, 1)["batch_sha256"] == want  # through two loader workers


def test_a_rank_of_eight_plans_its_own_share(tmp_path: Path, template: Path) -> None:
    root = tmp_path / "many"
    fb.write_linked(root, template, 500)
    n = 500 * RECORDS * WINDOWS
    plans = []
    for rank in range(8):
        dm = GenomicWebDataModule(str(root), seq_length=SEQ, micro_batch_size=4, dp_rank=rank, dp_size=8)
        dm.setup("fit")
        plan = dm.plan_for(Split.train, 0)
        assert plan.batches.shape == (n // (4 * 8), 4)  # its windows only, not the epoch's
        plans.append(plan.batches.ravel())
    dm1 = GenomicWebDataModule(str(root), seq_length=SEQ, micro_batch_size=4)
    dm1.setup("fit")
    whole = dm1.plan_for(Split.train, 0).batches.ravel()
    np.testing.assert_array_equal(np.concatenate(plans), whole[: len(whole) // 32 * 32])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=60),
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(1, 5),
    st.integers(1, 13),
    st.integers(0, 3),
)
def test_the_plan_filled_in_chunks_is_the_whole_order(
    windows: list[int], dp: int, rank: int, micro: int, fill: int, done: int
) -> None:
    rank %= dp
    table = RecordTable(np.arange(len(windows), dtype=np.int64), np.asarray(windows, dtype=np.int64))
    order = EpochOrder(table, 7, 1, mix=5)
    consumed = [Consumed(dp, micro, min(done, table.n_windows // (dp * micro)))]
    for whole in (False, True):
        runs = cut.remaining_runs(table.n_windows, consumed, whole)
        ranks, _, per_rank = cut.rank_runs(runs, dp, micro, whole)
        want = np.full(per_rank, cut.FILLER, dtype=np.int64)
        found = order(cut.run_positions(ranks[rank]))
        want[: len(found)] = found
        saved = cut._FILL
        try:
            cut._FILL = fill
            got = cut.plan_of_order(order, table.n_windows, rank, dp, micro, consumed, whole)
        finally:
            cut._FILL = saved
        np.testing.assert_array_equal(got.batches.ravel(), want)


@pytest.mark.parametrize("n_batches", [0, 1, 15, 16, 17, 100])
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.parametrize("unit", [1, 4, 16])
def test_units_one_at_a_time_are_the_listed_ones(n_batches: int, workers: int, unit: int) -> None:
    for worker in range(max(workers, 1)):
        listed = worker_units(n_batches, worker, workers, unit)
        ranges = list(unit_ranges(n_batches, worker, workers, unit))
        assert [b for r in ranges for b in r] == listed
        assert all(len({b // unit for b in r}) == 1 for r in ranges)  # whole units, one range each
        for b in range(-1, n_batches + 2):
            for count in (1, 3, 40):
                want = listed[listed.index(b) : listed.index(b) + count] if b in listed else [b]
                assert worker_batches_from(n_batches, worker, workers, unit, b, count) == want


def test_urls_are_url_of_each(tmp_path: Path) -> None:
    rels = ["train/wdshards-000000.tar", "/val/x.tar", "a/b/", ""]
    for root in (str(tmp_path), str(tmp_path) + "/", "https://host/a/"):
        store = Store(root)
        assert store.urls(rels) == [store.url(rel) for rel in rels]


@pytest.mark.parametrize(
    "array",
    [
        np.zeros(5, dtype=[("offset", "<u8"), ("size", "<u4"), ("windows", "<u4"), ("crc32", "<u4")]),
        np.arange(12, dtype=">i4").reshape(3, 4),
        np.zeros(0, np.int64),
        np.array(3.5),
        np.zeros(3, dtype=[("a", "<u8"), ("b", "S3")]),
    ],
    ids=["index rows", "big-endian 2-d", "empty", "0-d", "bytes field"],
)
def test_npy_headers_read_as_numpy_reads_them(tmp_path: Path, array: np.ndarray) -> None:
    from bionemo_wds.storage.mapped import load_npy

    for version in ((1, 0), (2, 0)):
        path = tmp_path / f"a{version[0]}.npy"
        with open(path, "wb") as fh:
            header = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False, "shape": array.shape}
            np.lib.format.write_array_header_1_0(fh, header) if version == (1, 0) else (
                np.lib.format.write_array_header_2_0(fh, header)
            )
            fh.write(array.tobytes())
        got, want = load_npy(str(path)), np.load(path, mmap_mode="r")
        assert got.dtype == want.dtype and got.shape == want.shape and got.offset == want.offset
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_damaged_npy_header_is_numpy_s_error(tmp_path: Path) -> None:
    from bionemo_wds.storage.mapped import load_npy

    path = tmp_path / "bad.npy"
    np.save(path, np.zeros(4, np.int64))
    raw = path.read_bytes()
    for bad in (raw.replace(b"'<i8'", b"'<x8'"), raw.replace(b"'<i8'", b"[(1, "), raw.replace(b"False", b"Maybe")):
        path.write_bytes(bad)
        with pytest.raises(Exception) as want:
            np.load(path, mmap_mode="r")
        with pytest.raises(Exception) as got:
            load_npy(str(path))
        assert type(got.value) is type(want.value)
        assert re.sub(" at 0x[0-9a-f]+", "", str(got.value)) == re.sub(" at 0x[0-9a-f]+", "", str(want.value))
