"""`prepare --source sharded-eden` and `precompute-windows` on a real sharded-Eden layout.

The layout is built from the Klebsiella assembly: its contigs shorter than 60 kb, renamed
``BCR__ECT-SAMPLE{k}__CT1-{i}`` over five samples, one SQLite database per sample as Evo2's
sharded-Eden loader reads them, Parquet split lists by sample (1-3 train, 4 val, 5 test) and window
databases written by `bionemo-wds precompute-windows`. Every expectation is computed here from the
SQLite files with Eden's own ``substr`` rule, not from the package.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shard_windows, split_seq_ids

from bionemo_wds.cli.main import main
from bionemo_wds.cli.where import key_provenance
from bionemo_wds.format import read_manifest
from bionemo_wds.format.sequence_table import read_sequence_table
from bionemo_wds.prepare.groups import sample_id
from bionemo_wds.prepare.report import verify
from bionemo_wds.storage.store import Store

SEQ_LENGTH, STRIDE = 1024, 1000
WINDOW = SEQ_LENGTH - 3  # BOS, SEP, EOS; no tag
SAMPLES = 5
SPLIT_OF_SAMPLE = {"SAMPLE1": "train", "SAMPLE2": "train", "SAMPLE3": "train", "SAMPLE4": "val", "SAMPLE5": "test"}
#: Contig soft-masked (lower case) in its database: shards keep it lower case (upper with --case upper).
LOWER = "BCR__ECT-SAMPLE1__CT1-1"


@dataclass
class Layout:
    root: Path  # holds everything below
    dbs: Path  # SEQUENCE_DB_DIR
    contigs: dict[str, str]  # id -> bases as stored
    splits: dict[str, list[str]]  # split -> contig ids
    parquet: dict[str, Path]  # split -> Parquet list


def db_path(dbs: Path, sample: str) -> Path:
    return dbs / sample / f"glm_dataset_{sample}.sqlite"


def write_sample_dbs(dbs: Path, contigs: dict[str, str]) -> None:
    """One database per sample, the sharded-Eden schema."""
    by_sample: dict[str, list[tuple[str, str]]] = {}
    for contig, seq in contigs.items():
        by_sample.setdefault(str(sample_id(contig)), []).append((contig, seq))
    for sample, rows in by_sample.items():
        path = db_path(dbs, sample)
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE sequences (contig_id TEXT PRIMARY KEY, nt_sequence TEXT NOT NULL)")
            conn.executemany("INSERT INTO sequences VALUES (?, ?)", rows)
        conn.close()


def write_parquet(path: Path, ids: list[str], lengths: list[int], columns=("contig_id", "length")) -> Path:
    table = pa.table({columns[0]: pa.array(ids, pa.string()), columns[1]: pa.array(lengths, pa.int64())})
    pq.write_table(table, path)
    return path


def substr(dbs: Path, contig: str, start: int, length: int, upper: bool = False) -> bytes:
    """Eden's read of a window: ``substr(nt_sequence, start + 1, length)``, in the stored case (or upper-cased)."""
    conn = sqlite3.connect(db_path(dbs, str(sample_id(contig))))
    try:
        (text,) = conn.execute(
            "SELECT substr(nt_sequence, ?, ?) FROM sequences WHERE contig_id = ?", (start + 1, length, contig)
        ).fetchone()
    finally:
        conn.close()
    return (text.upper() if upper else text).encode()


def eden_windows(layout: Layout, split: str, min_length: int = 0) -> set[tuple[str, int, int, bytes]]:
    """(seq_id, window, start, bases) of Eden's rule, computed independently: 1 + (L - W) // S windows
    (W the model sequence length) or 1, window k at k * S, WINDOW bases (fewer at a contig's end)."""
    out = set()
    for contig in sorted(layout.splits[split]):
        length = len(layout.contigs[contig])
        count = 1 + (length - SEQ_LENGTH) // STRIDE if length >= SEQ_LENGTH else 1
        if min(length, SEQ_LENGTH) < min_length:
            continue
        for k in range(count):
            out.add((contig, k, k * STRIDE, substr(layout.dbs, contig, k * STRIDE, WINDOW)))
    return out


def prepare_argv(layout: Layout, out: Path, *extra: str) -> list[str]:
    return [
        "prepare",
        "--source",
        "sharded-eden",
        str(layout.dbs),
        "--out",
        str(out),
        "--seq-length",
        str(SEQ_LENGTH),
        "--stride",
        str(STRIDE),
        "--samples-per-shard",
        "300",
        "--windows-per-record",
        "7",
        "--workers",
        "1",
        "--quiet",
        *extra,
    ]


def parquet_args(layout: Layout) -> list[str]:
    return [a for split, path in layout.parquet.items() for a in ("--split-parquet", f"{split}={path}")]


def precompute(parquet: Path, out: Path, *extra: str) -> Path:
    argv = ["precompute-windows", str(parquet), str(out), "--window-size", str(SEQ_LENGTH), "--stride", str(STRIDE)]
    assert main([*argv, "--quiet", *extra]) == 0
    return out


@pytest.fixture(scope="module")
def layout(tmp_path_factory, klebsiella_seqs) -> Layout:
    root = tmp_path_factory.mktemp("eden")
    contigs: dict[str, str] = {}
    small = [seq for seq in klebsiella_seqs.values() if len(seq) < 60_000]
    for i, seq in enumerate(small):
        contigs[f"BCR__ECT-SAMPLE{i % SAMPLES + 1}__CT1-{i // SAMPLES + 1}"] = seq
    contigs[LOWER] = contigs[LOWER].lower()
    write_sample_dbs(root / "dbs", contigs)
    splits: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for contig in contigs:
        splits[SPLIT_OF_SAMPLE[str(sample_id(contig))]].append(contig)
    parquet = {
        split: write_parquet(root / f"{split}.parquet", ids, [len(contigs[c]) for c in ids])
        for split, ids in splits.items()
    }
    return Layout(root, root / "dbs", contigs, splits, parquet)


def windows_by_split(out: Path) -> dict[str, set[tuple[str, int, int, bytes]]]:
    return {
        split: {(seq_id, window, start, bases) for seq_id, start, window, bases, _ in rows}
        for split, rows in shard_windows(out).items()
    }


# --- prepare from the layout ---------------------------------------------------------------------


def test_every_window_is_the_sqlite_substring(tmp_path, layout, capsys):
    out = tmp_path / "out"
    argv = prepare_argv(layout, out, *parquet_args(layout))
    argv[argv.index("--workers") + 1] = "2"  # pool workers open their own connections
    assert main(argv) == 0
    manifest = read_manifest(out)
    assert manifest.params.window_length == WINDOW
    assert manifest.params.source["kind"] == "sharded-eden"
    seen = 0
    for split, rows in shard_windows(out).items():
        covered = {c: np.zeros(len(layout.contigs[c]), bool) for c in layout.splits[split]}
        for seq_id, start, _, bases, tag in rows:
            length = len(layout.contigs[seq_id])
            assert len(bases) == min(WINDOW, length - start)
            assert bases == substr(layout.dbs, seq_id, start, WINDOW), (seq_id, start)
            assert (bases == bases.lower() if seq_id == LOWER else bases == bases.upper()) and tag == ""
            covered[seq_id][start : start + len(bases)] = True
            seen += 1
        assert all(c.all() for c in covered.values())  # the default --tail end loses no base
        assert set(split_seq_ids(out, split)) == set(layout.splits[split])
    assert seen > 1000
    assert any(r[0] == LOWER for rows in shard_windows(out).values() for r in rows)
    assert main(["verify", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(argv) == 0  # the same request again: the databases are fingerprinted, nothing to do
    assert "nothing to do" in capsys.readouterr().out


def test_case_upper_upper_cases_the_soft_masked_contig(tmp_path, layout):
    out = tmp_path / "out"
    assert main(prepare_argv(layout, out, *parquet_args(layout), "--case", "upper")) == 0
    rows = [row for rows in shard_windows(out).values() for row in rows]
    assert any(seq_id == LOWER for seq_id, *_ in rows)
    for seq_id, start, _, bases, _ in rows:
        assert bases == substr(layout.dbs, seq_id, start, WINDOW, upper=True), (seq_id, start)
    assert read_manifest(out).params.case == "upper"


def test_same_windows_as_the_contigs_written_as_fasta(tmp_path, layout):
    eden = tmp_path / "eden"
    assert main(prepare_argv(layout, eden, *parquet_args(layout))) == 0
    fasta = tmp_path / "contigs.fa"
    with open(fasta, "w") as fh:
        for contig, seq in layout.contigs.items():
            fh.write(f">{contig}\n")
            fh.writelines(seq[i : i + 80] + "\n" for i in range(0, len(seq), 80))
    lists = []
    for split, ids in layout.splits.items():
        (tmp_path / f"{split}.txt").write_text("\n".join(ids) + "\n")
        lists += ["--split-list", f"{split}={tmp_path / f'{split}.txt'}"]
    plain = tmp_path / "fasta"
    argv = prepare_argv(layout, plain, *lists)
    argv[argv.index("sharded-eden")] = "fasta"
    argv[argv.index(str(layout.dbs))] = str(fasta)
    assert main(argv) == 0
    from_eden, from_fasta = windows_by_split(eden), windows_by_split(plain)
    assert set(from_eden) == set(from_fasta) == {"train", "val", "test"}
    for split in from_eden:
        assert from_eden[split] == from_fasta[split], split


@pytest.mark.parametrize(("with_parquet", "min_length"), [(True, 0), (False, 0), (True, 600)])
def test_window_databases_give_exactly_edens_windows(tmp_path, layout, with_parquet, min_length):
    extra = ["--window-min-length-threshold", str(min_length)]
    dbs = {split: precompute(path, tmp_path / f"{split}_windows.db", *extra) for split, path in layout.parquet.items()}
    out = tmp_path / "out"
    args = [a for split, path in dbs.items() for a in ("--window-db", f"{split}={path}")]
    assert main(prepare_argv(layout, out, *args, *(parquet_args(layout) if with_parquet else []))) == 0
    got = windows_by_split(out)
    for split in layout.splits:
        assert got[split] == eden_windows(layout, split, min_length), split
    assert verify(out, progress=False).ok  # the sequence table agrees with the manifest
    store, manifest = Store(str(out)), read_manifest(out)
    table = read_sequence_table(store, manifest)
    for seq_id, start, number, bases, _ in (w for rows in shard_windows(out).values() for w in rows):
        ((_, found),) = key_provenance(store, manifest, table, f"{seq_id}/{number}")  # `where` of the key
        assert (found.start, found.end) == (start, start + len(bases))
    source = read_manifest(out).params.source
    assert source["window_db"]["train"]["window_size"] == SEQ_LENGTH
    assert source["window_db"]["train"]["window_min_length_threshold"] == min_length
    if min_length:  # contigs of 199-371 bases lose their only window: listed, but not taken
        dropped = sum(1 for c in layout.splits["train"] if len(layout.contigs[c]) < min_length)
        assert dropped > 0
        assert source["window_db"]["train"]["listed_contigs_without_windows"] == dropped
        assert len(split_seq_ids(out, "train")) == len(layout.splits["train"]) - dropped


def test_default_split_keeps_samples_together_and_tags_contigs(tmp_path, layout):
    out = tmp_path / "out"
    assert main(prepare_argv(layout, out, "--tags", "sharded-eden")) == 0
    manifest = read_manifest(out)
    assert manifest.params.window_length == SEQ_LENGTH - 3 - len("<ctrl_bcr>")
    splits_of_sample: dict[str, set[str]] = {}
    used = set()
    for split, rows in shard_windows(out).items():
        for seq_id, start, _, bases, tag in rows:
            assert tag == "<ctrl_bcr>"
            assert bases == substr(layout.dbs, seq_id, start, len(bases))
            splits_of_sample.setdefault(str(sample_id(seq_id)), set()).add(split)
            used.add(seq_id)
    assert used == set(layout.contigs)  # every contig of every sample database
    assert len(splits_of_sample) == SAMPLES
    assert all(len(s) == 1 for s in splits_of_sample.values()), splits_of_sample
    assert set(manifest.splits) == {"train", "val", "test"}


# --- bad input: exit 2, a message naming the culprit, nothing in --out ----------------------------


def _missing_sample_db(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    ids = [*layout.splits["train"], "BCR__ECT-SAMPLE9__CT1-1"]
    path = write_parquet(tmp / "t.parquet", ids, [len(layout.contigs.get(c, "A" * 50)) for c in ids])
    expected = str(db_path(layout.dbs, "SAMPLE9"))
    return ["--split-parquet", f"train={path}"], ["BCR__ECT-SAMPLE9__CT1-1", expected]


def _contig_not_in_db(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    path = write_parquet(tmp / "t.parquet", ["BCR__ECT-SAMPLE2__CT1-999"], [100])
    return ["--split-parquet", f"train={path}"], ["BCR__ECT-SAMPLE2__CT1-999", str(db_path(layout.dbs, "SAMPLE2"))]


def _parquet_without_columns(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    ids = layout.splits["val"]
    path = write_parquet(tmp / "v.parquet", ids, [1] * len(ids), columns=("contig_id", "len"))
    return ["--split-parquet", f"val={path}"], [str(path), "lacks column(s) length"]


def _window_db_mismatch(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    db = tmp / "w.db"
    argv = ["precompute-windows", str(layout.parquet["train"]), str(db), "--window-size", "2048", "--stride", "999"]
    assert main([*argv, "-q"]) == 0
    return ["--window-db", f"train={db}"], [
        str(db),
        "window_size 2048 and stride 999",
        "--seq-length 1024 and --stride 1000",
    ]


def _no_sample_dbs(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    empty = tmp / "empty"
    (empty / "SAMPLE1").mkdir(parents=True)  # a sample directory without its database
    return ["--source", "sharded-eden", str(empty)], [str(empty), "holds no sample databases"]


def _length_disagrees(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    ids = layout.splits["test"]
    lengths = [len(layout.contigs[c]) for c in ids]
    lengths[2] += 7
    path = write_parquet(tmp / "t.parquet", ids, lengths)
    needles = [ids[2], str(lengths[2]), str(lengths[2] - 7), str(path), str(db_path(layout.dbs, "SAMPLE5"))]
    return ["--split-parquet", f"test={path}"], needles


def _listed_twice(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    ids = layout.splits["val"]
    path = write_parquet(tmp / "v.parquet", ids, [len(layout.contigs[c]) for c in ids])
    again = write_parquet(tmp / "t.parquet", ids[:1], [len(layout.contigs[ids[0]])])
    return ["--split-parquet", f"val={path}", "--split-parquet", f"test={again}"], [ids[0], str(path), str(again)]


def _listed_twice_in_one_file(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    ids = [*layout.splits["val"], layout.splits["val"][3]]
    path = write_parquet(tmp / "v.parquet", ids, [len(layout.contigs[c]) for c in ids])
    return ["--split-parquet", f"val={path}"], [ids[-1], str(path), "twice"]


def _window_db_contig_not_in_its_parquet(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    db = precompute(layout.parquet["val"], tmp / "val_as_train.db")
    first = sorted(layout.splits["val"])[0]
    args = ["--split-parquet", f"train={layout.parquet['train']}", "--window-db", f"train={db}"]
    return args, [first, str(db), str(layout.parquet["train"])]


def _window_db_unknown_contig(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    ids = ["BCR__ECT-SAMPLE3__CT1-500", *layout.splits["train"]]
    parquet = write_parquet(tmp / "t.parquet", ids, [5000] + [len(layout.contigs[c]) for c in ids[1:]])
    db = precompute(parquet, tmp / "t.db")
    return ["--window-db", f"train={db}"], ["BCR__ECT-SAMPLE3__CT1-500", str(db)]


def _description_tags(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    return ["--tags", "description"], ["--tags description", "sharded-eden"]


def _non_ascii(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    dbs = tmp / "dbs"
    contigs = {"BCR__ECT-S1__CT1-1": "ACGT" * 400, "BCR__ECT-S1__CT1-2": "ACGT" * 100 + "é" + "ACGT" * 100}
    write_sample_dbs(dbs, contigs)
    # one sample is one group: one split, or the group count (checked before the scan) is the error
    argv = ["--source", "sharded-eden", str(dbs), "--split", "1,0,0"]
    return argv, ["BCR__ECT-S1__CT1-2", "non-ASCII", "position 400"]


def _not_a_database(layout: Layout, tmp: Path) -> tuple[list[str], list[str]]:
    dbs = tmp / "dbs"
    path = db_path(dbs, "SAMPLE1")
    path.parent.mkdir(parents=True)
    path.write_text("contig_id,nt_sequence\nBCR__ECT-SAMPLE1__CT1-1,ACGT\n")
    return ["--source", "sharded-eden", str(dbs)], [str(path)]


BAD_INPUTS = {
    "missing sample database": _missing_sample_db,
    "contig not in its database": _contig_not_in_db,
    "Parquet without the columns": _parquet_without_columns,
    "window database of another size and stride": _window_db_mismatch,
    "no sample databases": _no_sample_dbs,
    "listed length disagrees": _length_disagrees,
    "contig in two splits": _listed_twice,
    "contig twice in one list": _listed_twice_in_one_file,
    "window database contig not in its split's Parquet": _window_db_contig_not_in_its_parquet,
    "window database names an unknown contig": _window_db_unknown_contig,
    "description tags": _description_tags,
    "non-ASCII bases": _non_ascii,
    "sample database that is no SQLite file": _not_a_database,
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_naming_the_culprit(tmp_path, layout, capsys, case):
    extra, needles = BAD_INPUTS[case](layout, tmp_path)
    out = tmp_path / "out"
    argv = prepare_argv(layout, out)
    if "--source" in extra:  # the case brings its own SEQUENCE_DB_DIR
        at = extra.index("--source")
        argv[argv.index(str(layout.dbs))] = extra[at + 2]
        extra = extra[:at] + extra[at + 3 :]
    capsys.readouterr()
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bionemo-wds prepare: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists() or not [*out.rglob("*.tar"), *out.rglob("manifest.json")]


# --- precompute-windows --------------------------------------------------------------------------


def test_precompute_writes_edens_schema_metadata_and_counts(tmp_path, layout, capsys):
    db = tmp_path / "train.db"
    assert (
        main(["precompute-windows", str(layout.parquet["train"]), str(db), "--window-size", "1024", "--stride", "1000"])
        == 0
    )
    assert "windows of" in capsys.readouterr().out
    conn = sqlite3.connect(db)
    try:
        tables = {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
        assert set(tables) == {"metadata", "window_mappings"}
        assert [r[1:4] for r in conn.execute("PRAGMA table_info(metadata)")] == [
            ("key", "TEXT", 0),
            ("value", "INTEGER", 1),
        ]
        assert [(r[1], r[2], r[3], r[5]) for r in conn.execute("PRAGMA table_info(window_mappings)")] == [
            ("window_idx", "INTEGER", 0, 1),
            ("sequence_id", "TEXT", 1, 0),
            ("window_in_seq_idx", "INTEGER", 1, 0),
        ]
        (index,) = conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"  # not autoindexes
        ).fetchall()
        assert index == ("idx_sequence_id", "window_mappings")
        assert [r[2] for r in conn.execute("PRAGMA index_info(idx_sequence_id)")] == ["sequence_id"]
        meta = dict(conn.execute("SELECT key, value FROM metadata"))
        rows = conn.execute("SELECT window_idx, sequence_id, window_in_seq_idx FROM window_mappings").fetchall()
    finally:
        conn.close()
    ids = sorted(layout.splits["train"])
    expected = []
    for contig in ids:
        length = len(layout.contigs[contig])
        count = 1 + (length - 1024) // 1000 if length >= 1024 else 1
        expected += [(contig, k) for k in range(count)]
    assert rows == [(i, contig, k) for i, (contig, k) in enumerate(expected)]
    assert meta == {
        "window_size": 1024,
        "stride": 1000,
        "window_min_length_threshold": 0,
        "total_windows": len(expected),
        "distinct_sequences": len(ids),
    }


def test_precompute_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["precompute-windows", "--help"])
    text = capsys.readouterr().out
    for needle in ("SPLIT.parquet", "OUT.db", "--window-size", "--stride", "--window-min-length-threshold", "--quiet"):
        assert needle in text
    assert "--seq-length" in text and "contig_id" in text


def test_precompute_replaces_an_existing_database_only_when_complete(tmp_path, layout, capsys):
    db = precompute(layout.parquet["val"], tmp_path / "out.db")
    before = db.read_bytes()
    bad = write_parquet(tmp_path / "bad.parquet", ["x"], [1], columns=("id", "length"))
    assert main(["precompute-windows", str(bad), str(db)]) == 2
    assert "lacks column(s) contig_id" in capsys.readouterr().err
    assert db.read_bytes() == before

    # killed while writing a large database: the old one stays, and the next run clears the leftover
    n = 100_000  # 3M windows: several seconds of writing
    big = write_parquet(tmp_path / "big.parquet", [f"BCR__ECT-S{i % 7}__CT1-{i}" for i in range(n)], [30_000] * n)
    argv = [sys.executable, "-m", "bionemo_wds.cli", "precompute-windows", str(big), str(db), "--window-size", "1024"]
    proc = subprocess.Popen(
        [*argv, "--stride", "1000"], env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    )
    temporary = tmp_path / f".out.db.tmp-{proc.pid}"
    deadline = time.monotonic() + 60
    while not (temporary.exists() and temporary.stat().st_size > 0) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed; make the input larger"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert db.read_bytes() == before
    assert temporary.exists()
    precompute(layout.parquet["test"], db)
    assert not temporary.exists()
    assert list(tmp_path.glob(".out.db.tmp-*")) == []
    conn = sqlite3.connect(db)
    try:
        assert dict(conn.execute("SELECT key, value FROM metadata"))["distinct_sequences"] == len(layout.splits["test"])
    finally:
        conn.close()


@pytest.mark.parametrize("encoding", ["UTF-8", "UTF-16le"])
def test_reader_reads_ranges_by_blob_or_substr_alike(tmp_path, encoding):
    """UTF-8 databases are read by blob ranges (bounded memory), others by substr: the same bases."""
    from bionemo_wds.prepare.sources.eden_reader import EdenReader, EdenSource

    path = tmp_path / "glm_dataset_S1.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA encoding = '{encoding}'")
    conn.execute("CREATE TABLE sequences (contig_id TEXT PRIMARY KEY, nt_sequence TEXT NOT NULL)")
    bases = "ACGTacgtNNRY" * 1000
    conn.execute("INSERT INTO sequences VALUES (?, ?)", ("BCR__ECT-S1__CT1-1", bases))
    conn.commit()
    conn.close()
    reader = EdenReader(EdenSource([str(path)], ["BCR__ECT-S1__CT1-1"], np.zeros(1, dtype=np.int64)))
    try:
        for start, end in ((0, 1), (0, len(bases)), (5, 4000), (11990, 12000), (7, 7)):
            assert reader.read(0, start, end) == bases[start:end].encode()
        assert reader.blob_ok[0] is (encoding == "UTF-8")
    finally:
        reader.close()
