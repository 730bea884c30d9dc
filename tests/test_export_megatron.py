"""`export-megatron`: prepared splits as Megatron indexed datasets, read back with megatron-core.

The files are written with megatron-core's `IndexedDatasetBuilder` and read back here with its
`IndexedDataset`, the class Megatron-Bridge's Evo2 recipe reads: a sequence-layout split gives one
document per sequence equal to the FASTA sequence (then EOD 0), a windows-layout split one document
per stored window. Bad input is one line, exit 2, and leaves no file behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, main_here, read_fasta, split_seq_ids

from bionemo_wds.errors import OptionError
from bionemo_wds.export.megatron import EOD_ID, export_megatron
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare

with warnings.catch_warnings():  # megatron-core warns on import when Transformer Engine is absent
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

ROOT = Path(__file__).resolve().parents[1]
SEED = 13


@pytest.fixture(scope="module")
def sequences(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export_seq") / "data"
    prepare([str(KLEBSIELLA)], str(root), PrepareOptions(seed=SEED, layout="sequences", workers=1, progress=False))
    return root


@pytest.fixture(scope="module")
def fasta() -> dict[str, str]:
    return read_fasta(KLEBSIELLA)


def cli(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "bionemo_wds.cli", "export-megatron", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True)


def names(prefix: Path) -> list[tuple[str, int, int]]:
    rows = prefix.with_name(prefix.name + ".documents.tsv").read_text().splitlines()
    assert rows[0] == "document\tseq_id\tstart\tlength"
    out = []
    for i, row in enumerate(rows[1:]):
        doc, seq_id, start, length = row.split("\t")
        assert int(doc) == i
        out.append((seq_id, int(start), int(length)))
    return out


@pytest.mark.parametrize("split", ["train", "val"])
def test_sequences_read_back_equal_the_fasta(sequences, fasta, tmp_path, split):
    prefix = tmp_path / split
    report = export_megatron(str(sequences), prefix, split, progress=False)
    ds = IndexedDataset(str(prefix))
    named = names(prefix)
    assert len(ds) == report.documents == len(named) == len(split_seq_ids(sequences, split))
    assert {n for n, _, _ in named} == set(split_seq_ids(sequences, split))
    tokens = 0
    for i, (seq_id, start, length) in enumerate(named):
        doc = np.asarray(ds[i])
        assert doc.dtype == np.uint8 and start == 0 and length == len(fasta[seq_id])
        assert doc[-1] == EOD_ID and bytes(doc[:-1]).decode() == fasta[seq_id], seq_id
        tokens += len(doc)
    assert tokens == report.tokens and report.unit == "sequence"


@pytest.mark.slow
def test_windows_layout_exports_its_windows(kleb_1024, fasta, tmp_path):
    prefix = tmp_path / "windows"
    result = cli(kleb_1024, prefix, "--split", "val", "--no-eod", "--quiet")
    assert result.returncode == 0, result.stderr
    assert "documents (windows)" in result.stdout
    ds = IndexedDataset(str(prefix))
    named = names(prefix)
    assert len(ds) == len(named) == read_manifest(kleb_1024).splits["val"].n_samples
    for i, (seq_id, start, length) in enumerate(named):
        assert bytes(np.asarray(ds[i])).decode() == fasta[seq_id][start : start + length]


@pytest.mark.slow
def test_bad_input_is_one_line_and_writes_nothing(sequences, tmp_path, capsys):
    prefix = tmp_path / "out"
    result = cli(sequences, prefix, "--split", "dev")
    assert result.returncode == 2 and "has no 'dev' split" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = main_here(capsys, "export-megatron", sequences, "s3://bucket/out")
    assert result.returncode == 2 and "writes local files" in result.stderr
    assert result.stderr.count("export-megatron") == 1  # the prefix names the command, the message does not
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_damaged_shard_is_named_and_nothing_is_left(sequences, tmp_path, capsys):
    damaged = tmp_path / "data"
    damaged.mkdir()
    for item in sequences.iterdir():
        if item.is_dir():
            (damaged / item.name).mkdir()
            for f in item.iterdir():
                (damaged / item.name / f.name).write_bytes(f.read_bytes())
        else:
            (damaged / item.name).write_bytes(item.read_bytes())
    shard = sorted((damaged / "train").glob("*.tar"))[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    out = tmp_path / "out"
    out.mkdir()
    result = main_here(capsys, "export-megatron", damaged, out / "x", "--quiet")
    assert result.returncode == 2 and shard.name in result.stderr and "truncated" in result.stderr, result.stderr
    assert list(out.iterdir()) == []


def test_without_megatron_core_the_error_says_what_to_install(sequences, tmp_path, monkeypatch):
    """megatron-core is installed here; its absence is simulated by making its import fail."""
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.indexed_dataset", None)
    with pytest.raises(OptionError, match=r"megatron-core.*pip install --no-deps"):
        export_megatron(str(sequences), tmp_path / "x", progress=False)
