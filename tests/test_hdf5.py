"""`prepare --source hdf5`: pre-tokenized rows of real genomes in HDF5 files, in and back out.

Lambda phage cut into 1000-base rows (fixed width, uint8 and int64 with BOS/EOS/PAD) and the
Klebsiella contigs as ragged rows; every window read back from the shards (and through the data
module) must be its row's bases, every row in exactly one split, and bad files refused up front.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import LAMBDA, shard_windows, split_seq_ids

from bionemo_wds.cli.main import main
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UPPERCASE_TABLE
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions
from bionemo_wds.prepare.sources.hdf5 import catalog_hdf5, hdf5_input_files
from bionemo_wds.prepare.sources.hdf5_reader import Hdf5Reader
from bionemo_wds.prepare.splits import SPLIT_NAMES
from bionemo_wds.prepare.windows import window_counts

h5py = pytest.importorskip("h5py")  # the [h5] extra (part of [test])

ROW = 1000  # bases per lambda row
SEQ = 1024  # > ROW + 3 + the longest label: one window per row


def prepare_h5(h5: Path, out: Path, *args: object) -> int:
    return main(["prepare", "--source", "hdf5", str(h5), "--out", str(out), "-q", *map(str, args)])


def ids(text: str | bytes) -> np.ndarray:
    return np.frombuffer(text.encode() if isinstance(text, str) else text, dtype=np.uint8)


@pytest.fixture(scope="module")
def lambda_rows(lambda_seq) -> list[str]:
    """Lambda phage in rows of `ROW` bases (the last one shorter: 48,502 bases)."""
    return [lambda_seq[i : i + ROW] for i in range(0, len(lambda_seq), ROW)]


@pytest.fixture(scope="module")
def lambda_h5(tmp_path_factory, lambda_rows) -> Path:
    """x_u8: the 48 full rows as uint8 (n, 1000); x_i64: all 49 rows as int64 BOS + bases + EOS, PAD-padded
    to 1002 (chunked, gzip); y_int / y_str / y_float: one label per row of x_i64."""
    path = tmp_path_factory.mktemp("h5") / "lambda.h5"
    full = [r for r in lambda_rows if len(r) == ROW]
    padded = np.full((len(lambda_rows), ROW + 2), PAD_ID, dtype=np.int64)
    for i, row in enumerate(lambda_rows):
        padded[i, 0] = BOS_ID
        padded[i, 1 : 1 + len(row)] = ids(row)
        padded[i, 1 + len(row)] = EOS_ID
    with h5py.File(path, "w") as f:
        f["x_u8"] = np.stack([ids(r) for r in full])
        f.create_dataset("x_i64", data=padded, chunks=(8, ROW + 2), compression="gzip")
        f["y_int"] = np.arange(len(lambda_rows)) % 3
        f.create_dataset("y_str", data=[f"phage-{i % 4}" for i in range(len(lambda_rows))], dtype=h5py.string_dtype())
        f["y_float"] = np.linspace(0, 1, len(lambda_rows)).astype(np.float32)
    return path


@pytest.mark.parametrize("key, n_rows, workers", [("x_u8", 48, 1), ("x_i64", 49, 2)])
def test_fixed_width_rows_round_trip_one_window_each(tmp_path, lambda_h5, lambda_rows, key, n_rows, workers):
    out = tmp_path / "out"
    assert (
        prepare_h5(lambda_h5, out, "--x-key", key, "--seq-length", SEQ, "--stride", SEQ - 3, "--workers", workers) == 0
    )
    manifest = read_manifest(out)
    source = manifest.params.source
    dtype = "uint8" if key == "x_u8" else "int64"
    width = ROW if key == "x_u8" else ROW + 2
    assert source == {
        "kind": "hdf5",
        "x_key": key,
        "y_key": None,
        "dtype": dtype,
        "layout": "fixed",
        "rows": n_rows,
        "width": width,
    }
    found = shard_windows(out)
    assert set(found) == set(SPLIT_NAMES), "the row-ratio split fills every split"
    seen = [r[0] for rows in found.values() for r in rows]
    assert sorted(seen, key=int) == [str(i) for i in range(n_rows)], "every row exactly once, in one split"
    for rows in found.values():
        for seq_id, start, window, bases, tag in rows:
            assert (start, window, tag) == (0, 0, "")
            assert bases == lambda_rows[int(seq_id)].upper().encode()
    for split, rows in found.items():
        assert split_seq_ids(out, split) == sorted((r[0] for r in rows), key=int)
    assert main(["verify", str(out), "-q"]) == 0


def test_ragged_contigs_are_windowed_like_fasta(tmp_path, klebsiella_seqs):
    """The Klebsiella contigs as ragged int16 rows (even rows wrapped in BOS ... EOS): windows by the usual rule."""
    contigs = list(klebsiella_seqs.values())
    h5 = tmp_path / "kleb.h5"
    with h5py.File(h5, "w") as f:
        x = f.create_dataset("tokens", (len(contigs),), dtype=h5py.vlen_dtype(np.int16))
        for i, contig in enumerate(contigs):
            row = ids(contig).astype(np.int16)
            x[i] = np.concatenate(([BOS_ID], row, [EOS_ID])) if i % 2 == 0 else row
    out = tmp_path / "out"
    assert prepare_h5(h5, out, "--x-key", "tokens", "--seq-length", 4096, "--stride", 4000, "--workers", 2) == 0
    manifest = read_manifest(out)
    assert manifest.params.source["layout"] == "ragged"
    assert manifest.params.source["dtype"] == "int16"
    window = manifest.params.window_length
    covered = [np.zeros(len(c), bool) for c in contigs]
    per_row = np.zeros(len(contigs), np.int64)
    for rows in shard_windows(out).values():
        for seq_id, start, _, bases, _ in rows:
            row = int(seq_id)
            assert bases == contigs[row][start : start + window].upper().encode(), (row, start)
            covered[row][start : start + len(bases)] = True
            per_row[row] += 1
    assert all(c.all() for c in covered), "tail=end loses no base"
    lengths = np.array([len(c) for c in contigs])
    assert per_row.tolist() == window_counts(lengths, window, 4000).tolist()
    assert max(lengths) > window and per_row.max() > 1


def test_labels_become_the_windows_tags_and_the_data_module_yields_the_rows(tmp_path, lambda_h5, lambda_rows):
    out = tmp_path / "out"
    assert prepare_h5(lambda_h5, out, "--x-key", "x_i64", "--y-key", "y_str", "--seq-length", SEQ, "--stride", 900) == 0
    manifest = read_manifest(out)
    assert manifest.params.max_tag_bytes == len("phage-0")
    for rows in shard_windows(out).values():
        for seq_id, _, _, _, tag in rows:
            assert tag == f"phage-{int(seq_id) % 4}"
    dm = GenomicWebDataModule(str(out), micro_batch_size=4, num_workers=0, rc_prob=0.0, shuffle_buffer=8)
    dm.setup("fit")
    dm.setup("test")
    seen: dict[str, set[str]] = {}
    for split, loader in (
        ("train", dm.train_dataloader()),
        ("val", dm.val_dataloader()),
        ("test", dm.test_dataloader()),
    ):
        seen[split] = set()
        for batch in loader:
            tokens = dm.model_inputs(batch)["tokens"].numpy()
            for j, seq_id in enumerate(batch["seq_id"]):
                if not batch["keys"][j]:  # an exact-epoch filler
                    continue
                tag = ids(f"phage-{int(seq_id) % 4}")
                bases = ids(lambda_rows[int(seq_id)].upper())
                expect = np.concatenate(([BOS_ID], tag, [SEP_ID], bases, [EOS_ID]))
                assert tokens[j, : len(expect)].tolist() == expect.tolist()
                assert (tokens[j, len(expect) :] == PAD_ID).all()
                seen[split].add(seq_id)
    for split in ("val", "test"):
        assert seen[split] == set(split_seq_ids(out, split))
    assert seen["train"] <= set(split_seq_ids(out, "train")) and len(seen["train"]) >= 36


@pytest.mark.parametrize("y_key, label", [("y_int", lambda i: str(i % 3)), ("y_float", None)])
def test_numeric_labels_are_their_text(tmp_path, lambda_h5, y_key, label):
    out = tmp_path / "out"
    assert prepare_h5(lambda_h5, out, "--x-key", "x_i64", "--y-key", y_key, "--seq-length", SEQ, "--stride", 1000) == 0
    with h5py.File(lambda_h5) as f:
        values = f[y_key][:]
    for rows in shard_windows(out).values():
        for seq_id, _, _, _, tag in rows:
            assert tag == (label(int(seq_id)) if label else str(values[int(seq_id)]))


def test_split_lists_of_row_numbers_and_ratio_split(tmp_path, lambda_h5):
    lists = {"train": [0, 5, 7, 12, 48], "val": [1, 2], "test": [30]}
    args = []
    for split, rows in lists.items():
        path = tmp_path / f"{split}.txt"
        path.write_text("".join(f"{r}\n" for r in rows))
        args += ["--split-list", f"{split}={path}"]
    out = tmp_path / "lists"
    assert prepare_h5(lambda_h5, out, "--x-key", "x_i64", "--seq-length", SEQ, "--stride", 1000, *args) == 0
    found = shard_windows(out)
    assert {split: sorted(int(r[0]) for r in rows) for split, rows in found.items()} == lists
    assert read_manifest(out).unassigned_sequences == 49 - 8
    ratio = tmp_path / "ratio"
    assert (
        prepare_h5(
            lambda_h5, ratio, "--x-key", "x_i64", "--seq-length", SEQ, "--stride", 1000, "--split", "0.6,0.2,0.2"
        )
        == 0
    )
    by_split = {split: {r[0] for r in rows} for split, rows in shard_windows(ratio).items()}
    assert sum(len(s) for s in by_split.values()) == 49 == len(set().union(*by_split.values()))
    assert {split: len(s) for split, s in by_split.items()} == pytest.approx(
        {"train": 29, "val": 10, "test": 10}, abs=2
    )


def no_output(out: Path) -> bool:
    return not out.exists() or not (list(out.rglob("*.tar")) or list(out.rglob("manifest.json")))


def bad_files(tmp: Path, lambda_rows: list[str]) -> Path:
    """One file of datasets each wrong in one way (and a good x to pair with bad y's)."""
    path = tmp / "bad.h5"
    good = np.stack([ids(r) for r in lambda_rows[:10]])
    with h5py.File(path, "w") as f:
        f["x"] = good
        too_big = good.astype(np.int32)
        too_big[7, 123] = 300
        f["x_big"] = too_big
        negative = good.astype(np.int64)
        negative[3, 0] = -100
        f["x_negative"] = negative
        ragged = f.create_dataset("x_ragged_big", (3,), dtype=h5py.vlen_dtype(np.int32))
        ragged[0], ragged[1], ragged[2] = ids("ACGT").astype(np.int32), np.array([65, 70000, 67]), ids("GG")
        f["x_float"] = good.astype(np.float32)
        f["x_1d"] = good[0]
        f.create_dataset("x_str", data=lambda_rows[:10], dtype=h5py.string_dtype())
        empty_row = good.astype(np.int16)
        empty_row[4] = PAD_ID
        empty_row[4, 0] = BOS_ID
        f["x_empty_row"] = empty_row
        sep = good.copy()
        sep[6, 500] = SEP_ID
        f["x_sep"] = sep
        f["y_short"] = np.arange(9)
        f["y_control"] = np.array([b"ok"] * 9 + [b"tab\there"])
        f["y_2d"] = np.zeros((10, 2))
        f["grp/inner"] = np.zeros(2)
    return path


@pytest.mark.parametrize(
    "x_key, extra, expect",
    [
        ("missing", [], ["--x-key 'missing' is not in", "bad.h5", "'x'", "'x_big'", "'grp/inner'"]),
        ("grp", [], ["'grp'", "is a group, not a dataset", "'grp/inner'"]),
        ("x_big", [], ["row 7 of 'x_big'", "bad.h5", "token id 300 at position 123"]),
        ("x_negative", [], ["row 3 of 'x_negative'", "token id -100 at position 0"]),
        ("x_ragged_big", [], ["row 1 of 'x_ragged_big'", "token id 70000 at position 1"]),
        ("x_float", [], ["'x_float'", "dtype float32", "must be integers"]),
        ("x_str", [], ["'x_str'", "strings", "must be integers"]),
        ("x_1d", [], ["'x_1d'", "shape 1000", "2-D"]),
        ("x_empty_row", [], ["row 4 of 'x_empty_row'", "holds no bases", "--on-invalid skip"]),
        ("x_sep", [], ["row 6 of 'x_sep' in", "bad.h5 has byte 0x03 at position 500"]),
        ("x", ["--y-key", "y_short"], ["--y-key 'y_short'", "has 9 rows but --x-key 'x' has 10"]),
        ("x", ["--y-key", "nope"], ["--y-key 'nope' is not in"]),
        ("x", ["--y-key", "y_2d"], ["--y-key 'y_2d'", "shape 10x2"]),
        ("x", ["--y-key", "y_control"], ["label of row 9", "'tab\\there'", "printable"]),
        ("x", ["--tags", "lineage"], ["--tags lineage does not apply to --source hdf5"]),
    ],
)
def test_bad_input_is_refused_naming_the_culprit(tmp_path, lambda_rows, capsys, x_key, extra, expect):
    h5 = bad_files(tmp_path, lambda_rows)
    out = tmp_path / "out"
    assert prepare_h5(h5, out, "--x-key", x_key, "--seq-length", SEQ, "--stride", 1000, *extra) == 2
    err = capsys.readouterr().err
    for part in expect:
        assert part in err, (part, err)
    assert no_output(out)


def test_bad_files_are_refused(tmp_path, lambda_h5, capsys):
    text = tmp_path / "genome.h5"
    text.write_bytes(LAMBDA.read_bytes())
    cases = [
        ([text], f"input {text} is not an HDF5 file"),
        ([tmp_path / "absent.h5"], "does not exist"),
        ([lambda_h5, lambda_h5], "exactly one input FILE.h5, got 2"),
        ([tmp_path], "is a directory"),
    ]
    for inputs, message in cases:
        out = tmp_path / "out"
        args = ["prepare", "--source", "hdf5", *map(str, inputs), "--x-key", "x", "--out", str(out), "-q"]
        assert main(args) == 2
        assert message in capsys.readouterr().err
        assert no_output(out)
    assert main(["prepare", "--source", "hdf5", str(lambda_h5), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "--source hdf5 needs --x-key" in capsys.readouterr().err


def test_empty_rows_are_skipped_when_asked(tmp_path, lambda_rows):
    h5 = bad_files(tmp_path, lambda_rows)
    out = tmp_path / "out"
    args = ["--x-key", "x_empty_row", "--seq-length", SEQ, "--stride", 1000, "--on-invalid", "skip"]
    assert prepare_h5(h5, out, *args) == 0
    manifest = read_manifest(out)
    assert [s["seq_id"] for s in manifest.skipped] == ["4"]
    assert manifest.skipped[0]["file"] == str(h5) and "holds no bases" in manifest.skipped[0]["reason"]
    kept = sorted((r[0] for rows in shard_windows(out).values() for r in rows), key=int)
    assert kept == [str(i) for i in range(10) if i != 4]


def test_without_h5py_the_message_says_how_to_install(monkeypatch, lambda_h5):
    monkeypatch.setitem(sys.modules, "h5py", None)  # `import h5py` raises ImportError
    with pytest.raises(BadInputError, match=r"pip install 'bionemo-wds\[h5\]'"):
        hdf5_input_files([str(lambda_h5)], PrepareOptions(source="hdf5", x_key="x_i64"))


def test_reader_reads_a_row_once_for_its_consecutive_windows(lambda_h5, lambda_rows, monkeypatch):
    opts = PrepareOptions(source="hdf5", x_key="x_i64", progress=False)
    catalog = catalog_hdf5([str(lambda_h5)], opts)
    assert catalog.lengths.tolist() == [len(r) for r in lambda_rows]
    loads: list[int] = []
    original = Hdf5Reader._load

    def counting(self, row):
        loads.append(row)
        original(self, row)

    monkeypatch.setattr(Hdf5Reader, "_load", counting)
    reader = catalog.source.reader()
    try:
        for row in (3, 3, 3, 10, 10, 3):
            for start in range(0, ROW, 100):
                assert reader.read(row, start, start + 100) == lambda_rows[row][start : start + 100].encode()
    finally:
        reader.close()
    assert loads == [3, 10, 3]
    blocks: list[int] = []
    read_block = Hdf5Reader._read_block

    def counting_blocks(self, row):
        blocks.append(row)
        read_block(self, row)

    monkeypatch.setattr(Hdf5Reader, "_read_block", counting_blocks)
    reader = catalog.source.reader()
    try:
        assert b"".join(reader.read(row, 0, ROW) for row in range(len(lambda_rows))) == "".join(lambda_rows).encode()
        assert blocks == [0, 2, 6, 14, 30], "rows read in order come in doubling blocks (scan)"
        blocks.clear()
        for row in (7, 22, 8, 3):
            assert reader.read(row, 5, 10, UPPERCASE_TABLE) == lambda_rows[row][5:10].upper().encode()
        assert blocks == [7, 22, 8, 3], "shuffled windows read one row each"
    finally:
        reader.close()
    assert catalog.source.describe(3) == f"row 3 of 'x_i64' in {lambda_h5}, after its leading BOS,"


def test_contiguous_fixed_rows_are_read_straight_from_the_file(tmp_path, lambda_h5, lambda_rows):
    """h5py's default layout (contiguous, unfiltered) is read with positioned reads, big-endian ids too;
    chunked or compressed datasets go through h5py; both give the rows' bases."""
    h5 = tmp_path / "endian.h5"
    rows = lambda_rows[:30]
    big = np.full((len(rows), ROW + 1), PAD_ID, dtype=">i2")
    for i, row in enumerate(rows):
        big[i, 0] = BOS_ID
        big[i, 1 : 1 + len(row)] = ids(row)
    with h5py.File(h5, "w", userblock_size=512) as f:
        f["x"] = big
    for path, key, direct in ((h5, "x", True), (lambda_h5, "x_u8", True), (lambda_h5, "x_i64", False)):
        catalog = catalog_hdf5([str(path)], PrepareOptions(source="hdf5", x_key=key, progress=False))
        reader = catalog.source.reader()
        try:
            for row in (5, 0, 29, 6):
                assert reader.read(row, 10, 900) == lambda_rows[row][10:900].encode(), (key, row)
            assert (reader.fd >= 0) == direct, key
        finally:
            reader.close()


def test_row_extents_do_not_depend_on_the_block_size(tmp_path, lambda_h5, lambda_rows, monkeypatch):
    """Blocks of a few rows (and ragged blocks re-sized from the bytes read) find the same extents, and
    a bad id in a later block is named by its own row."""
    import bionemo_wds.prepare.sources.hdf5 as hdf5

    ragged_rows = [
        [],
        [BOS_ID, EOS_ID],
        ids("ACGT"),
        [BOS_ID, *ids("acg"), EOS_ID, PAD_ID, PAD_ID],
        [0, 0],
        [71, 0, 71],
    ]
    ragged_rows += [ids(r) for r in lambda_rows[:20]]
    h5 = tmp_path / "mixed.h5"
    with h5py.File(h5, "w") as f:
        x = f.create_dataset("r", (len(ragged_rows),), dtype=h5py.vlen_dtype(np.uint16))
        for i, row in enumerate(ragged_rows):
            x[i] = np.asarray(row, dtype=np.uint16)
        late = np.stack([ids(r) for r in lambda_rows[:12]]).astype(np.int16)
        late[11, 999] = 256
        f["late"] = late
        ragged = f.create_dataset("late_ragged", (len(late),), dtype=h5py.vlen_dtype(np.int16))
        for i, row in enumerate(late):  # the same rows, ragged
            ragged[i] = row
    opts = dict(source="hdf5", on_invalid="skip", progress=False)
    expected_lengths = [4, 3, 3] + [ROW] * 20
    for block_bytes, first_rows in ((hdf5.BLOCK_BYTES, hdf5.RAGGED_FIRST_ROWS), (2500, 2), (1, 1)):
        monkeypatch.setattr(hdf5, "BLOCK_BYTES", block_bytes)
        monkeypatch.setattr(hdf5, "RAGGED_FIRST_ROWS", first_rows)
        catalog = catalog_hdf5([str(h5)], PrepareOptions(**opts, x_key="r"))
        assert catalog.names == [str(i) for i in (2, 3, 5, *range(6, 26))]
        assert catalog.lengths.tolist() == expected_lengths
        assert [s["seq_id"] for s in catalog.skipped] == ["0", "1", "4"]
        reader = catalog.source.reader()
        assert [reader.read(i, 0, 5) for i in (2, 3, 5, 6)] == [b"ACGT", b"acg", b"G\x00G", lambda_rows[0][:5].encode()]
        assert reader.read(3, 1, 3, UPPERCASE_TABLE) == b"CG"  # the writers' upper-casing
        reader.close()
        for key in ("late", "late_ragged"):
            with pytest.raises(BadInputError, match=f"row 11 of '{key}' .* token id 256 at position 999"):
                catalog_hdf5([str(h5)], PrepareOptions(**opts, x_key=key))
        fixed = catalog_hdf5([str(lambda_h5)], PrepareOptions(**opts, x_key="x_i64"))
        assert fixed.lengths.tolist() == [len(r) for r in lambda_rows]


def test_manifest_notes_are_json(tmp_path, lambda_h5):
    out = tmp_path / "out"
    assert (
        prepare_h5(lambda_h5, out, "--x-key", "x_i64", "--y-key", "y_int", "--seq-length", SEQ, "--stride", 1000) == 0
    )
    source = json.loads((out / "manifest.json").read_text())["params"]["source"]
    assert source["y_key"] == "y_int" and source["rows"] == 49
