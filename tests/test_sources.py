"""The source registry (`prepare.sources`): ``--source NAME`` picks a reader; inputs that look like
another kind say so when they are refused."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from conftest import LAMBDA

from bionemo_wds.errors import BadInputError
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.options import SOURCE_KINDS
from bionemo_wds.prepare.sources import SOURCES, detect_source, input_files, reader_of


@pytest.fixture
def eden_dir(tmp_path):
    """A directory laid out as sharded Eden (`<sample>/glm_dataset_<sample>.sqlite`)."""
    root = tmp_path / "eden"
    (root / "s1").mkdir(parents=True)
    (root / "s1" / "glm_dataset_s1.sqlite").write_bytes(b"")
    return root


@pytest.fixture
def megatron_pair(tmp_path):
    """The two files of a Megatron indexed dataset (their contents do not matter to detection)."""
    for suffix in (".bin", ".idx"):
        (tmp_path / f"docs{suffix}").write_bytes(b"")
    return tmp_path / "docs"


@pytest.fixture
def h5_file(tmp_path):
    path = tmp_path / "rows.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros((2, 8), dtype=np.int32)
    return path


def test_every_source_kind_has_a_reader():
    kinds = ("fasta", "sharded-eden", "hdf5", "megatron", "bed", "jsonl", "parquet")
    assert tuple(SOURCES) == SOURCE_KINDS == kinds
    assert reader_of(PrepareOptions(source="hdf5")) is SOURCES["hdf5"]


def test_each_kind_is_detected(tmp_path, eden_dir, h5_file, megatron_pair):
    assert detect_source([str(LAMBDA)]) == "fasta"
    assert detect_source([str(LAMBDA.parent)]) == "fasta"  # a directory of FASTA files
    assert detect_source([str(eden_dir)]) == "sharded-eden"
    assert detect_source([str(h5_file)]) == "hdf5"
    assert detect_source([str(megatron_pair)]) == detect_source([f"{megatron_pair}.idx"]) == "megatron"
    (tmp_path / "half.bin").write_bytes(b"")
    assert detect_source([str(tmp_path / "half")]) is None  # a .bin without its .idx
    assert detect_source([str(LAMBDA), str(h5_file)]) is None  # mixed: no single kind
    assert detect_source([str(tmp_path / "missing.txt")]) is None
    for name in ("windows_5kb.fasta.gz.aa", "batch1.tar"):  # OpenGenome2's split parts and archives
        (tmp_path / name).write_bytes(b"")
        assert detect_source([str(tmp_path / name)]) == "fasta"
    (tmp_path / "regions.bed").write_text("chr1\t0\t100\n")
    assert detect_source([str(tmp_path / "regions.bed")]) == "bed"


def test_a_bed_file_given_as_fasta_is_refused_with_a_hint(tmp_path):
    (tmp_path / "regions.bed").write_text("chr1\t0\t100\ttrain\n")
    with pytest.raises(BadInputError, match=r"is not valid FASTA: .*; the input looks like --source bed$"):
        prepare([tmp_path / "regions.bed"], tmp_path / "out", PrepareOptions(progress=False))
    json_dir = tmp_path / "json"
    json_dir.mkdir()
    for name in ("data_metagenomics_train_chunk1.jsonl.gz", "b.ndjson", "c.jsonl.zst"):
        (json_dir / name).write_bytes(b"")
    assert detect_source([str(json_dir)]) == detect_source([str(json_dir / "b.ndjson")]) == "jsonl"
    (tmp_path / "rows.parquet").write_bytes(b"")
    assert detect_source([str(tmp_path / "rows.parquet")]) == "parquet"


def test_json_lines_given_as_fasta_are_refused_with_a_hint(tmp_path):
    path = tmp_path / "data_metagenomics_train_chunk1.jsonl"
    path.write_text('{"text": "ACGT"}\n')
    with pytest.raises(BadInputError, match=r"; the input looks like --source jsonl$"):
        prepare([path], tmp_path / "out", PrepareOptions(progress=False))


def test_an_eden_directory_given_as_fasta_is_refused_with_a_hint(eden_dir):
    with pytest.raises(BadInputError) as refused:
        input_files([str(eden_dir)], PrepareOptions())
    message = str(refused.value)
    assert message.startswith(f"directory {eden_dir} holds no FASTA files")
    assert message.endswith("; the input looks like --source sharded-eden")
    assert "\n" not in message


def test_an_hdf5_file_given_as_fasta_is_refused_with_a_hint(tmp_path, h5_file):
    with pytest.raises(BadInputError, match=r"; the input looks like --source hdf5$"):
        prepare([h5_file], tmp_path / "out", PrepareOptions(progress=False))


def test_a_megatron_pair_given_as_fasta_is_refused_with_a_hint(tmp_path, megatron_pair):
    (tmp_path / "docs.bin").write_bytes(bytes(range(65, 90)) * 4)  # token ids, not a FASTA record
    with pytest.raises(BadInputError, match=r"; the input looks like --source megatron$"):
        prepare([f"{megatron_pair}.bin"], tmp_path / "out", PrepareOptions(progress=False))


def test_a_refusal_without_another_kind_gets_no_hint(tmp_path):
    with pytest.raises(BadInputError) as refused:
        input_files([str(tmp_path / "missing.fa")], PrepareOptions())
    assert str(refused.value) == f"input {tmp_path / 'missing.fa'} does not exist"
