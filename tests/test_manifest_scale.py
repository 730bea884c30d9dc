"""tools/manifest_scale.py writes valid manifests, and the faster read and set-up path of large
manifests gives exactly what the plain one gave (values, tables and error messages)."""

from __future__ import annotations

import fnmatch
import gc
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tool_module

from bionemo_wds import GenomicWebDataModule
from bionemo_wds.format import MANIFEST_NAME, RecordIndex, read_manifest, shard_indexes, unlisted_shards
from bionemo_wds.format.manifest import ManifestError, dumps_manifest
from bionemo_wds.format.record_index import COLUMNS, INDEX_DTYPE, paused_gc
from bionemo_wds.format.sequence_table import read_sequence_table, table_problems
from bionemo_wds.load.manifest_checks import open_dataset, read_checked_manifest
from bionemo_wds.load.plan import RecordTable, train_plan
from bionemo_wds.load.records import SplitRecords
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.splits import Split
from bionemo_wds.storage.store import Store

ms = tool_module("manifest_scale")


def _write(root: Path, *extra: str) -> Any:
    args = ms.parse_args(["--out", str(root), *extra])
    ms.write_synthetic(root, args)
    return args


@pytest.mark.parametrize("version", ["6", "4", "3"])
@pytest.mark.parametrize(
    "extra",
    [
        ("--shards", "7", "--val-shards", "3", "--records-per-shard", "5"),
        ("--shards", "4", "--records-per-shard", "1", "--windows-per-record", "3"),
        ("--shards", "2", "--val-shards", "1", "--records-per-shard", "0"),
    ],
)
def test_synthetic_manifest_is_what_prepare_writes(tmp_path: Path, extra: tuple[str, ...], version: str) -> None:
    _write(tmp_path, *extra, "--format-version", version)
    text = (tmp_path / MANIFEST_NAME).read_text()
    manifest = read_manifest(tmp_path)  # accepted: format, version, every required key
    assert manifest.format_version == int(version)
    assert dumps_manifest(manifest.to_json()) == text  # streamed shard by shard, byte for byte the writer's text
    if version == "6":  # the names in the sequence table alone, which agrees with the splits
        assert '"seq_ids"' not in text
        assert table_problems(read_sequence_table(tmp_path, manifest), manifest) == []
    for split, info in manifest.splits.items():
        assert info.n_samples == sum(shard.n_samples for shard in info.shards)
        indexes = shard_indexes(Store(tmp_path), manifest, split)
        assert indexes is not None
        if version != "3":  # the file `write_manifest` writes: numpy.save's bytes of every shard's rows
            entry, rows = info.record_index, np.concatenate([index.rows for index in indexes])
            saved = io.BytesIO()
            np.save(saved, rows.astype(INDEX_DTYPE))
            assert (tmp_path / entry.path).read_bytes() == saved.getvalue()
            assert entry is not None and entry.to_json() == {
                "path": f"{split}/record-index.npy",
                "records": len(rows),
                "bytes": len(saved.getvalue()),
                "sha256": hashlib.sha256(saved.getvalue()).hexdigest(),
            }
        else:
            assert not list(tmp_path.glob("*/record-index.npy"))
        for shard, index in zip(info.shards, indexes):
            assert index is not None and int(index.windows.sum()) == shard.n_samples
            ends = (index.offset + index.size).tolist()
            assert all(end <= shard.bytes for end in ends)
            assert all(a + 512 <= b for a, b in zip(ends, index.offset[1:].tolist()))  # a tar header between records


def _old_table(indexes: list[RecordIndex]) -> tuple[RecordTable, np.ndarray]:
    """What `SplitRecords.__init__` built before: `RecordTable.from_counts` and one arange per shard."""
    table = RecordTable.from_counts([index.windows.tolist() for index in indexes])
    local = np.concatenate([np.arange(len(index), dtype=np.int64) for index in indexes] or [np.empty(0, np.int64)])
    return table, local


def test_data_module_setup_matches_the_entries(tmp_path: Path) -> None:
    args = _write(tmp_path, "--shards", "200", "--val-shards", "20", "--records-per-shard", "6", "--seq-length", "512")
    manifest = read_manifest(tmp_path)
    assert ms.make_sparse_shards(tmp_path, manifest) == 220
    dm = GenomicWebDataModule(str(tmp_path), seq_length=args.seq_length, micro_batch_size=8, num_workers=0)
    dm.setup("fit")
    for split in (Split.train, Split.val):
        records, shards = dm.records[split], manifest.splits[split.name].shards
        indexes = shard_indexes(Store(tmp_path), manifest, split.name)
        assert indexes is not None and all(index is not None for index in indexes)
        table, local = _old_table(indexes)  # type: ignore[arg-type]
        assert records.table.shard.dtype == records.table.windows.dtype == np.int64
        assert isinstance(records.index.rows, np.memmap)  # read by nobody until used
        np.testing.assert_array_equal(records.table.shard, table.shard)
        np.testing.assert_array_equal(records.table.windows, table.windows)
        assert [records.local(r) for r in range(len(records.table))] == local.tolist()
        assert records.index.indexes() == indexes and records.damaged == set()
        assert records.table.n_windows == manifest.splits[split.name].n_samples
        record = len(records.table) - 1
        last = indexes[-1]
        assert last is not None
        assert records.span(record) == (len(shards) - 1, int(last.offset[-1]), int(last.size[-1]))
        assert all(type(v) is int for v in records.span(record))
        assert records.key(record) == f"{len(shards) - 1:06d}-{len(last) - 1:06d}"
    plan = train_plan(dm.records[Split.train].table, 42, 0, 0, 1, 8)
    assert len(plan) == manifest.splits["train"].n_samples // 8
    # the pieces alone, without shard files: every shard taken to have its listed size
    direct = SplitRecords.from_manifest(Store(tmp_path), manifest, "train", ShardErrorPolicy("raise"), {})
    np.testing.assert_array_equal(direct.table.windows, dm.records[Split.train].table.windows)


def test_records_past_a_short_shard_are_damaged(tmp_path: Path) -> None:
    _write(tmp_path, "--shards", "6", "--records-per-shard", "5", "--seq-length", "512")
    manifest = read_manifest(tmp_path)
    ms.make_sparse_shards(tmp_path, manifest)
    shards = manifest.splits["train"].shards
    index = shard_indexes(Store(tmp_path), manifest, "train")[3]  # type: ignore[index]
    assert index is not None
    cut = int(index.offset[2]) + 10  # records 2, 3 and 4 of shard 3 end past it
    (tmp_path / shards[3].path).write_bytes(b"")
    (tmp_path / shards[3].path).open("r+b").truncate(cut)
    dm = GenomicWebDataModule(str(tmp_path), micro_batch_size=8, handler="warn")
    with pytest.warns(UserWarning, match="wdshards-000003.tar has .* bytes but the manifest lists"):
        dm.setup("fit")
    assert dm.records[Split.train].damaged == {3 * 5 + 2, 3 * 5 + 3, 3 * 5 + 4}
    assert dm.skipped == 1


def test_open_dataset_expects_what_the_manifest_lists(tmp_path: Path) -> None:
    _write(tmp_path, "--shards", "5", "--val-shards", "2", "--records-per-shard", "2")
    manifest = read_manifest(tmp_path)
    ms.make_sparse_shards(tmp_path, manifest)
    store = Store(tmp_path)
    opened = open_dataset(store, None, "raise", True)
    want = {store.url(sh.path): sh.n_samples for info in manifest.splits.values() for sh in info.shards}
    assert opened.policy.expected == want
    sizes = {store.url(sh.path): sh.bytes for info in manifest.splits.values() for sh in info.shards}
    assert read_checked_manifest(store, None)[1] == opened.shard_sizes == sizes


def test_split_records_of_an_empty_split() -> None:
    from bionemo_wds.storage.shards import LocalShards

    records = SplitRecords.of(LocalShards([]), [])
    assert len(records.table) == 0 and records.table.shard.dtype == np.int64 and len(records.index.rows) == 0
    records = SplitRecords.of(LocalShards(["a", "b"]), [RecordIndex(), RecordIndex([512], [10], [3], [7])])
    np.testing.assert_array_equal(records.table.shard, [1])
    assert records.local(0) == 0 and records.span(0) == (1, 512, 10) and records.key(0) == "000001-000000"


def _old_from_dict(columns: Any) -> list[list[int]]:
    """`RecordIndex.from_dict` of format version 3 as it was: every number through `int`, into lists."""
    try:
        lists = [[int(v) for v in columns[name]] for name in COLUMNS]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the record index is malformed (needs columns {', '.join(COLUMNS)}): {exc!r}") from exc
    if len({len(column) for column in lists}) != 1:
        raise ValueError("the record index is malformed: its columns have different lengths")
    return lists


class _Columns(dict):
    pass


_GOOD = {"offset": [512, 2048], "size": [100, 200], "windows": [16, 3], "crc32": [1, 4294967295]}
_FROM_DICT_CASES = [
    _GOOD,
    {"offset": [], "size": [], "windows": [], "crc32": []},
    {**_GOOD, "extra": [1]},
    {**_GOOD, "windows": [True, 3]},  # a bool is an int subclass: int() makes it 1
    {**_GOOD, "size": [100.7, 200]},  # a float: int() truncates it
    {**_GOOD, "crc32": ["12", 3]},  # a numeric string: int() parses it
    {**_GOOD, "crc32": ["x", 3]},
    {**_GOOD, "offset": [None, 1]},
    {**_GOOD, "offset": [[1], 1]},
    {**_GOOD, "size": (100, 200)},  # a tuple column
    {**_GOOD, "size": 5},
    {**_GOOD, "size": None},
    {**_GOOD, "size": "12"},
    {k: v for k, v in _GOOD.items() if k != "crc32"},
    {**_GOOD, "windows": [16]},
    {**_GOOD, "offset": [1, "x"], "crc32": None},  # the first error found is the same one
    {**_GOOD, "offset": [2**70, 1]},  # beyond 64 bits: an int, but no offset (now an error)
    {**_GOOD, "offset": [2**64 - 1, 1]},  # the largest offset
    {**_GOOD, "crc32": [2**32, 1]},  # beyond 32 bits: no crc32 (now an error)
    {**_GOOD, "size": [-1, 200]},  # negative: no size (now an error)
    _Columns(_GOOD),
    [1, 2, 3, 4],
    "offset",
    None,
]


@pytest.mark.parametrize("columns", _FROM_DICT_CASES, ids=range(len(_FROM_DICT_CASES)))
def test_from_dict_gives_what_int_conversion_gave(columns: Any) -> None:
    """The values `int` makes of each, as numpy columns of `INDEX_DTYPE`'s types; a number a column's
    type cannot hold (which the lists of version 3 kept) is an error naming the column."""
    try:
        want: list[list[int]] | Exception = _old_from_dict(columns)
    except Exception as exc:
        want = exc
    if isinstance(want, Exception):
        with pytest.raises(type(want)) as got:
            RecordIndex.from_dict(columns)
        assert str(got.value) == str(want)
        assert type(got.value.__cause__) is type(want.__cause__)
        return
    limits = [np.iinfo(INDEX_DTYPE[name]).max for name in COLUMNS]
    outside = [name for name, column, limit in zip(COLUMNS, want, limits) if any(not 0 <= v <= limit for v in column)]
    if outside:
        with pytest.raises(ValueError, match=f"its {outside[0]} column holds a number outside 0..") as got:
            RecordIndex.from_dict(columns)
        return
    index = RecordIndex.from_dict(columns)
    assert [getattr(index, name).tolist() for name in COLUMNS] == want
    assert index.rows.dtype == INDEX_DTYPE and index == RecordIndex(*want)
    assert index.as_dict() == dict(zip(COLUMNS, want)) and all(type(v) is int for v in index.as_dict()["offset"])


def test_unlisted_shards_as_fnmatch_per_name() -> None:
    names = ["wdshards-000000.tar", "wdshards-000001.tar", "wdshards-x.tar", "other-000000.tar", "wdshards-1.tar.tmp"]
    names += ["WDSHARDS-000002.tar", "wdshards-.tar", "wdshards-000003.tar", "[weird].tar", "wdshards-[1].tar"]
    listed = {"train/wdshards-000001.tar"}
    for prefix in ("wdshards", "wd[s]hards", "*"):
        want = sorted(
            f"train/{n}" for n in names if fnmatch.fnmatch(n, f"{prefix}-*.tar") and f"train/{n}" not in listed
        )
        assert unlisted_shards("train", names, prefix, listed) == want
        assert unlisted_shards("train", dict.fromkeys(names, 1), prefix, listed) == want


def _manifest_with(tmp_path: Path, change: Any) -> str:
    _write(tmp_path, "--shards", "4", "--records-per-shard", "1")
    path = tmp_path / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    change(manifest["splits"]["train"]["shards"])
    path.write_text(json.dumps(manifest))
    with pytest.raises(ManifestError) as got:
        read_manifest(tmp_path)
    return str(got.value)


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        (lambda shards: shards[2].pop("bytes"), "splits.train.shards[2].bytes"),
        (lambda shards: [shards[3].pop(k) for k in ("sha256", "path")], "splits.train.shards[3].path"),
        (lambda shards: shards.__setitem__(1, [1, 2]), "splits.train.shards[1].path"),
        (lambda shards: shards.__setitem__(0, None), "splits.train.shards[0].path"),
    ],
)
def test_a_shard_entry_missing_a_key_is_named(tmp_path: Path, change: Any, missing: str) -> None:
    assert f"it has no {missing} (prepare the dataset again)" in _manifest_with(tmp_path, change)


def test_paused_gc_restores_the_collector() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with paused_gc():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(RuntimeError), paused_gc():
            raise RuntimeError
        assert gc.isenabled()
        gc.disable()
        with paused_gc():
            pass
        assert not gc.isenabled()  # someone else's choice stays
    finally:
        (gc.enable if was else gc.disable)()


def test_read_manifest_errors_unchanged(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a prepared dataset"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(ManifestError, match="is not valid JSON"):
        read_manifest(tmp_path)
    assert gc.isenabled()


def test_the_tool_reports_size_and_load_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scale"
    assert ms.main(["--shards", "30", "--records-per-shard", "3", "--out", str(out), "--skip", "records", "setup"]) == 0
    text = capsys.readouterr().out
    assert f"{(out / MANIFEST_NAME).stat().st_size:,} bytes" in text
    index_bytes = (out / "train" / "record-index.npy").stat().st_size
    assert f"record index (train/record-index.npy): {index_bytes:,} bytes" in text
    assert "load: read_manifest_s" in text and "peak_rss_mb" in text
    with pytest.raises(SystemExit):
        ms.parse_args(["--help"])
    assert "--windows-per-record" in capsys.readouterr().out


def test_the_tool_overwrites_no_real_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = {"format": "bionemo-wds", "format_version": 3, "request": {"source": "fasta"}}
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(real, indent=1))
    for extra in ([], ["--reuse"]):
        assert ms.main(["--shards", "3", "--out", str(tmp_path), "--skip", *ms.PHASES, *extra]) == 2
        assert "refusing to overwrite" in capsys.readouterr().out
    assert json.loads((tmp_path / MANIFEST_NAME).read_text()) == real
    assert ms.main(["--shards", "3", "--out", str(tmp_path / "new"), "--skip", *ms.PHASES]) == 0
    assert ms.main(["--shards", "3", "--out", str(tmp_path / "new"), "--skip", *ms.PHASES, "--reuse"]) == 0
