"""The Megatron round trip: a prepared dataset exported per split (`export-megatron`), then prepared
again from the exports (`prepare --source megatron --split-from-names`), gives back every split with
its sequences' names and bases.

Real files throughout: the bundled Klebsiella assembly, prepared with the sequence layout, exported
with megatron-core's `IndexedDatasetBuilder` and read back with its `IndexedDataset`; the commands
run in-process through `bionemo_wds.cli.main` (a subprocess would prove nothing more). Also: the
export makes a missing directory, its errors name the command once, `documents.tsv` names the
documents (``seq_id:start`` for windows), and a bad tsv or a bad split name is one line, exit 2.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, LAMBDA, read_fasta, shard_windows, split_seq_ids, write_fasta

from bionemo_wds.cli.main import main
from bionemo_wds.cli.prepare import parse_request, prepare_parser
from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.export.megatron import export_megatron
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.splits import split_in_name

with warnings.catch_warnings():  # megatron-core warns on import when Transformer Engine is absent
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

SEED = 7
SPLITS = ("train", "val", "test")


@pytest.fixture(scope="module")
def kleb() -> dict[str, str]:
    return read_fasta(KLEBSIELLA)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("round_trip") / "data"
    prepare([str(KLEBSIELLA)], str(root), PrepareOptions(seed=SEED, layout="sequences", workers=1, progress=False))
    return root


@pytest.fixture(scope="module")
def exported(dataset, tmp_path_factory) -> dict[str, Path]:
    """Every split exported as the guide does: ``mout/kleb_<split>``, mout/ not made beforehand."""
    mout = tmp_path_factory.mktemp("exports") / "mout"
    prefixes = {}
    for split in SPLITS:
        prefixes[split] = mout / f"kleb_{split}"
        assert main(["export-megatron", str(dataset), str(prefixes[split]), "--split", split, "--quiet"]) == 0
    return prefixes


def sequences_of(root: Path) -> dict[str, dict[str, str]]:
    """split -> sequence name -> its bases, joined from the pieces the shards hold."""
    out: dict[str, dict[str, str]] = {}
    for split, rows in shard_windows(root).items():
        pieces: dict[str, list[tuple[int, bytes]]] = {}
        for seq_id, start, _, bases, _ in rows:
            pieces.setdefault(seq_id, []).append((start, bases))
        out[split] = {name: b"".join(b for _, b in sorted(parts)).decode() for name, parts in pieces.items()}
    return out


def write_indexed(prefix: Path, docs: list[str], rows: list[str] | None = None) -> Path:
    """A pair of byte-level documents (EOD 0 after each), and a documents.tsv of `rows` when given."""
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint8)
    for doc in docs:
        ids = np.frombuffer(doc.encode(), dtype=np.uint8)
        builder.add_document(np.concatenate([ids, np.zeros(1, np.uint8)]), [len(ids) + 1])
    builder.finalize(f"{prefix}.idx")
    if rows is not None:
        header = "document\tseq_id\tstart\tlength\n"
        Path(f"{prefix}.documents.tsv").write_text(header + "".join(r + "\n" for r in rows))
    return prefix


def megatron(**kw) -> PrepareOptions:
    return PrepareOptions(source="megatron", workers=1, progress=False, **kw)


def one_line_error(capsys, argv: list[str]) -> str:
    """Run `bionemo-wds ARGV` in-process; it must fail with exit 2 and one line on stderr."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_round_trip_gives_back_every_split_with_its_names_and_bases(dataset, exported, kleb, tmp_path):
    back = tmp_path / "back"
    argv = ["prepare", "--source", "megatron", "--split-from-names", *map(str, exported.values())]
    assert main([*argv, "--out", str(back), "--layout", "sequences", "--quiet"]) == 0
    before, after = read_manifest(dataset), read_manifest(back)
    assert after.request["split_from_names"] is True and after.request["split"] is None
    got = sequences_of(back)
    for split in SPLITS:
        assert sorted(split_seq_ids(back, split)) == sorted(split_seq_ids(dataset, split)), split
        assert after.splits[split].n_bases == before.splits[split].n_bases
        assert got[split] == {name: kleb[name] for name in split_seq_ids(dataset, split)}, split


def test_documents_tsv_names_the_documents(exported, dataset, tmp_path):
    """Without --split-from-names the documents keep their names (and are split afresh)."""
    out = tmp_path / "named"
    prepare([str(exported["val"])], str(out), megatron(split=(1, 0, 0)))
    assert sorted(split_seq_ids(out, "train")) == sorted(split_seq_ids(dataset, "val"))


def test_windows_documents_are_named_seq_id_and_start(tmp_path):
    """A windows-layout export's documents overlap, several of one sequence: named ``seq_id:start``."""
    (lam,) = read_fasta(LAMBDA).values()
    starts = [0, 900, 1800]
    rows = [f"{i}\tNC_001416.1\t{s}\t1000" for i, s in enumerate(starts)]
    prefix = write_indexed(tmp_path / "lam_train", [lam[s : s + 1000] for s in starts], rows)
    out = tmp_path / "out"
    prepare([str(prefix)], str(out), megatron(split_from_names=True))
    windows = shard_windows(out)["train"]
    assert {w[0] for w in windows} == {f"NC_001416.1:{s}" for s in starts}
    for seq_id, start, _, bases, _ in windows:
        first = int(seq_id.split(":")[1])
        assert bases.decode() == lam[first + start : first + start + len(bases)]


def test_split_from_names_takes_fasta_splits_from_file_names(tmp_path, lambda_seq):
    """Generic over sources: FASTA files, one sequence each (fewer than the default ratios' three splits)."""
    train = write_fasta(tmp_path / "data_lambda_train.fa", {"left": lambda_seq[:30000]})
    val = write_fasta(tmp_path / "lambda.valid.fa", {"right": lambda_seq[30000:]})
    out = tmp_path / "out"
    prepare([str(train), str(val)], str(out), PrepareOptions(split_from_names=True, workers=1, progress=False))
    assert sorted(read_manifest(out).splits) == ["train", "val"]
    assert split_seq_ids(out, "train") == ["left"] and split_seq_ids(out, "val") == ["right"]


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("ecoli_train", 0),
        ("mout/ecoli_val.bin", 1),
        ("data_metagenomics_valid_chunk1.jsonl.gz", 1),
        ("Validation-part2.fa", 1),
        ("x.test.fa", 2),
        ("test", 2),
    ],
)
def test_split_words_in_file_names(name, split):
    assert split_in_name(name) == split


@pytest.mark.parametrize("name", ["ecoli", "trainset.fa", "contest_x.fa", "train_val.fa", "train/ecoli.fa"])
def test_a_name_without_one_split_word_is_refused(name):
    with pytest.raises(BadInputError, match="--split-from-names: the name of"):
        split_in_name(name)


def test_bad_split_names_and_rules_are_one_line(exported, tmp_path, capsys):
    plain = tmp_path / "kleb"
    for suffix in (".bin", ".idx"):
        Path(f"{plain}{suffix}").write_bytes(Path(f"{exported['train']}{suffix}").read_bytes())
    base = ["prepare", "--source", "megatron", "--split-from-names", "--out", str(tmp_path / "o"), "--quiet"]
    line = one_line_error(capsys, [*base, str(plain)])
    assert "kleb.idx holds no split word" in line and line.startswith("bionemo-wds prepare: error:")
    lists = tmp_path / "train.txt"
    lists.write_text("x\n")
    line = one_line_error(capsys, [*base, str(exported["train"]), "--split-list", f"train={lists}"])
    assert "--split-from-names and --split-list both decide the split" in line
    line = one_line_error(capsys, [*base, str(exported["train"]), str(exported["val"]), "--split", "1,0,0"])
    assert "--split 1.0,0.0,0.0 disagrees with --split-from-names" in line and "train, val" in line
    assert not (tmp_path / "o").exists()


def test_a_documents_tsv_that_disagrees_is_one_line_naming_it(tmp_path, capsys):
    (lam,) = read_fasta(LAMBDA).values()
    docs = [lam[:500], lam[500:1200]]
    cases = {
        "count": ["0\ta\t0\t500"],
        "length": ["0\ta\t0\t500", "1\tb\t0\t699"],
        "row": ["0\ta\t0\t500", "one\tb\t0\t700"],
        "twice": ["0\ta\t0\t500", "1\ta\t0\t700"],
    }
    expected = {
        "count": "names 1 documents but",
        "length": "document 1 is 699 bases long by it but 700",
        "row": "line 3: expected 1<TAB>SEQ_ID",
        "twice": "names two documents a:0",
    }
    for case, rows in cases.items():
        prefix = write_indexed(tmp_path / case, docs, rows)
        argv = ["prepare", "--source", "megatron", str(prefix), "--out", str(tmp_path / f"o_{case}"), "--quiet"]
        line = one_line_error(capsys, argv)
        assert f"{prefix}.documents.tsv" in line and expected[case] in line, line
    header = write_indexed(tmp_path / "header", docs)
    Path(f"{header}.documents.tsv").write_text("seq_id\tlength\n")
    with pytest.raises(SourceError, match=r"header\.documents\.tsv: the first line must be the header"):
        prepare([str(header)], str(tmp_path / "o"), megatron())


def test_two_inputs_naming_one_sequence_are_refused(exported, tmp_path):
    twin = tmp_path / "again_train"
    for suffix in (".bin", ".idx", ".documents.tsv"):
        Path(f"{twin}{suffix}").write_bytes(Path(f"{exported['train']}{suffix}").read_bytes())
    with pytest.raises(SourceError, match=r"is given by both .*kleb_train and .*again_train; names must be unique"):
        prepare([str(exported["train"]), str(twin)], str(tmp_path / "o"), megatron())


def test_export_makes_its_directory_and_names_the_command_once(dataset, tmp_path, capsys):
    prefix = tmp_path / "a" / "b" / "kleb_val"
    report = export_megatron(str(dataset), prefix, "val", progress=False)
    assert report.bin_path.is_file() and report.idx_path.is_file() and report.names_path.is_file()
    for argv in (["s3://bucket/x"], [str(tmp_path / "c" / "x"), "--split", "dev"]):
        line = one_line_error(capsys, ["export-megatron", str(dataset), *argv])
        assert line.count("export-megatron") == 1, line
    assert not (tmp_path / "c").exists()  # bad input makes no directory
    (tmp_path / "file").write_text("")
    with pytest.raises(BadInputError, match=r"cannot make the directory .*file/d: a file is in the way"):
        export_megatron(str(dataset), tmp_path / "file" / "d" / "x", "val", progress=False)


def test_split_from_names_option_config_key_and_help(tmp_path):
    config = tmp_path / "prepare.yaml"
    config.write_text("source: megatron\nsplit_from_names: true\ninputs: [mout/ecoli_train]\nout: data\n")
    assert parse_request(["--config", str(config)]).options.split_from_names is True
    assert parse_request(["x_train.fa", "--out", "o"]).options.split_from_names is False
    assert "--split-from-names" in " ".join(prepare_parser().format_help().split())
