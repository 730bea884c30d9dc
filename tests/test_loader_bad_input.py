"""Bad input to the loaders: every failure is a clear error naming the culprit (shard file, directory,
suffix key or split), or under ``handler="warn"`` a counted skip -- never a hang or a silent loss.

All cases read a small real dataset prepared once per module from the bundled Klebsiella assembly
(val and test have two shards each, train sixteen; records of four windows), copied into
`tmp_path` before anything is damaged. Split readers run with ``num_workers=0`` unless the case is
about workers, so a failure surfaces as an exception in the test process.
"""

from __future__ import annotations

import gc
import json
import math
import re
import shutil
import tarfile
import warnings
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, as_format_version_1, as_format_version_3

from bionemo_wds.compat.webdatamodule import Split, WebDataModule
from bionemo_wds.format import decode_record, file_sha256, iter_records, window_key
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.shard_errors import CorruptShardError
from bionemo_wds.prepare import PrepareOptions, prepare

SEQ_LENGTH = 1024
OPTS = dict(seq_length=SEQ_LENGTH, stride=1000, samples_per_shard=300, windows_per_record=4, progress=False, workers=1)
VAL_SHARD = "val/wdshards-000000.tar"
TRAIN_SHARD = "train/wdshards-000003.tar"


# --- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A prepared dataset; never modified (tests damage a copy)."""
    out = tmp_path_factory.mktemp("loader_bad_input") / "ds"
    prepare([KLEBSIELLA], out, PrepareOptions(**OPTS))
    manifest = json.loads((out / "manifest.json").read_text())
    # The cases below rely on this layout; fail loudly if prepare's defaults ever change it.
    assert len(manifest["splits"]["val"]["shards"]) >= 2
    assert len(manifest["splits"]["test"]["shards"]) >= 2
    return out


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    """A private copy of the dataset, free to damage."""
    dst = tmp_path / "ds"
    shutil.copytree(pristine, dst)
    return dst


@pytest.fixture(params=[4, 3], ids=["v4", "v3"])
def versioned_root(pristine, tmp_path, request) -> Path:
    """`root`, and the same dataset as format version 3 wrote it (the record index in the manifest)."""
    dst = tmp_path / "ds"
    shutil.copytree(pristine, dst)
    if request.param == 3:
        as_format_version_3(dst)
    return dst


def load_manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def save_manifest(root: Path, manifest: dict) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))


def shard_entry(manifest: dict, rel: str) -> dict:
    split = rel.split("/")[0]
    (entry,) = [sh for sh in manifest["splits"][split]["shards"] if sh["path"] == rel]
    return entry


def sync_manifest(root: Path, rel: str) -> None:
    """Make the manifest agree with the shard file's current size and hash (what `setup` checks)."""
    manifest = load_manifest(root)
    entry = shard_entry(manifest, rel)
    entry["bytes"], entry["sha256"] = file_sha256(root / rel)
    save_manifest(root, manifest)


def members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return tar.getmembers()


def record_windows(path: Path) -> dict[str, int]:
    """Windows per record key of an intact shard."""
    with open(path, "rb") as fh:
        return {key: len(block) for key, block in iter_records(fh, str(path))}


def read_split(dm: GenomicWebDataModule, split: str) -> list[str]:
    """Every window key a split's loader delivers in one pass."""
    loader = {"train": dm.train_dataloader, "val": dm.val_dataloader, "test": dm.test_dataloader}[split]()
    return [key for batch in loader for key in batch["keys"] if key]  # "" marks filler windows


def train_left_out_ok(got: set[str], expected: set[str], micro: int = 16) -> bool:
    """An exact training epoch: nothing outside `expected`, fewer than one batch of it left out."""
    return got <= expected and len(expected - got) < micro


def genomic(root: Path, **kwargs) -> GenomicWebDataModule:
    kwargs.setdefault("micro_batch_size", 16)
    return GenomicWebDataModule(str(root), **kwargs)


def truncate_mid_member(root: Path, rel: str, index: int = 10) -> int:
    """Cut shard `rel` in the middle of member `index`'s data; returns the new size."""
    path = root / rel
    member = members(path)[index]
    cut = member.offset_data + member.size // 2
    with open(path, "r+b") as fh:
        fh.truncate(cut)
    return cut


# --- 1, 2: missing shards, missing splits, unknown stages ----------------------------------------


def test_split_directory_without_shards_names_directory_and_pattern(tmp_path, pristine):
    empty = tmp_path / "empty_train"
    empty.mkdir()
    dm = WebDataModule(
        {Split.train: str(empty), Split.val: str(pristine / "val")}, {Split.train: 10, Split.val: 10}, "msgpack", 2
    )
    with pytest.raises(FileNotFoundError) as info:
        dm.setup("fit")
    message = str(info.value)
    assert str(empty) in message
    assert "wdshards-*.tar" in message
    assert "train" in message


def test_wrong_prefix_finds_no_shards_and_says_which_pattern(pristine):
    dm = WebDataModule({Split.val: str(pristine / "val")}, {Split.val: 10}, "msgpack", 2, prefix_tars_wds="shards")
    with pytest.raises(FileNotFoundError, match=re.escape(f"{pristine / 'val'}/shards-*.tar")):
        dm.setup("validate")


def test_split_missing_from_dirs_names_the_split(pristine):
    dm = WebDataModule({Split.train: str(pristine / "train")}, {Split.train: 10}, "msgpack", 2)
    with pytest.raises(ValueError) as info:
        dm.setup("fit")  # fit needs train and val
    message = str(info.value)
    assert "val split" in message
    assert "dirs_tars_wds has train" in message


def test_n_samples_for_other_splits_than_dirs_is_refused(pristine):
    with pytest.raises(ValueError, match=r"n_samples has splits .*val.* but dirs_tars_wds has .*train"):
        WebDataModule({Split.train: str(pristine / "train")}, {Split.val: 10}, "msgpack", 2)


@pytest.mark.parametrize("stage", ["bogus", "train", ""])
def test_unknown_stage_is_not_implemented(pristine, stage):
    dm = WebDataModule({Split.train: str(pristine / "train")}, {Split.train: 10}, "msgpack", 2)
    with pytest.raises(NotImplementedError, match=re.escape(f"stage={stage!r}")):
        dm.setup(stage)


def test_genomic_unknown_stage_is_not_implemented(root):
    with pytest.raises(NotImplementedError, match="stage='bogus'"):
        genomic(root).setup("bogus")


def test_dataloader_before_setup_names_the_split(pristine):
    dm = WebDataModule({Split.val: str(pristine / "val")}, {Split.val: 10}, "msgpack", 2)
    with pytest.raises(ValueError, match="val dataloader was asked for before setup"):
        dm.val_dataloader()


def test_genomic_dataset_without_the_split_a_stage_needs(root):
    manifest = load_manifest(root)
    del manifest["splits"]["val"]
    save_manifest(root, manifest)
    with pytest.raises(ValueError) as info:
        genomic(root).setup("validate")
    assert str(root) in str(info.value)
    assert "no val split" in str(info.value)
    assert "'validate'" in str(info.value)
    # training needs only train: a dataset prepared with --split 1,0,0 fits without validation
    dm = genomic(root)
    dm.setup("fit")
    assert dm.val_dataloader() == []
    del manifest["splits"]["train"]
    save_manifest(root, manifest)
    with pytest.raises(ValueError, match="no train split, which stage 'fit' needs"):
        genomic(root).setup("fit")


def test_genomic_root_without_manifest(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "manifest.json"))):
        genomic(tmp_path).setup("fit")


# --- 3: a truncated shard ------------------------------------------------------------------------


def test_truncated_shard_is_caught_by_setup_when_manifest_not_updated(root):
    cut = truncate_mid_member(root, VAL_SHARD)
    with pytest.raises(CorruptShardError) as info:
        genomic(root).setup("validate")
    message = str(info.value)
    assert str(root / VAL_SHARD) in message
    assert f"has {cut} bytes" in message
    assert "manifest disagrees" in message


def test_truncated_shard_raises_naming_the_shard(root):
    truncate_mid_member(root, VAL_SHARD)
    sync_manifest(root, VAL_SHARD)  # size and hash agree: the record index still sees the damage
    dm = genomic(root)
    with pytest.raises(CorruptShardError) as info:
        dm.setup("validate")
    assert "wdshards-000000.tar" in str(info.value)
    assert str(root / VAL_SHARD) in str(info.value)


def test_truncated_shard_error_says_after_which_sample(versioned_root):
    root = versioned_root
    truncate_mid_member(root, VAL_SHARD, index=10)
    sync_manifest(root, VAL_SHARD)
    dm = genomic(root)
    with pytest.raises(CorruptShardError) as info:
        dm.setup("validate")
    message = str(info.value)
    assert "before its first sample" not in message
    assert re.search(
        rf"shard {re.escape(str(root / VAL_SHARD))} is truncated or corrupt "
        r"\(after sample 000000-0000\d\d\): record 000000-0000\d\d ends at byte \d+, past the end of the file",
        message,
    ), message


def test_truncated_shard_warn_skips_and_counts(root):
    n_samples = load_manifest(root)["splits"]["val"]["n_samples"]
    truncate_mid_member(root, VAL_SHARD)
    sync_manifest(root, VAL_SHARD)
    dm = genomic(root, handler="warn")
    with pytest.warns(UserWarning, match=r"skipped: .*wdshards-000000\.tar") as record:
        dm.setup("validate")
        loader = dm.val_dataloader()
        batches = list(loader)
        keys = [k for b in batches for k in b["keys"] if k]
    assert len(batches) == len(loader)  # the lost windows are filler: the batch count holds
    assert dm.skipped >= 1
    assert 0 < len(keys) < n_samples
    assert len(set(keys)) == len(keys)
    messages = [str(w.message) for w in record]
    path = str(root / VAL_SHARD)
    assert any(f"shard {path} is truncated or corrupt (after sample 000000-" in m for m in messages), messages


def test_truncated_shard_warn_counts_it_once(root):
    truncate_mid_member(root, VAL_SHARD)
    sync_manifest(root, VAL_SHARD)
    dm = genomic(root, handler="warn")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        dm.setup("validate")
        read_split(dm, "val")
    skips = [w for w in record if str(w.message).startswith("skipped:")]
    assert dm.skipped == 1
    assert len(skips) == 1, [str(w.message) for w in skips]


def test_shard_cut_at_a_member_boundary_is_reported(root):
    """A cut between members: tarfile would see a clean end; our reader misses the end-of-archive
    marker and says so, naming the last good record (the per-shard count is the second net)."""
    path = root / VAL_SHARD
    with open(path, "r+b") as fh:
        fh.truncate(members(path)[10].offset)  # ten whole records = 40 windows remain
    sync_manifest(root, VAL_SHARD)
    expected = shard_entry(load_manifest(root), VAL_SHARD)["n_samples"]
    dm = genomic(root)
    with pytest.raises(CorruptShardError) as info:
        dm.setup("validate")
    assert re.fullmatch(
        rf"shard {re.escape(str(path))} is truncated or corrupt \(after sample 000000-000009\): "
        rf"record 000000-000010 ends at byte \d+, past the end of the file \({path.stat().st_size} bytes\)",
        str(info.value),
    ), str(info.value)
    assert expected == 300


def test_manifest_count_is_the_second_net(root):
    """With the reader satisfied (a complete tar holding fewer records), the count check fires."""
    import tarfile

    path = root / VAL_SHARD
    kept = members(path)[:10]
    with tarfile.open(path) as src:
        payloads = [(m, src.extractfile(m).read()) for m in kept]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as dst:
        for m, data in payloads:
            import io

            dst.addfile(m, io.BytesIO(data))
    sync_manifest(root, VAL_SHARD)
    as_format_version_1(root)  # no record index: the shard is scanned, and the count is the net
    expected = shard_entry(load_manifest(root), VAL_SHARD)["n_samples"]
    dm = genomic(root)
    with pytest.raises(CorruptShardError) as info:
        dm.setup("validate")
    assert str(info.value) == (
        f"shard {path} holds 40 samples but the manifest lists {expected}: the manifest disagrees with the file"
    )


# --- 4: a record that does not decode ------------------------------------------------------------


def corrupt_first_record(root: Path, rel: str) -> tuple[str, int]:
    """Overwrite the start of the first member's msgpack payload with 0xC1 (never valid msgpack)."""
    path = root / rel
    first = members(path)[0]
    key = first.name.partition(".")[0]
    windows = record_windows(path)[key]
    size = path.stat().st_size
    assert first.offset_data == 512
    with open(path, "r+b") as fh:
        fh.seek(512)
        fh.write(b"\xc1" * 18)
    assert path.stat().st_size == size
    sync_manifest(root, rel)  # same size; the sha now matches the damaged file too
    return key, windows


def test_corrupt_record_raises_naming_shard_and_key(root):
    key, _ = corrupt_first_record(root, VAL_SHARD)
    assert key == "000000-000000"
    dm = genomic(root)
    dm.setup("validate")
    with pytest.raises(CorruptShardError) as info:
        read_split(dm, "val")
    # the record's crc32 catches it before the decoder does
    assert str(info.value).startswith(f"record {key} of shard {root / VAL_SHARD} fails its crc32 check")


def test_corrupt_record_warn_skips_exactly_that_record(root):
    n_samples = load_manifest(root)["splits"]["val"]["n_samples"]
    key, windows = corrupt_first_record(root, VAL_SHARD)
    dm = genomic(root, handler="warn")
    dm.setup("validate")
    with pytest.warns(UserWarning, match=re.escape(f"record {key} of shard {root / VAL_SHARD} fails its crc32 check")):
        keys = read_split(dm, "val")
    assert dm.skipped == 1
    assert len(keys) == n_samples - windows
    assert len(set(keys)) == len(keys)


def test_corrupt_record_in_a_worker_is_counted_in_the_main_process(root):
    """The skip counter is shared memory: a skip in a loader worker reaches `dm.skipped`."""
    n_samples = load_manifest(root)["splits"]["val"]["n_samples"]
    rel = "val/wdshards-000001.tar"
    _, windows = corrupt_first_record(root, rel)
    dm = genomic(root, handler="warn", num_workers=2)
    dm.setup("validate")
    keys = read_split(dm, "val")
    assert dm.skipped == 1
    assert len(keys) == n_samples - windows


@pytest.mark.slow
def test_corrupt_record_in_a_worker_raises_naming_shard_and_key(root):
    key, _ = corrupt_first_record(root, VAL_SHARD)
    dm = genomic(root, num_workers=1)
    dm.setup("validate")
    with pytest.raises(CorruptShardError) as info:
        read_split(dm, "val")
    assert f"record {key} of shard {root / VAL_SHARD} fails its crc32 check" in str(info.value)
    # torch takes ~5 s per worker to shut down a loader abandoned after a worker error; collect it
    # here so that cost is charged to this test rather than to whichever test runs the gc next.
    del info, dm
    gc.collect()


# --- 5: a manifest that disagrees with the files -------------------------------------------------


def test_shard_in_manifest_but_deleted(root):
    rel = "test/wdshards-000001.tar"
    (root / rel).unlink()
    with pytest.raises(CorruptShardError) as info:
        genomic(root).setup("fit")  # even a stage that does not read the test split
    assert str(info.value) == f"shard {root / rel} is listed in {root}/manifest.json but missing"


@pytest.mark.parametrize(
    "rel, delta", [("val/wdshards-000000.tar", 3), ("val/wdshards-000001.tar", 3), ("test/wdshards-000001.tar", -3)]
)
def test_manifest_sample_count_disagrees_with_shard(versioned_root, rel, delta):
    root = versioned_root
    split = rel.split("/")[0]
    manifest = load_manifest(root)
    entry = shard_entry(manifest, rel)
    actual = entry["n_samples"]
    entry["n_samples"] += delta
    manifest["splits"][split]["n_samples"] += delta  # the manifest agrees with itself, not with the file
    save_manifest(root, manifest)
    dm = genomic(root, num_workers=0)
    with pytest.raises(CorruptShardError) as info:  # the record index disagrees: found at setup
        dm.setup("validate" if split == "val" else "test")
    message = str(info.value)
    assert f"shard {root / rel} holds {actual} samples but the manifest lists {actual + delta}" in message
    assert "manifest disagrees" in message


def test_manifest_sample_count_disagreement_warns_under_warn(root):
    manifest = load_manifest(root)
    n_samples = manifest["splits"]["val"]["n_samples"]
    shard_entry(manifest, VAL_SHARD)["n_samples"] += 3
    manifest["splits"]["val"]["n_samples"] += 3
    save_manifest(root, manifest)
    dm = genomic(root, handler="warn")
    with pytest.warns(UserWarning, match=re.escape(f"shard {root / VAL_SHARD} holds")):
        dm.setup("validate")
        keys = read_split(dm, "val")
    assert dm.skipped == 1
    assert len(keys) == n_samples  # the file itself is whole


def test_other_seq_length_than_the_shards_were_cut_for(root):
    dm = genomic(root, seq_length=2048)
    with pytest.raises(ValueError) as info:
        dm.setup("fit")
    message = str(info.value)
    assert "seq_length 1024" in message and "seq_length=2048" in message
    assert str(root) in message


# --- 6: more workers than shards -----------------------------------------------------------------


def test_plain_module_refuses_more_workers_than_shards_when_iterated(pristine):
    """bionemo-webdatamodule leaves this to webdataset (a worker without shards raises ``... fewer
    shards than workers`` inside the worker); ours says it in this process when the loader is
    iterated, with the --samples-per-shard that gives enough shards (worked out from the manifest:
    ceil(n / it) shards)."""
    n_shards = len(list((pristine / "val").glob("wdshards-*.tar")))
    workers = n_shards + 1
    dm = WebDataModule(
        {Split.val: str(pristine / "val")},
        {Split.val: 10},
        "msgpack",
        2,
        kwargs_wld={Split.val: {"num_workers": workers}},
    )
    dm.setup("validate")
    with pytest.raises(ValueError, match=rf"the val split has {n_shards} shard\(s\) .* num_workers={workers}") as info:
        iter(dm.val_dataloader())
    per_shard = int(re.search(r"--samples-per-shard (\d+) or fewer", str(info.value)).group(1))
    n = load_manifest(pristine)["splits"]["val"]["n_samples"]
    assert math.ceil(n / per_shard) >= workers > math.ceil(n / (per_shard + 1))  # enough, and the most that is


def test_plain_module_accepts_as_many_workers_as_shards(pristine):
    n_shards = len(list((pristine / "val").glob("wdshards-*.tar")))
    dm = WebDataModule(
        {Split.val: str(pristine / "val")},
        {Split.val: 10},
        "msgpack",
        2,
        kwargs_wld={Split.val: {"num_workers": n_shards}},
    )
    dm.setup("validate")
    assert len(list(dm.val_dataloader())) == 10 // 2  # every worker has a shard: no error


def test_genomic_reads_each_sample_once_with_more_workers_than_shards(root):
    """The epoch plan divides batches, not shards: workers without a shard of their own are fine."""
    manifest = load_manifest(root)
    n_shards = len(manifest["splits"]["val"]["shards"])
    dm = genomic(root, num_workers=n_shards + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that 3 workers exceed this machine's 2 cores
        dm.setup("validate")
        keys = read_split(dm, "val")
    assert len(keys) == manifest["splits"]["val"]["n_samples"]
    assert len(set(keys)) == len(keys)


# --- 7: a suffix key the samples do not have -----------------------------------------------------


def test_absent_suffix_key_names_key_and_shard(pristine):
    dm = WebDataModule({Split.val: str(pristine / "val")}, {Split.val: 10}, "nope", 2)
    dm.setup("validate")
    with pytest.raises(ValueError) as info:
        next(iter(dm.val_dataloader()))
    message = str(info.value)
    assert "suffix key 'nope'" in message
    assert f"shard {pristine / VAL_SHARD}" in message
    assert "['msgpack']" in message  # what the sample does have


# --- 8: a record whose bytes changed: the record index (format versions 3 and 4) ---------------------------


def tokens_start(record: bytes) -> int:
    """Where the bases of a record start: after the ``tokens`` key and its msgpack bin header."""
    at = record.index(b"\xa6tokens") + 7
    return at + {0xC4: 2, 0xC5: 3, 0xC6: 5}[record[at]]


def zero_a_base(root: Path, rel: str, record: int = 2, base: int = 10) -> tuple[str, list[str]]:
    """Set base `base` of record `record` of shard `rel` to 0x00 in place: same size, and the record
    still decodes (with token 0, EOS, where the base was). The manifest's size and sha256 are then
    made to agree with the damaged file, so only the record index can catch it.
    Returns the record's key and its windows' keys."""
    path = root / rel
    member = members(path)[record]
    start, end = member.offset_data, member.offset_data + member.size
    data = bytearray(path.read_bytes())
    block = decode_record(bytes(data[start:end]))
    at = start + tokens_start(bytes(data[start:end])) + base
    assert data[at] == block.tokens[base] and chr(data[at]) in "ACGTN"
    data[at] = 0
    path.write_bytes(bytes(data))
    damaged = decode_record(bytes(data[start:end]))
    assert damaged.tokens[base] == 0 and len(damaged) == len(block) and damaged.seq_id == block.seq_id
    sync_manifest(root, rel)
    return member.name.partition(".")[0], [window_key(s, w) for s, w in zip(block.seq_id, block.window.tolist())]


def split_keys(root: Path, split: str) -> set[str]:
    """Every window key of a split, read from its shards."""
    keys = set()
    for path in sorted((root / split).glob("wdshards-*.tar")):
        with open(path, "rb") as fh:
            for _, block in iter_records(fh, str(path)):
                keys.update(window_key(s, w) for s, w in zip(block.seq_id, block.window.tolist()))
    return keys


def test_changed_base_raises_naming_shard_and_record(versioned_root):
    root = versioned_root
    key, _ = zero_a_base(root, TRAIN_SHARD)
    assert key == "000003-000002"
    dm = genomic(root)
    dm.setup("fit")
    with pytest.raises(CorruptShardError) as info:
        read_split(dm, "train")
    assert str(info.value).startswith(f"record {key} of shard {root / TRAIN_SHARD} fails its crc32 check: ")


@pytest.mark.parametrize("workers", [0, 2])
def test_changed_base_warn_skips_exactly_that_record(root, workers):
    everything = split_keys(root, "train")
    key, windows = zero_a_base(root, TRAIN_SHARD)
    dm = genomic(root, handler="warn", num_workers=workers)
    dm.setup("fit")
    message = f"record {key} of shard {root / TRAIN_SHARD} fails its crc32 check"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keys = [k for k in read_split(dm, "train") if k]
    assert dm.skipped == 1  # one record: the shard's window count is not reported on top
    assert len(keys) == len(set(keys))
    assert train_left_out_ok(set(keys), everything - set(windows)) and len(windows) == 4
    if workers == 0:  # a worker's warnings stay in the worker
        assert [str(w.message) for w in caught if "skipped" in str(w.message)] == [
            next(str(w.message) for w in caught if message in str(w.message))
        ]


def test_verify_reports_the_changed_base(root):
    from bionemo_wds.prepare.report import verify

    key, _ = zero_a_base(root, TRAIN_SHARD)
    problems = verify(root, progress=False).problems
    assert len(problems) == 1 and problems[0].startswith(f"{TRAIN_SHARD}: record {key} fails its crc32 check (")


def test_a_dataset_of_format_version_1_still_loads_and_verifies(root):
    from bionemo_wds.prepare.report import verify

    as_format_version_1(root)
    manifest = load_manifest(root)
    dm = genomic(root)
    dm.setup("fit")
    assert sorted(read_split(dm, "val")) == sorted(split_keys(root, "val"))
    assert train_left_out_ok(set(read_split(dm, "train")), split_keys(root, "train"))
    report = verify(root, progress=False)
    assert report.ok and report.samples == sum(info["n_samples"] for info in manifest["splits"].values())
    assert [note for note in report.notes if "has no record index (format version 1" in note]


def test_without_an_index_a_changed_base_goes_unseen(root):
    """Why versions 3 and 4 have an index: a version-1 dataset whose manifest hash was made to agree loads the
    changed base as token 0 (EOS) without a word."""
    as_format_version_1(root)
    zero_a_base(root, TRAIN_SHARD)
    dm = genomic(root)
    dm.setup("fit")
    assert train_left_out_ok(set(read_split(dm, "train")), split_keys(root, "train"))
    assert dm.skipped == 0


# --- 9: handler ----------------------------------------------------------------------------------


@pytest.mark.parametrize("handler", ["bogus", "Raise", "ignore"])
def test_unknown_handler_is_refused_at_construction(root, handler):
    with pytest.raises(ValueError, match=re.escape(f"got {handler!r}")):
        genomic(root, handler=handler)


def test_known_handlers_are_accepted(root):
    for handler in ("raise", "warn"):
        assert genomic(root, handler=handler).handler == handler
