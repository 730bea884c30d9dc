"""`prepare --source parquet`: Parquet files with a text column, as Evo 1's OpenGenome ships them.

The corpus (`opengenome2_corpus.write_parquet_files`) holds the bundled Klebsiella contigs and lambda
pieces in ``data_opengenome_<split>.parquet`` files of several row groups each (each a catalog
task), one file with an extra column. Prepared, every stored window must be the row's bases (tags
taken out) at its recorded position, with the row's tag, in the split its file name gives; one and
two workers give the same bytes. Bad input is one line, exit 2, nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import main_here, refused, shard_windows, tree_bytes
from opengenome2_corpus import ROW_GROUP, Expected, check_windows, write_parquet_files

from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.sources import text_source
from bionemo_wds.prepare.sources.parquet import catalog_parquet

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SMALL = dict(source="parquet", seq_length=1024, split_from_names=True, samples_per_shard=300, progress=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, Expected]]:
    root = tmp_path_factory.mktemp("opengenome") / "parquet"
    return root, write_parquet_files(root)


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "data"
    prepare([str(corpus[0])], out, PrepareOptions(**SMALL, workers=1))
    return out


def test_row_groups_prepare_into_windows_equal_to_the_texts(corpus, prepared):
    root, expected = corpus
    assert pq.ParquetFile(root / "data_opengenome_train.parquet").num_row_groups > 2  # several tasks per file
    check_windows(prepared, expected)
    notes = read_manifest(prepared).params.source
    assert notes["records"] == len(expected) and notes["tagged"] == sum(bool(e.tag) for e in expected.values())
    assert {split for split in shard_windows(prepared)} == {"train", "val", "test"}


def test_one_and_two_workers_give_the_same_bytes(corpus, prepared, tmp_path, monkeypatch):
    monkeypatch.setattr(text_source, "POOL_BYTES", 0)  # a process pool even for this small corpus
    out = tmp_path / "two"
    prepare([str(corpus[0])], out, PrepareOptions(**SMALL, workers=2))
    assert tree_bytes(out) == tree_bytes(prepared)


def test_id_column_names_the_rows_and_rows_are_numbered_in_their_file(corpus, tmp_path):
    root, expected = corpus
    train = root / "data_opengenome_train.parquet"
    opts = PrepareOptions(source="parquet", id_column="id", workers=1)
    catalog = catalog_parquet([str(train)], opts, tmp_path / "c")
    ids = pq.read_table(train, columns=["id"]).column("id").to_pylist()
    assert catalog.names == ids
    plain = catalog_parquet([str(train)], PrepareOptions(source="parquet", workers=1), tmp_path / "d")
    assert plain.names[ROW_GROUP] == f"{train.name}:{ROW_GROUP}"  # the first row of the second row group
    assert plain.lengths.tolist() == [len(expected[name].bases) for name in plain.names]


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, capsys):
    tables = {
        "no_column": ({"sequence": ["ACGT"], "id": ["a"]}, ["has no column 'text'", "its columns: 'sequence', 'id'"]),
        "null_text": ({"text": ["ACGT", None]}, ["row 1 of", "null in column 'text'"]),
        "numbers": ({"text": [1, 2]}, ["column 'text' of", "holds int64, not text"]),
        "not_iupac": ({"text": ["ACGT", "ACGTNNxq"]}, ["the text of row 1 of", "'x' at position 6"]),
    }
    for name, (columns, says) in tables.items():
        path = tmp_path / f"{name}_train.parquet"
        pq.write_table(pa.table(columns), path)
        out = tmp_path / f"out_{name}"
        result = main_here(capsys, "prepare", "--source", "parquet", path, "--split-from-names", "--out", out, "-q")
        refused(result, str(path), *says)
        assert not out.exists(), name
    junk = tmp_path / "junk_train.parquet"
    junk.write_bytes(b"PAR1 but not Parquet")
    result = main_here(capsys, "prepare", "--source", "parquet", junk, "--split-from-names", "--out", tmp_path / "o")
    refused(result, f"input {junk} is not a readable Parquet file")
    assert not (tmp_path / "o").exists()
