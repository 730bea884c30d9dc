"""`prepare --layout sequences` (format version 5): every base once, as pieces of whole sequences in
a seeded order; the sequence index file; verify, inspect, the manifest round trip, object stores."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pyfaidx
import pytest
import servers
from conftest import KLEBSIELLA, split_seq_ids, tree_bytes, write_fasta

from bionemo_wds.cli.main import main as cli_main
from bionemo_wds.errors import BadInputError, ManifestError
from bionemo_wds.format import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    SEQUENCE_INDEX_DTYPE,
    Manifest,
    iter_records,
    read_manifest,
    read_sequence_index,
    read_split_index,
)
from bionemo_wds.format.manifest import dumps_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.outdir import PLAN_NAME
from bionemo_wds.prepare.report import inspect_text, verify
from bionemo_wds.prepare.windows import PIECE, IdentityOrder, OrderedWindows, window_counts, window_table
from bionemo_wds.storage.store import Store

s3_server = servers.s3_server

#: 1 kb samples: pieces of 1021 bases, so most Klebsiella contigs make several
SEQS = dict(seq_length=1024, layout="sequences", progress=False)


@pytest.fixture(scope="module")
def kleb_fasta(tmp_path_factory) -> pyfaidx.Fasta:
    """The Klebsiella assembly, uncompressed and indexed by pyfaidx (the reference)."""
    path = tmp_path_factory.mktemp("kleb_fa") / "kleb.fa"
    with gzip.open(KLEBSIELLA, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return pyfaidx.Fasta(str(path), as_raw=True)


@pytest.fixture(scope="module")
def kleb_seqs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kleb_seqs") / "kleb"
    prepare([KLEBSIELLA], out, PrepareOptions(**SEQS, workers=1))
    return out


def stored_pieces(root: Path, split: str) -> list[tuple[str, int, int, str, str]]:
    """(seq_id, start, piece number, bases, tag) of every piece of `split`, reading its shards in order."""
    rows = []
    for shard in read_manifest(root).splits[split].shards:
        with open(root / shard.path, "rb") as fh:
            for _, block in iter_records(fh, shard.path):
                for i in range(len(block)):
                    bases = block.bases(i).tobytes().decode()
                    rows.append((block.seq_id[i], int(block.start[i]), int(block.window[i]), bases, block.tag[i]))
    return rows


def runs(pieces: list[tuple[str, int, int, str, str]]) -> list[list[tuple[str, int, int, str, str]]]:
    """The pieces cut where the sequence changes: one list per stored sequence, in storage order."""
    out: list[list[tuple[str, int, int, str, str]]] = []
    for piece in pieces:
        if out and out[-1][-1][0] == piece[0]:
            out[-1].append(piece)
        else:
            out.append([piece])
    return out


def piece_lengths(lengths: np.ndarray, window: int) -> list[int]:
    """The lengths of the pieces of sequences of `lengths`, one after the other."""
    return [min(window, int(n) - start) for n in lengths for start in range(0, int(n), window)]


# --- the pieces --------------------------------------------------------------------------------------------


def test_piece_counts_and_cuts_store_every_base_once():
    lengths = np.array([1, 9, 10, 11, 30, 31])
    assert window_counts(lengths, 10, 10, PIECE).tolist() == [1, 1, 1, 2, 3, 4]
    table = window_table(np.arange(6), lengths, 10, 10, PIECE)
    for row, length in enumerate(lengths.tolist()):
        mine = np.flatnonzero(table.seq_index == row)
        assert table.start[mine].tolist() == list(range(0, length, 10))  # consecutive, no overlap
        assert int(table.length[mine].sum()) == length
    # the tail pieces are short, not moved back to end at the sequence's end ("end" windows are)
    assert table.length.tolist()[-4:] == [10, 10, 10, 1] and table.start.tolist()[-1] == 30
    ordered = OrderedWindows.grid(np.arange(6), lengths, 10, 10, PIECE, IdentityOrder, 4)
    assert len(ordered) == len(table) and ordered.n_tokens == int(lengths.sum())
    whole = ordered.at(0, len(ordered))
    assert whole.start.tolist() == table.start.tolist() and whole.length.tolist() == table.length.tolist()
    assert np.concatenate([ordered.shard(k).length for k in range(ordered.n_shards)]).tolist() == table.length.tolist()


def test_pieces_rebuild_every_fasta_sequence_once_in_the_order_of_the_sequence_index(kleb_seqs, kleb_fasta):
    manifest = read_manifest(kleb_seqs)
    assert manifest.format_version == FORMAT_VERSION and manifest.params.layout == "sequences"
    window = manifest.params.window_length
    assert window == 1021
    seen: list[str] = []
    for split, info in manifest.splits.items():
        index = read_sequence_index(kleb_seqs, manifest, split)
        assert index is not None and index.dtype == SEQUENCE_INDEX_DTYPE
        stored = runs(stored_pieces(kleb_seqs, split))
        assert len(stored) == len(index) == info.sequence_index.sequences
        for (length, tag_bytes), pieces in zip(index.tolist(), stored):
            name = pieces[0][0]
            assert [p[2] for p in pieces] == list(range(len(pieces)))  # piece numbers in order
            assert [p[1] for p in pieces] == [k * window for k in range(len(pieces))]
            assert "".join(p[3] for p in pieces) == kleb_fasta[name][:]  # the FASTA sequence, exactly
            assert length == len(kleb_fasta[name]) and len(pieces) == -(-length // window)
            assert tag_bytes == 0 and {p[4] for p in pieces} == {""}
        names = [pieces[0][0] for pieces in stored]
        listed = split_seq_ids(kleb_seqs, split)
        assert sorted(names) == sorted(listed) and names != listed  # a seeded order, not the input's
        assert info.n_samples == sum(map(len, stored)) and info.n_tokens == info.n_bases == int(index["length"].sum())
        records = read_split_index(Store(kleb_seqs), manifest, split)
        assert int(records.rows["windows"].sum()) == info.n_samples
        seen += names
    assert sorted(seen) == sorted(kleb_fasta.keys())  # every sequence once, in one split


def test_tag_bytes_are_the_stored_tags(tmp_path, lambda_lineage_fa):
    path, seqs, _ = lambda_lineage_fa
    out = tmp_path / "tagged"
    prepare([path], out, PrepareOptions(seq_length=256, layout="sequences", tags="lineage", progress=False))
    manifest = read_manifest(out)
    total = 0
    for split in manifest.splits:
        index = read_sequence_index(out, manifest, split)
        stored = runs(stored_pieces(out, split))
        assert [len(pieces[0][4].encode()) for pieces in stored] == index["tag_bytes"].tolist()
        assert all(len(pieces[0][4]) > 0 for pieces in stored)
        assert ["".join(p[3] for p in pieces) for pieces in stored] == [seqs[pieces[0][0]] for pieces in stored]
        total += len(stored)
    assert total == len(seqs)


def test_pieces_of_sequences_cut_at_n_runs_in_zstd_records(tmp_path, lambda_seq):
    """--split-at-n rows are sequences of the index (each its own run of pieces, at its place in its
    FASTA record; piece numbers run on across a record's rows, so keys stay unique); zstd records."""
    seqs = {"a": lambda_seq[:9000] + "N" * 20 + lambda_seq[9000:20000], "b": lambda_seq[20000:21500]}
    seqs["c"] = lambda_seq[30000:31000] + "N" * 30 + lambda_seq[31000:40000] + "N" * 12 + lambda_seq[40000:]
    path = write_fasta(tmp_path / "cut.fa", seqs)
    out = tmp_path / "cut"
    opts = dict(seq_length=512, layout="sequences", split=(1.0, 0.0, 0.0), split_at_n=10, compress="zstd")
    prepare([path], out, PrepareOptions(**opts, progress=False))
    manifest = read_manifest(out)
    index = read_sequence_index(out, manifest, "train")
    window = manifest.params.window_length
    pieces = stored_pieces(out, "train")
    counts = (-(-index["length"].astype(np.int64) // window)).tolist()
    assert sum(counts) == len(pieces) == manifest.splits["train"].n_samples and len(index) == 6
    assert len({(p[0], p[2]) for p in pieces}) == len(pieces)  # unique keys
    covered = {name: ["N"] * len(seq) for name, seq in seqs.items()}
    at = 0
    for length, n in zip(index["length"].tolist(), counts):
        row, at = pieces[at : at + n], at + n
        name, start = row[0][0], row[0][1]
        assert {p[0] for p in row} == {name} and [p[1] for p in row] == [start + k * window for k in range(n)]
        assert [p[2] for p in row] == list(range(row[0][2], row[0][2] + n))
        bases = "".join(p[3] for p in row)
        assert bases == seqs[name][start : start + length] and "N" not in bases
        covered[name][start : start + length] = list(bases)
    assert {name: "".join(c) for name, c in covered.items()} == seqs  # every base but the N runs, once
    assert verify(out, progress=False).ok


# --- determinism -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_bytes_for_one_and_two_workers_and_a_seeded_order(tmp_path, kleb_seqs):
    two = tmp_path / "two"
    prepare([KLEBSIELLA], two, PrepareOptions(**SEQS, workers=2))
    assert tree_bytes(two) == tree_bytes(kleb_seqs)
    other = tmp_path / "seed7"
    prepare([KLEBSIELLA], other, PrepareOptions(**SEQS, seed=7, workers=1, split=(1.0, 0.0, 0.0)))
    mine = [p[0][0] for p in runs(stored_pieces(other, "train"))]
    again = tmp_path / "seed7-again"
    prepare([KLEBSIELLA], again, PrepareOptions(**SEQS, seed=8, workers=1, split=(1.0, 0.0, 0.0)))
    assert sorted(mine) == sorted(p[0][0] for p in runs(stored_pieces(again, "train")))
    assert mine != [p[0][0] for p in runs(stored_pieces(again, "train"))]  # another seed, another order


@pytest.mark.slow
def test_a_dask_local_cluster_writes_the_same_bytes(tmp_path, kleb_seqs, dask_scheduler):
    out = tmp_path / "dask"
    prepare([KLEBSIELLA], out, PrepareOptions(**SEQS, executor="dask", workers=2, scheduler=dask_scheduler))
    assert tree_bytes(out) == tree_bytes(kleb_seqs)


def test_a_rerun_does_nothing_and_an_interrupted_run_resumes(tmp_path, kleb_seqs):
    out = tmp_path / "kleb"
    shutil.copytree(kleb_seqs, out)
    assert prepare([KLEBSIELLA], out, PrepareOptions(**SEQS, workers=1)).status == "unchanged"
    # killed before its manifest: the plan is there, one shard and the sequence index are not
    manifest = read_manifest(out)
    (out / MANIFEST_NAME).unlink()
    (out / manifest.splits["train"].shards[2].path).unlink()
    (out / "train" / "sequence-index.npy").unlink()
    (out / PLAN_NAME).write_text(json.dumps({"request": manifest.request}))
    result = prepare([KLEBSIELLA], out, PrepareOptions(**SEQS, workers=1))
    assert result.status == "resumed" and result.shards_written == 1
    assert tree_bytes(out) == tree_bytes(kleb_seqs)


# --- verify, inspect, the manifest -------------------------------------------------------------------------


def test_verify_passes_and_names_a_damaged_sequence_index(tmp_path, kleb_seqs):
    assert verify(kleb_seqs, progress=False).ok
    out = tmp_path / "kleb"
    shutil.copytree(kleb_seqs, out)
    path = out / "val" / "sequence-index.npy"
    rows = np.load(path)
    window = read_manifest(out).params.window_length
    before = piece_lengths(rows["length"][:2], window)
    # swapped rows: same bytes count, another sha256; the pieces no longer match the records
    rows[[0, 1]] = rows[[1, 0]]
    after = piece_lengths(rows["length"][:2], window)
    first = next(k for k, (a, b) in enumerate(zip(before, after)) if a != b)
    np.save(path, rows)
    problems = verify(out, progress=False).problems
    assert problems and all("val/sequence-index.npy" in p for p in problems)
    assert any("sha256" in p for p in problems)
    assert any(f": piece {first} of the split has {before[first]} bases" in p for p in problems)
    checked: list[str] = []  # what verify passes: the sha256 checked, a difference collected
    read_sequence_index(out, read_manifest(out), "val", checked)
    assert len(checked) == 1 and "val/sequence-index.npy: sha256" in checked[0]
    path.write_bytes(path.read_bytes()[:-10])
    (problem,) = verify(out, progress=False).problems
    assert "val/sequence-index.npy" in problem and "bytes" in problem
    path.unlink()
    (problem,) = verify(out, progress=False).problems
    assert "val/sequence-index.npy is missing" in problem
    with pytest.raises(ManifestError, match=r"val/sequence-index.npy is missing"):
        read_sequence_index(out, read_manifest(out), "val")


def test_read_sequence_index_refuses_rows_or_bases_the_manifest_does_not_list(tmp_path, kleb_seqs):
    out = tmp_path / "kleb"
    shutil.copytree(kleb_seqs, out)
    obj = json.loads((out / MANIFEST_NAME).read_text())
    obj["splits"]["test"]["sequence_index"]["sequences"] += 1
    manifest = Manifest.from_json(obj, "m")
    with pytest.raises(ManifestError, match=r"test/sequence-index.npy holds .* sequences, but the manifest lists"):
        read_sequence_index(out, manifest, "test")
    obj["splits"]["test"]["sequence_index"]["sequences"] -= 1
    obj["splits"]["test"]["n_bases"] += 5
    with pytest.raises(ManifestError, match=r"test/sequence-index.npy: its sequences hold .* bases"):
        read_sequence_index(out, Manifest.from_json(obj, "m"), "test")
    del obj["splits"]["test"]["sequence_index"]
    with pytest.raises(ManifestError, match=r"m is damaged: it has no splits.test.sequence_index"):
        Manifest.from_json(obj, "m")


def test_a_version_5_manifest_round_trips_and_a_windows_one_has_no_layout(kleb_seqs, kleb_1024):
    text = (kleb_seqs / MANIFEST_NAME).read_text()
    manifest = read_manifest(kleb_seqs)
    assert manifest.to_json() == json.loads(text) and dumps_manifest(manifest.to_json()) == text
    assert manifest.splits["train"].sequence_index.path == "train/sequence-index.npy"
    assert manifest.request["layout"] == "sequences" and manifest.request["stride"] is None
    windows = read_manifest(kleb_1024)
    assert windows.format_version == FORMAT_VERSION and windows.params.layout == "windows"
    assert "layout" not in windows.to_json()["params"] and "layout" not in windows.request
    assert read_sequence_index(kleb_1024, windows, "train") is None
    obj = json.loads(text)
    obj["params"]["layout"] = "rows"
    with pytest.raises(ManifestError, match=r"params.layout 'rows'"):
        Manifest.from_json(obj, "m")


def test_inspect_shows_the_layout_and_the_sequence_index(kleb_seqs):
    text = inspect_text(kleb_seqs)
    assert "format v6" in text and "layout sequences" in text
    assert "sequence index: train/sequence-index.npy" in text


# --- refusals ----------------------------------------------------------------------------------------------


def test_stride_with_the_sequence_layout_is_refused_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["prepare", str(KLEBSIELLA), "--layout", "sequences", "--stride", "500", "--out", str(out), "-q"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--stride 500 does not apply to --layout sequences" in err[0]
    assert "GenomicDataset(stride=...)" in err[0]
    assert not out.exists() and not Path(f"{out}.lock").exists()


def test_a_window_database_with_the_sequence_layout_is_refused():
    opts = PrepareOptions(layout="sequences", window_db={"train": "w.db"}, source="sharded-eden")
    with pytest.raises(BadInputError, match=r"--window-db fixes the windows .* --layout sequences"):
        opts.check_layout()


def test_the_shipped_config_asks_for_the_sequence_layout(tmp_path):
    config = Path(__file__).resolve().parents[1] / "configs" / "prepare_sequences.yaml"
    out = tmp_path / "out"
    assert cli_main(["prepare", str(KLEBSIELLA), "--config", str(config), "--out", str(out), "-q"]) == 0
    manifest = read_manifest(out)
    assert manifest.params.layout == "sequences" and manifest.params.seq_length == 8192
    assert verify(out, progress=False).ok


# --- object stores -----------------------------------------------------------------------------------------


def test_prepare_into_a_bucket_reads_back_the_same_sequence_index(s3_server, kleb_seqs):
    pytest.importorskip("s3fs")
    s3_server.make_bucket("bucket")
    root = "s3://bucket/seqs"
    result = prepare([KLEBSIELLA], root, PrepareOptions(**SEQS, workers=1))
    assert result.status == "written"
    local = read_manifest(kleb_seqs)
    remote = read_manifest(root)
    assert remote.splits == local.splits
    for split in local.splits:
        fetched = read_sequence_index(root, remote, split)  # fetched whole, its sha256 checked
        assert fetched.tolist() == read_sequence_index(kleb_seqs, local, split).tolist()
    assert verify(root, progress=False).ok
    client = s3_server.client()
    other = (kleb_seqs / "val" / "sequence-index.npy").read_bytes()  # another split's file in its place
    client.put_object(Bucket="bucket", Key="seqs/train/sequence-index.npy", Body=other)
    with pytest.raises(ManifestError, match=r"s3://bucket/seqs/train/sequence-index.npy"):
        read_sequence_index(root, remote, "train")
