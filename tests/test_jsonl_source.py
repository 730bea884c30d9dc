"""`prepare --source jsonl`: JSON lines as OpenGenome2's ``json/`` tree ships them.

The corpus (`opengenome2_corpus.write_json_tree`) is the bundled Klebsiella contigs and lambda pieces
as ``data_metagenomics_<split>_chunk<N>.jsonl[.gz|.zst]`` files of mixed schemas, most texts starting
with a lineage tag (some repeating it inside), lower-case runs, a blank line. Prepared, every stored
window must be the record's bases (tags taken out) at its recorded position, with the record's tag,
in the split its file name gives; any worker count and either executor give the same bytes. Bad
input is one line, exit 2, nothing written.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import main_here, refused, shard_windows, tree_bytes
from opengenome2_corpus import SUBDIR, Expected, check_windows, write_json_tree

from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.sources import jsonl, text_source
from bionemo_wds.prepare.sources.jsonl import catalog_jsonl

SMALL = dict(source="jsonl", seq_length=1024, split_from_names=True, samples_per_shard=300, progress=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict[str, Expected]]:
    root = tmp_path_factory.mktemp("og2") / "json"
    return root, write_json_tree(root)


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> Path:
    """The corpus prepared by one process (the reference for the other runs)."""
    out = tmp_path_factory.mktemp("one") / "data"
    prepare([str(corpus[0])], out, PrepareOptions(**SMALL, workers=1))
    return out


def test_the_json_tree_prepares_into_windows_equal_to_the_texts(corpus, prepared):
    root, expected = corpus
    check_windows(prepared, expected)
    assert any(e.bases != e.bases.upper() for e in expected.values())  # soft-masked runs kept as they were
    notes = read_manifest(prepared).params.source
    tagged = sum(bool(e.tag) for e in expected.values())
    assert notes["records"] == len(expected) and notes["tagged"] == tagged and notes["empty"] == 0
    assert 0 < tagged < len(expected)
    lines = (prepared / "sequences.tsv").read_text().splitlines()
    assert len(lines) == len(expected) + 1
    name, file = lines[1].split("\t")[1], lines[1].split("\t")[-1]
    assert file == str(root / name.rsplit(":", 1)[0])  # the sequence table names the input file


def test_one_and_two_workers_give_the_same_bytes(corpus, prepared, tmp_path, monkeypatch):
    monkeypatch.setattr(text_source, "POOL_BYTES", 0)  # a process pool even for this small corpus
    out = tmp_path / "two"
    prepare([str(corpus[0])], out, PrepareOptions(**SMALL, workers=2))
    assert tree_bytes(out) == tree_bytes(prepared)


@pytest.mark.slow
def test_a_dask_cluster_gives_the_same_bytes(corpus, prepared, tmp_path, dask_scheduler):
    out = tmp_path / "dask"
    prepare([str(corpus[0])], out, PrepareOptions(**SMALL, workers=2, executor="dask", scheduler=dask_scheduler))
    assert tree_bytes(out) == tree_bytes(prepared)


def test_id_column_names_the_records(tmp_path):
    lines = [{"text": "ACGTACGTAA", "record": "a"}, {"text": "GGGCCCAAAT", "record": 7}, {"text": "TTTT", "x": 1}]
    path = tmp_path / "ids_train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines[:2]) + "\n")
    catalog = catalog_jsonl([str(path)], PrepareOptions(source="jsonl", id_column="record", workers=1), tmp_path / "c")
    assert catalog.names == ["a", "7"] and catalog.lengths.tolist() == [10, 10]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    with pytest.raises(text_source.SourceError, match=f"line 3 of {path} has no 'record'"):
        catalog_jsonl([str(path)], PrepareOptions(source="jsonl", id_column="record", workers=1), tmp_path / "d")
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps(lines[0]) + "\n" + json.dumps(lines[0]) + "\n")
    with pytest.raises(text_source.SourceError, match=f"'a'.*line 1 of {twice} and line 2 of {twice}"):
        catalog_jsonl([str(twice)], PrepareOptions(source="jsonl", id_column="record", workers=1), tmp_path / "e")


def test_a_resumed_run_reuses_the_parts_in_the_cache(corpus, tmp_path, monkeypatch):
    root, expected = corpus
    opts = PrepareOptions(source="jsonl", workers=1, progress=False)
    first = catalog_jsonl([str(root)], opts, tmp_path / "cache")
    monkeypatch.setattr(jsonl, "open_lines", None)  # no input is read again
    again = catalog_jsonl([str(root)], opts, tmp_path / "cache")
    assert again.names == first.names and again.tags == first.tags
    assert again.lengths.tolist() == first.lengths.tolist() == [len(expected[n].bases) for n in first.names]
    part = next((tmp_path / "cache").glob("jsonl-*.bases"))
    part.write_bytes(part.read_bytes()[:-1])  # cut short (a machine that crashed): read again
    with pytest.raises(TypeError):
        catalog_jsonl([str(root)], opts, tmp_path / "cache")


def test_empty_texts_are_refused_or_skipped(tmp_path):
    path = tmp_path / "e_train.jsonl"
    tag = "|d__Bacteria;p__Bacillota|"
    path.write_text("\n".join(json.dumps({"text": t}) for t in ("ACGT" * 300, tag, "ACGT" * 300)) + "\n")
    with pytest.raises(text_source.SourceError, match=f"line 2 of {path} holds no bases"):
        catalog_jsonl([str(path)], PrepareOptions(source="jsonl", workers=1), tmp_path / "c")
    catalog = catalog_jsonl([str(path)], PrepareOptions(source="jsonl", on_invalid="skip", workers=1), tmp_path / "d")
    assert catalog.names == ["e_train.jsonl:1", "e_train.jsonl:3"]
    assert [s["seq_id"] for s in catalog.skipped] == ["e_train.jsonl:2"]


def test_bad_input_is_one_line_and_nothing_is_written(tmp_path, capsys):
    good = json.dumps({"text": "ACGT" * 100, "record": "r1"})
    cases = {
        "not_json": ([good, '{"text": "ACGT', good], ["line 2 of", "is not JSON"]),
        "no_text": (
            [good, good, json.dumps({"sequence": "ACGT", "record": "r3"})],
            ["line 3 of", "lacks the field 'text'", "'sequence', 'record'"],
        ),
        "not_iupac": (
            [good, json.dumps({"text": "|d__Bacteria;p__Bacillota|ACGTACXGT"})],
            ["line 2 of", "'X' at position 6", "lineage tag taken out"],
        ),
        "not_a_string": ([json.dumps({"text": ["ACGT"]})], ["line 1 of", "'text' is a JSON array"]),
    }
    for name, (lines, says) in cases.items():
        path = tmp_path / f"{name}_train.jsonl.gz"
        path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
        out = tmp_path / f"out_{name}"
        refused(
            main_here(capsys, "prepare", "--source", "jsonl", path, "--split-from-names", "--out", out, "-q"),
            str(path),
            *says,
        )
        assert not out.exists(), name
    damaged = tmp_path / "damaged_train.jsonl.gz"
    damaged.write_bytes(gzip.compress((good + "\n").encode() * 50)[:-30])
    refused(
        main_here(capsys, "prepare", "--source", "jsonl", damaged, "--out", tmp_path / "o1", "-q"),
        "not a readable gzip file",
    )
    fine = tmp_path / "fine_train.jsonl"
    fine.write_text(good + "\n")
    result = main_here(
        capsys, "prepare", "--source", "jsonl", fine, "--tags", "lineage", "--out", tmp_path / "o2", "-q"
    )
    refused(result, "--tags lineage does not apply to --source jsonl")
    result = main_here(capsys, "prepare", fine, "--text-column", "seq", "--out", tmp_path / "o3", "-q")
    refused(result, "--text-column is an option of --source jsonl and parquet, not of --source fasta")
    for out in ("o1", "o2", "o3"):
        assert not (tmp_path / out).exists()


def test_split_names_come_from_the_files(corpus, prepared):
    """OpenGenome2's ``valid`` is our ``val``; each file's records all land in its split."""
    manifest = read_manifest(prepared)
    assert set(manifest.splits) == {"train", "val", "test"}
    by_split = {split: {w[0].rsplit(":", 1)[0] for w in windows} for split, windows in shard_windows(prepared).items()}
    assert by_split["val"] == {f"{SUBDIR}/data_metagenomics_valid_chunk1.jsonl.zst"}
    assert by_split["test"] == {f"{SUBDIR}/data_metagenomics_test_chunk1.jsonl.gz"}
    assert len(by_split["train"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("source", ["jsonl", "parquet"])
def test_the_scale_tool_times_the_record_sources(tmp_path, source):
    """`tools/scan_scale.py --source jsonl|parquet` at a tiny size, in a process of its own: one and two
    local workers find one catalog, and the rates per worker and per CPU second are printed."""
    import subprocess
    import sys

    tool = Path(__file__).resolve().parents[1] / "tools" / "scan_scale.py"
    args = ["--source", source, "--mbp", "6", "--files", "2", "--executors", "local", "--write-mbp", "2"]
    done = subprocess.run(
        [sys.executable, str(tool), *args, "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same catalog in every run: True" in done.stdout
    assert "catalog + check:" in done.stdout and "CPU time of local x1:" in done.stdout
    assert "write:" in done.stdout
