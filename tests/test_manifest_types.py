"""The typed manifest (`format.manifest_types`): `Manifest.from_json` / `to_json` round trips for
datasets of every format version, the reader registered per version, unknown keys kept, errors
naming the file; and the record key the writer names records by is the one the loader uses."""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import KLEBSIELLA, as_format_before_6, as_format_version_1, as_format_version_3
from hypothesis import given
from hypothesis import strategies as st

from bionemo_wds.format import (
    MANIFEST_NAME,
    READABLE_VERSIONS,
    READERS,
    Manifest,
    Params,
    ShardInfo,
    SplitInfo,
    iter_members,
    read_manifest,
    record_key,
    shard_indexes,
    write_manifest,
)
from bionemo_wds.format.manifest import ManifestError, dumps_manifest
from bionemo_wds.load.records import SplitRecords
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.storage.store import Store

OPTS = dict(seq_length=1024, stride=1000, samples_per_shard=500, windows_per_record=8, progress=False, workers=1)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The Klebsiella assembly prepared (version 6), and copies rewritten as versions 4, 3, 2 and 1 wrote them."""
    base = tmp_path_factory.mktemp("manifest_types")
    v6, v4 = base / "v6", base / "v4"
    prepare([KLEBSIELLA], v6, PrepareOptions(**OPTS))
    shutil.copytree(v6, v4)
    as_format_before_6(v4)
    v3, v1 = base / "v3", base / "v1"
    shutil.copytree(v4, v3)
    as_format_version_3(v3)
    shutil.copytree(v4, v1)
    as_format_version_1(v1)
    v2 = base / "v2"  # version 1 with zstd records: what --compress zstd wrote before version 3
    prepare([KLEBSIELLA], v2, PrepareOptions(**OPTS, compress="zstd"))
    as_format_version_1(v2)
    text = json.loads((v2 / MANIFEST_NAME).read_text())
    text["format_version"] = 2
    (v2 / MANIFEST_NAME).write_text(dumps_manifest(text))
    return {1: v1, 2: v2, 3: v3, 4: v4, 6: v6}


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2, 3, 4, 6])
def test_a_manifest_of_each_version_round_trips(pristine: dict[int, Path], version: int) -> None:
    root = pristine[version]
    text = (root / MANIFEST_NAME).read_text()
    manifest = read_manifest(root)
    assert manifest.format_version == version and READERS[version] is READERS[manifest.format_version]
    assert manifest.to_json() == json.loads(text)
    assert dumps_manifest(manifest.to_json()) == text  # key order too: the file, byte for byte
    assert Manifest.from_json(manifest.to_json(), "x") == manifest
    assert pickle.loads(pickle.dumps(manifest)) == manifest  # a data module's manifest goes to spawned workers
    params = manifest.params
    assert (params.seq_length, params.window_length, params.max_tag_bytes, params.prefix) == (1024, 1021, 0, "wdshards")
    assert params.codec == ("zstd" if version == 2 else "none") and params.tokenizer is not None
    for name, split in manifest.splits.items():
        assert split.n_samples == sum(shard.n_samples for shard in split.shards) > 0
        assert all(shard.path.startswith(f"{name}/") and len(shard.sha256) == 64 for shard in split.shards)
        assert (split.record_index is not None) == (version >= 4)
        assert all((shard.n_records is not None) == (version >= 4) for shard in split.shards)
        assert all((shard.records is not None) == (version == 3) for shard in split.shards)
        assert (split.seq_ids is not None) == (version < 6)  # since version 6 in the sequence table alone


def test_writing_a_manifest_as_read_gives_the_same_file(pristine: dict[int, Path], tmp_path: Path) -> None:
    for version, root in pristine.items():
        out = tmp_path / str(version)
        shutil.copytree(root, out)
        write_manifest(out / MANIFEST_NAME, read_manifest(out))
        assert (out / MANIFEST_NAME).read_bytes() == (root / MANIFEST_NAME).read_bytes(), version


def test_a_version_3_manifest_gives_the_record_index_of_version_4(pristine: dict[int, Path]) -> None:
    v3, v4 = read_manifest(pristine[3]), read_manifest(pristine[4])
    assert READERS[3] is not READERS[4] and v3.splits.keys() == v4.splits.keys()
    for split in v4.splits:
        got = shard_indexes(Store(pristine[3]), v3, split)
        want = shard_indexes(Store(pristine[4]), v4, split)
        assert got is not None and got == want and len(got) == len(v4.splits[split].shards)
    assert shard_indexes(Store(pristine[1]), read_manifest(pristine[1]), "train") is None


@pytest.mark.parametrize("version", [0, 7, "4", None, 2.5])
def test_a_version_no_reader_takes_is_refused_naming_the_file(tmp_path: Path, pristine, version: Any) -> None:
    root = tmp_path / "ds"
    shutil.copytree(pristine[4], root)
    obj = json.loads((root / MANIFEST_NAME).read_text())
    obj["format_version"] = version
    (root / MANIFEST_NAME).write_text(json.dumps(obj))
    with pytest.raises(ManifestError) as got:
        read_manifest(root)
    assert str(got.value) == (
        f"{root / MANIFEST_NAME} has format version {version}; this bionemo-wds reads versions 1, 2, 3, 4, 5, 6"
    )
    assert READABLE_VERSIONS == (1, 2, 3, 4, 5, 6) == tuple(sorted(READERS))


def test_a_foreign_or_damaged_manifest_is_named(tmp_path: Path, pristine) -> None:
    obj = json.loads((pristine[4] / MANIFEST_NAME).read_text())
    with pytest.raises(ManifestError, match=r"^here is not a bionemo-wds manifest$"):
        Manifest.from_json({**obj, "format": "other"}, "here")
    with pytest.raises(ManifestError, match=r"^here is not a bionemo-wds manifest$"):
        Manifest.from_json([obj], "here")
    del obj["params"]["prefix"]
    with pytest.raises(
        ManifestError, match=r"^here is damaged: it has no params.prefix \(prepare the dataset again\)$"
    ):
        Manifest.from_json(obj, "here")


def test_unknown_keys_are_kept_through_a_round_trip(pristine, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(pristine[4], root)
    obj = json.loads((root / MANIFEST_NAME).read_text())
    obj["note"] = {"by": "a newer writer"}
    obj["params"]["future_param"] = [1, 2]
    obj["splits"]["train"]["future_split_key"] = "x"
    obj["splits"]["train"]["shards"][0]["future_shard_key"] = 7
    manifest = Manifest.from_json(obj, "here")
    assert manifest.extra == {"note": {"by": "a newer writer"}} and manifest.params.extra == {"future_param": [1, 2]}
    assert manifest.splits["train"].extra == {"future_split_key": "x"}
    assert manifest.splits["train"].shards[0].extra == {"future_shard_key": 7}
    assert manifest.to_json() == obj
    write_manifest(root / MANIFEST_NAME, manifest)
    assert json.loads((root / MANIFEST_NAME).read_text()) == obj and read_manifest(root) == manifest


def test_a_blend_manifest_is_a_manifest_built_from_typed_parts(pristine) -> None:
    """What `load.mixed` builds for a blend: the first dataset's params, widened, and one train split."""
    first = read_manifest(pristine[4])
    params = dataclasses.replace(first.params, window_length=2000, max_tag_bytes=9)
    blend = Manifest(format_version=4, params=params, splits={"train": SplitInfo(n_samples=5, shards=())})
    assert blend.params.seq_length == first.params.seq_length and blend.params.window_length == 2000
    assert blend.to_json()["splits"] == {"train": {"n_samples": 5, "shards": []}}


_INT = st.integers(min_value=0, max_value=2**40)
_TEXT = st.text(max_size=12)
_EXTRA = st.dictionaries(st.text(min_size=1, max_size=8).map(lambda k: f"x_{k}"), _INT | _TEXT, max_size=3)


@given(
    required=st.fixed_dictionaries(
        {
            "seq_length": _INT,
            "stride": _INT,
            "window_length": _INT,
            "tail": _TEXT,
            "tags": _TEXT,
            "max_tag_bytes": _INT,
            "seed": _INT,
            "windows_per_record": _INT,
            "prefix": _TEXT,
            "codec": st.sampled_from(["none", "zstd"]),  # every version has it (read as "none" when absent)
        },
        optional={
            "case": st.sampled_from(["keep", "upper"]),
            "samples_per_shard": _INT,
            "records_by": st.sampled_from(["bases", "windows"]),
            "length_buckets": st.lists(_INT, max_size=3),
            "tokenizer": st.fixed_dictionaries({"kind": st.just("byte"), "eos": _INT}),
        },
    ),
    nullable=st.fixed_dictionaries({}, optional={"group_by": st.none() | _TEXT, "split_at_n": st.none() | _INT}),
    extra=_EXTRA,
)
def test_params_round_trip(required: dict[str, Any], nullable: dict[str, Any], extra: dict[str, Any]) -> None:
    obj = {**required, **{k: v for k, v in nullable.items() if v is not None}, **extra}
    params = Params.from_json(obj)
    assert params.extra == extra and Params.from_json(params.to_json()) == params
    written = params.to_json()
    # every key comes back; group_by and split_at_n are always written (null when absent), as prepare writes them
    assert {k: v for k, v in written.items() if k not in ("group_by", "split_at_n") or v is not None} == obj
    assert written["group_by"] == nullable.get("group_by") and written["split_at_n"] == nullable.get("split_at_n")


@given(
    obj=st.fixed_dictionaries(
        {"path": _TEXT, "n_samples": _INT, "n_tokens": _INT, "bytes": _INT, "sha256": _TEXT},
        optional={"n_records": _INT, "records": st.dictionaries(st.sampled_from(["offset", "size"]), st.lists(_INT))},
    ),
    extra=_EXTRA,
)
def test_shard_info_round_trip(obj: dict[str, Any], extra: dict[str, Any]) -> None:
    shard = ShardInfo.from_json({**obj, **extra})
    assert shard.to_json() == {**obj, **extra} and ShardInfo.from_json(shard.to_json()) == shard
    assert (shard.path, shard.bytes, shard.n_samples, shard.sha256) == (
        obj["path"],
        obj["bytes"],
        obj["n_samples"],
        obj["sha256"],
    )
    known = ["path", "n_samples", "n_tokens", "bytes", "sha256", "records", "n_records"]
    assert list(shard.to_json()) == [k for k in known if k in obj] + list(extra)  # prepare's order, then the rest


def test_the_writer_and_the_loader_name_records_by_the_same_key(tmp_path: Path) -> None:
    """The member names prepare writes are `record_key(shard, record)`, and the loader's
    `SplitRecords.key` gives the same name for each record."""
    out = tmp_path / "ds"
    prepare([KLEBSIELLA], out, PrepareOptions(**{**OPTS, "samples_per_shard": 400, "windows_per_record": 7}))
    manifest = read_manifest(out)
    store = Store(out)
    records = SplitRecords.from_manifest(store, manifest, "train", ShardErrorPolicy("raise"), {})
    loaded = [records.key(r) for r in range(len(records.table))]
    written = []
    for number, shard in enumerate(manifest.splits["train"].shards):
        with open(out / shard.path, "rb") as fh:
            names = [name for name, _ in iter_members(fh)]
        assert names == [f"{record_key(number, r)}.msgpack" for r in range(len(names))] and names
        written += [name.removesuffix(".msgpack") for name in names]
    assert len(manifest.splits["train"].shards) > 2 and loaded == written
    assert record_key(3, 12) == "000003-000012"
