"""Format version 4: the record index of each split in one file, ``<split>/record-index.npy``.

What prepare writes (numpy.save's bytes of every shard's index, listed in the manifest, written
before it), that loading it gives exactly the batches of the same data as version 3 (and 1) gave,
that the local file is memory-mapped, and that a missing, truncated or changed file is a clear
error naming it, at load and in `verify`. The remote read is in test_remote.py.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import KLEBSIELLA, as_format_version_1, as_format_version_3, edit_record_index, record_index_rows

from bionemo_wds.cli.main import main
from bionemo_wds.format import (
    INDEX_DTYPE,
    file_sha256,
    index_shard,
    read_manifest,
    read_split_index,
    shard_indexes,
    write_manifest,
)
from bionemo_wds.format.manifest import ManifestError
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.shard_errors import CorruptShardError
from bionemo_wds.load.splits import Split
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.report import verify
from bionemo_wds.storage.store import Store

OPTS = dict(seq_length=1024, stride=1000, samples_per_shard=300, windows_per_record=4, progress=False, workers=1)
INDEX = "train/record-index.npy"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A prepared dataset (16 train shards, 2 val, 2 test); never modified."""
    out = tmp_path_factory.mktemp("index_file") / "ds"
    prepare([KLEBSIELLA], out, PrepareOptions(**OPTS))
    return out


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    dst = tmp_path / "ds"
    shutil.copytree(pristine, dst)
    return dst


def batches(root: Path, split: str = "train", **kw: Any) -> list[dict[str, Any]]:
    dm = GenomicWebDataModule(str(root), **{"micro_batch_size": 16, "seed": 3, "num_workers": 0, **kw})
    dm.setup("fit")
    return list(dm.train_dataloader() if split == "train" else dm.val_dataloader())


def assert_same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for key, value in w.items():
            np.testing.assert_array_equal(np.asarray(g[key]), np.asarray(value), err_msg=key)


# --- what prepare writes ----------------------------------------------------------------------------


def test_prepare_writes_each_splits_index_file_before_the_manifest(tmp_path, monkeypatch):
    from bionemo_wds.format import manifest as manifest_module

    out = tmp_path / "ds"
    written = []
    real = manifest_module.write_record_index

    def spy(store: Store, split: str, indexes: Any) -> dict[str, Any]:
        assert not (out / "manifest.json").exists()  # the index first: the manifest names only what exists
        written.append(split)
        return real(store, split, indexes)

    monkeypatch.setattr(manifest_module, "write_record_index", spy)
    prepare([KLEBSIELLA], out, PrepareOptions(**OPTS))
    manifest = read_manifest(out)
    assert manifest.format_version == 6 and written == list(manifest.splits) == ["train", "val", "test"]
    for split, info in manifest.splits.items():
        entry = info.record_index
        data = (out / entry.path).read_bytes()
        # every shard's index as its shard file gives it, in shard order, saved as numpy.save saves it
        rows = np.concatenate([index_shard(out / shard.path)[2].rows for shard in info.shards])
        saved = io.BytesIO()
        np.save(saved, rows)
        assert data == saved.getvalue() and np.load(io.BytesIO(data)).dtype == INDEX_DTYPE == rows.dtype
        header = len(data) - len(rows) * 20  # 20 bytes per record after a header padded to 64 bytes
        assert INDEX_DTYPE.itemsize == 20 and header % 64 == 0 and header <= 256
        assert entry is not None and entry.to_json() == {
            "path": f"{split}/record-index.npy",
            "records": len(rows),
            "bytes": len(data),
            "sha256": file_sha256(out / entry.path)[1],
        }
        assert [shard.n_records for shard in info.shards] == [
            len(index_shard(out / shard.path)[2]) for shard in info.shards
        ]
    assert verify(out, progress=False).ok


def test_rewriting_a_manifest_as_read_leaves_the_index_files_alone(root):
    before = {p: p.read_bytes() for p in root.glob("*/record-index.npy")}
    manifest = read_manifest(root)
    manifest.request["note"] = "edited"  # a dict in the (frozen) manifest
    write_manifest(root / "manifest.json", manifest)
    assert read_manifest(root) == manifest and '"records":' not in json.dumps(
        manifest.to_json()["splits"]["train"]["shards"]
    )
    assert {p: p.read_bytes() for p in root.glob("*/record-index.npy")} == before


@pytest.mark.parametrize("missing", ["splits.train.record_index", "splits.val.shards[1].n_records"])
def test_a_version_4_manifest_without_its_index_entries_is_refused(root, missing):
    manifest = json.loads((root / "manifest.json").read_text())
    if missing.endswith("record_index"):
        del manifest["splits"]["train"]["record_index"]
    else:
        del manifest["splits"]["val"]["shards"][1]["n_records"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=re.escape(f"it has no {missing} (prepare the dataset again)")):
        read_manifest(root)


# --- reading it -----------------------------------------------------------------------------------


def test_versions_4_3_and_1_give_the_same_batches(root, tmp_path):
    v3, v1 = tmp_path / "v3", tmp_path / "v1"
    shutil.copytree(root, v3)
    shutil.copytree(root, v1)
    as_format_version_3(v3)
    as_format_version_1(v1)
    assert read_manifest(v3).format_version == 3 and not list(v3.glob("*/record-index.npy"))
    for split in ("train", "val"):
        want = batches(root, split)
        assert_same(batches(v3, split), want)
        assert_same(batches(v1, split), want)  # the index built by scanning the shards
    for split in ("train", "val", "test"):
        assert shard_indexes(Store(v3), read_manifest(v3), split) == shard_indexes(
            Store(root), read_manifest(root), split
        )
    assert shard_indexes(Store(v1), read_manifest(v1), "train") is None


def test_the_local_index_file_is_memory_mapped_and_pickled_as_a_mapping(root):
    index = read_split_index(Store(root), read_manifest(root), "train")
    assert index is not None and isinstance(index.rows, np.memmap) and not index.rows.flags.writeable
    dm = GenomicWebDataModule(str(root), micro_batch_size=16, num_workers=0)
    dm.setup("fit")
    records = dm.records[Split.train]
    assert isinstance(records.index.rows, np.memmap)
    data = pickle.dumps(records)  # what a spawned loader worker receives: the file's name, not its rows
    assert len(data) < records.index.rows.nbytes
    again = pickle.loads(data)
    assert isinstance(again.index.rows, np.memmap) and np.array_equal(again.index.rows, records.index.rows)
    assert again.span(len(again.table) - 1) == records.span(len(records.table) - 1)


def test_the_index_file_is_no_stray_shard_and_overwrite_replaces_it(root, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "ignoring file(s) not listed" warning
        GenomicWebDataModule(str(root), micro_batch_size=16).setup("fit")
    assert main(["inspect", str(root)]) == 0
    entry = read_manifest(root).splits["train"].record_index
    assert f"record index: train/record-index.npy {entry.bytes / 1000:.1f} kB ({entry.records:,} records)" in (
        capsys.readouterr().out
    )
    result = prepare([KLEBSIELLA], root, PrepareOptions(**{**OPTS, "windows_per_record": 2}, overwrite=True))
    assert result.status == "written" and verify(root, progress=False).ok
    rows = np.load(root / INDEX)
    assert len(rows) == result.manifest.splits["train"].record_index.records and rows["windows"].max() == 2


# --- a damaged index file ---------------------------------------------------------------------------


def setup_error(root: Path) -> str:
    with pytest.raises(ManifestError) as info:
        GenomicWebDataModule(str(root), micro_batch_size=16).setup("fit")
    return str(info.value)


def test_a_truncated_index_file_is_named_at_load_and_by_verify(root, capsys):
    path = root / INDEX
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size - 20)  # one record fewer
    message = setup_error(root)
    assert message == (
        f"{path} has {size - 20} bytes, but the manifest lists {size}: the record index file is truncated or "
        "replaced (run `bionemo-wds verify`, or prepare the dataset again)"
    )
    report = verify(root, progress=False)
    assert report.problems == [f"{message}; the train split's records are checked without it"]
    assert main(["verify", str(root), "--quiet"]) == 1
    assert f"{path} has {size - 20} bytes" in capsys.readouterr().err


def test_a_missing_index_file_is_named(root):
    (root / INDEX).unlink()
    message = setup_error(root)
    assert message.startswith(f"{root / INDEX} is missing: the manifest lists it as the record index of its split")
    assert verify(root, progress=False).problems == [f"{message}; the train split's records are checked without it"]


def test_a_changed_index_file_fails_verify_and_the_record_it_describes(root):
    """One crc32 changed in place (same size): verify names the file (its sha256) and the record;
    the loader reads the file unhashed (memory-mapped) and fails on that record."""
    listed = read_manifest(root).splits["train"].record_index.sha256
    old = edit_record_index(root, "train", 3, 2, "crc32", 12345)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"]["train"]["record_index"]["sha256"] = listed  # the manifest as written
    (root / "manifest.json").write_text(json.dumps(manifest))
    sha = file_sha256(root / INDEX)[1]
    report = verify(root, progress=False)
    assert report.problems == [
        f"{root / INDEX}: sha256 {sha[:12]}... differs from the manifest's {listed[:12]}...: the record index file "
        "changed after it was written",
        f"train/wdshards-000003.tar: record 000003-000002 fails its crc32 check ({old:08x}, the record index says "
        f"{12345:08x})",
    ]
    dm = GenomicWebDataModule(str(root), micro_batch_size=16)
    dm.setup("fit")
    with pytest.raises(CorruptShardError, match=r"record 000003-000002 of shard .* fails its crc32 check"):
        list(dm.train_dataloader())


def test_an_index_file_of_other_rows_than_the_manifest_lists_is_named(root):
    rows = record_index_rows(root, "train")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["n_records"] -= 1  # the shards' counts no longer add up to the file
    (root / "manifest.json").write_text(json.dumps(manifest))
    total = sum(len(r) for r in rows)
    message = setup_error(root)
    assert message == (
        f"{root / INDEX} holds {total} records, but the manifest lists {total - 1} and {total} "
        "(record_index.records, the shards' n_records): the record index file disagrees with the manifest "
        "(run `bionemo-wds verify`, or prepare again)"
    )
    assert f"{message}; the train split's records are checked without it" in verify(root, progress=False).problems


def test_a_file_that_is_no_record_index_is_named(root):
    path = root / INDEX
    size = path.stat().st_size
    np.save(path, np.zeros((size - 128) // 8, dtype="<u8"))  # a valid .npy of the same size, of other rows
    assert path.stat().st_size == size
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"]["train"]["record_index"]["sha256"] = file_sha256(path)[1]
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert setup_error(root).startswith(f"{path} is damaged: it holds an array of uint64")
    path.write_bytes(b"x" * size)
    manifest["splits"]["train"]["record_index"]["sha256"] = file_sha256(path)[1]
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert setup_error(root).startswith(f"{path} is damaged: it is not a record index file (")
