"""Provenance: the sequence table (sequences.tsv), `provenance(batch)` and `bionemo-wds where`, checked
against the FASTA bases each sample holds (read with pyfaidx from the file the table names)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyfaidx
import pytest
import servers
from conftest import KLEBSIELLA, as_format_before_6, read_fasta, shard_windows, tree_bytes, write_fasta

from bionemo_wds.cli.main import main as cli_main
from bionemo_wds.cli.where import key_provenance
from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE
from bionemo_wds.errors import ManifestError
from bionemo_wds.format import read_manifest
from bionemo_wds.format.manifest import dumps_manifest
from bionemo_wds.format.manifest_types import SEQUENCE_TABLE_KEY
from bionemo_wds.format.sequence_table import (
    SEQUENCE_TABLE_NAME,
    MissingSequenceTableError,
    escape,
    read_sequence_table,
    table_problems,
    unescape,
    write_sequence_table,
)
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.dataset import GenomicDataset
from bionemo_wds.load.provenance import Provenance
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.report import verify
from bionemo_wds.storage.store import Store

SEED = 5
LAMBDA_ID = "gi|9626243|ref|NC_001416.1|"
s3_server = servers.s3_server
#: The N run planted in one contig, cut out by --split-at-n 10 (its sequence becomes two table rows).
N_RUN = "N" * 40


def options(**kw: Any) -> PrepareOptions:
    return PrepareOptions(
        **{"seq_length": 1024, "seed": SEED, "split_at_n": 10, "tags": "description", "progress": False, **kw}
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    """Two plain FASTA files (pyfaidx reads them): 30 Klebsiella contigs, one with an N run planted
    (two table rows), each tagged by its description (one holds a backslash); and lambda, in a file whose
    name holds a tab (tags cannot: they are printable ASCII)."""
    folder = tmp_path_factory.mktemp("provenance_inputs")
    seqs = dict(list(read_fasta(KLEBSIELLA).items())[:30])
    name = max(seqs, key=lambda n: len(seqs[n]))
    seqs[name] = seqs[name][:30000] + N_RUN + seqs[name][30000:]
    tags = {n: f"kp{i % 3}" for i, n in enumerate(seqs)}
    tags[next(iter(seqs))] = "with\\backslash"
    kleb = write_fasta(folder / "kleb.fa", seqs, tags)
    lam = write_fasta(folder / "lambda\tphage.fa", read_fasta(KLEBSIELLA.parent / "lambda_phage_NC_001416.fa.gz"))
    return kleb, lam


@pytest.fixture(scope="module")
def windows(inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prov") / "windows"
    prepare([inputs[0]], out, options())
    return out


@pytest.fixture(scope="module")
def lambda_windows(inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prov") / "lambda"
    prepare([inputs[1]], out, options(tags="none", split=(1.0, 0.0, 0.0), split_at_n=None))
    return out


@pytest.fixture(scope="module")
def sequences(inputs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prov") / "sequences"
    prepare([inputs[0]], out, options(layout="sequences"))
    return out


def fasta_bases(p: Provenance) -> str:
    """The bases `p` names, read from the file the table names, on its strand."""
    with pyfaidx.Fasta(p.file, as_raw=True, sequence_always_upper=False) as fa:
        bases = str(fa[p.seq_id][p.start : p.end])
    return bases[::-1].encode().translate(COMPLEMENT_TABLE).decode() if p.strand == "-" else bases


def row_bases(batch: dict[str, Any], i: int) -> str:
    """Row `i`'s bases in a compact (unpacked) batch."""
    n = int(np.asarray(batch["lengths"])[i])
    return bytes(np.asarray(batch["bases"])[i, :n]).decode()


def packed_documents(batch: dict[str, Any], i: int) -> list[str]:
    """The bases of each document of packed row `i`."""
    tokens = np.asarray(batch["tokens"])[i]
    out, pos = [], 0
    for size, prefix in zip(np.asarray(batch["doc_tokens"])[i].tolist(), np.asarray(batch["doc_prefix"])[i].tolist()):
        if size == 0:
            break
        out.append(bytes(tokens[pos + prefix : pos + size - 1]).decode())
        pos += size
    return out


def checked(ds: GenomicDataset, batches: int) -> list[Provenance]:
    """Provenance of the first `batches` compact batches, each record's bases checked against the FASTA."""
    seen: list[Provenance] = []
    for b, batch in enumerate(ds):
        if b == batches:
            break
        found = ds.provenance(batch)
        real = [i for i, d in enumerate(np.asarray(batch["dataset"]).tolist()) if d >= 0]
        if "doc_tokens" in batch:
            docs = {i: packed_documents(batch, i) for i in real}
            assert [p.row for p in found] == [i for i in real for _ in docs[i]]
            expected = [d for i in real for d in docs[i]]
        else:
            assert [p.row for p in found] == real
            expected = [row_bases(batch, i) for i in real]
        for p, bases in zip(found, expected):
            assert fasta_bases(p) == bases, p
        seen += found
    return seen


def test_stored_windows_trace_back_to_their_fasta_bases(windows, inputs):
    ds = GenomicDataset(str(windows), "train", 16, model_inputs=False, rc_prob=0.5, seed=SEED)
    seen = checked(ds, 6)
    assert {p.strand for p in seen} == {"+", "-"} and {p.split for p in seen} == {"train"}
    assert {p.file for p in seen} == {str(inputs[0])} and {p.dataset for p in seen} == {str(windows)}
    # the group of a piece --split-at-n cut is its sequence; tags come from the table, not the batch
    assert all(p.group == p.seq_id and p.tag.startswith(("kp", "with\\")) for p in seen)
    # model-input batches carry what provenance needs, and give the same records
    model = GenomicDataset(str(windows), "train", 16, rc_prob=0.5, seed=SEED)
    assert model.provenance(next(iter(model))) == checked(ds, 1)


def test_windows_cut_at_load_trace_back(sequences):
    ds = GenomicDataset(
        str(sequences), "train", 8, model_inputs=False, rc_prob=0.5, seq_length=600, stride=450, seed=SEED
    )
    seen = checked(ds, 6)
    assert {p.strand for p in seen} == {"+", "-"}
    assert all(p.end - p.start <= 600 for p in seen)


def test_packed_documents_trace_back_each_on_its_own_strand(sequences):
    ds = GenomicDataset(
        str(sequences), "train", 2, model_inputs=False, rc_prob=0.5, seq_length=8192, pack=True, seed=SEED
    )
    seen = checked(ds, 4)
    rows: dict[int, set[str]] = {}
    for p in seen:
        rows.setdefault(p.row, set()).add(p.strand)
    assert any(len(strands) == 2 for strands in rows.values())  # documents of one row on both strands
    model = GenomicDataset(str(sequences), "train", 2, rc_prob=0.5, seq_length=8192, pack=True, seed=SEED)
    assert model.provenance(next(iter(model))) == checked(ds, 1)


def test_a_blend_names_each_sample_s_dataset_and_filler_has_none(windows, lambda_windows, inputs):
    blend = [{"path": str(windows), "weight": 1.0}, {"path": str(lambda_windows), "weight": 0.1}]
    ds = GenomicDataset(datasets=blend, micro_batch_size=16, model_inputs=False, rc_prob=0.5, seed=SEED)
    seen = checked(ds, 8)
    assert {p.dataset for p in seen} == {str(windows), str(lambda_windows)}
    assert {p.file for p in seen} == {str(inputs[0]), str(inputs[1])} and {p.strand for p in seen} == {"+", "-"}
    # validation reads the datasets that have the split; the last rank's batches end in filler rows
    val = GenomicDataset(
        datasets=blend, split="val", micro_batch_size=7, model_inputs=False, seed=SEED, dp_rank=2, dp_size=3
    )
    assert {p.split for p in checked(val, 1000)} == {"val"}
    assert any((np.asarray(batch["dataset"]) < 0).any() for batch in val)


def test_the_data_module_delegates(windows):
    dm = GenomicWebDataModule(str(windows), micro_batch_size=4, seed=SEED)
    dm.setup("fit")
    batch = dm.on_after_batch_transfer(next(iter(dm.train_dataloader())), 0)
    found = dm.provenance(batch)
    assert len(found) == 4 and all(fasta_bases(p) for p in found)


def test_a_map_dataset_batch(windows):
    from torch.utils.data import DataLoader

    from bionemo_wds.load.map_dataset import GenomicMapDataset

    ds = GenomicMapDataset(str(windows), "train", rc_prob=0.5, seed=SEED)
    batch = next(iter(DataLoader(ds, batch_size=6)))
    found = ds.provenance(batch)
    assert [p.row for p in found] == list(range(6))
    lengths = batch["lengths"].tolist()
    for p, n, row in zip(found, lengths, batch["tokens"].tolist()):
        first = 2 + len(p.tag)  # BOS, the tag, SEP
        bases = bytes(row[first : first + n]).decode()
        assert p.end - p.start == n and fasta_bases(p).upper() == bases


def where_lines(capsys, *argv: str) -> tuple[int, list[dict[str, Any]]]:
    code = cli_main(["where", *argv, "--json"])
    out = capsys.readouterr()
    return code, [json.loads(line) for line in out.out.splitlines()] if code == 0 else [{"err": out.err}]


def test_where_prints_what_provenance_gives(windows, sequences, capsys):
    for root, kw in ((windows, {}), (sequences, {"seq_length": 8192, "pack": True})):
        ds = GenomicDataset(str(root), "train", 4, model_inputs=False, rc_prob=0.5, seed=SEED, **kw)
        batch = next(iter(ds))
        code, lines = where_lines(capsys, str(root), *[k for k in batch["keys"] if k])
        assert code == 0
        fields = ("split", "file", "seq_id", "start", "end", "tag", "group")
        assert [{k: line[k] for k in fields} for line in lines] == [
            {k: getattr(p, k) for k in fields} for p in ds.provenance(batch)
        ]
        assert {line["strand"] for line in lines} == {"+"}
    # a bare sequence id: its rows, two for the contig --split-at-n cut
    table = read_sequence_table(windows, read_manifest(windows))
    cut = next(row.seq_id for row in table if row.start > 0)
    code, lines = where_lines(capsys, str(windows), cut)
    assert code == 0 and len(lines) == 2 and lines[1]["start"] == lines[0]["end"] + len(N_RUN)
    code, lines = where_lines(capsys, str(windows), f"{cut}/99999")
    assert code == 2 and f"{cut}/99999" in lines[0]["err"] and str(windows) in lines[0]["err"]


def test_where_computes_every_stored_window_s_place(windows, sequences):
    """Every window the shards store, its key resolved from the manifest's window rules alone: the
    stored start and length, window numbers running on across the pieces --split-at-n cut."""
    for root in (windows, sequences):
        store, manifest = Store(str(root)), read_manifest(root)
        table = read_sequence_table(store, manifest)
        stored = [w for rows in shard_windows(root).values() for w in rows]
        for seq_id, start, number, bases, _ in stored:
            ((_, found),) = key_provenance(store, manifest, table, f"{seq_id}/{number}")
            assert (found.start, found.end) == (start, start + len(bases)), (seq_id, number)
        cut = {row.seq_id for row in table if row.start > 0}
        assert cut and cut <= {w[0] for w in stored if w[1] > 30000}


def test_the_table_lists_every_row_and_agrees_with_the_manifest(windows, sequences, inputs):
    for root in (windows, sequences):
        manifest = read_manifest(root)
        table = read_sequence_table(root, manifest)
        assert table_problems(table, manifest) == []
        assert manifest.sequence_table["rows"] == len(table) == 31  # 30 contigs, one cut in two
        fasta = read_fasta(inputs[0])
        assert list(dict.fromkeys(row.seq_id for row in table)) == list(fasta)
        for split, info in manifest.splits.items():
            assert sum(r.length for r in table if r.split == split) == info.n_bases
        pieces = [row for row in table if row.seq_id == table.rows[-1].seq_id or row.start > 0]
        assert all(fasta[r.seq_id][r.start : r.start + r.length].count("N") == 0 for r in pieces)


def test_sequences_in_no_split_list_are_rows_of_split_none(inputs, tmp_path):
    names = list(read_fasta(inputs[0]))
    lists = {}
    for split, chosen in (("train", names[:6]), ("val", names[6:8]), ("test", names[8:10])):
        lists[split] = str(tmp_path / f"{split}.txt")
        Path(lists[split]).write_text("\n".join(chosen) + "\n")
    out = tmp_path / "listed"
    prepare([inputs[0]], out, options(split_lists=lists))
    manifest = read_manifest(out)
    table = read_sequence_table(out, manifest)
    assert table_problems(table, manifest) == [] and verify(out, progress=False).ok
    unlisted = {row.seq_id for row in table if row.split == "none"}
    assert unlisted == set(names[10:]) and manifest.unassigned_sequences == len(unlisted)
    assert [row.seq_id for row in table if row.split == "val"] == names[6:8]


def test_a_tab_in_a_path_and_a_backslash_in_a_tag_are_escaped_and_read_back(windows, lambda_windows, inputs):
    text = (windows / SEQUENCE_TABLE_NAME).read_text()
    assert "with\\\\backslash" in text and all(line.count("\t") == 6 for line in text.splitlines())
    assert read_sequence_table(windows, read_manifest(windows)).rows[0].tag == "with\\backslash"
    text = (lambda_windows / SEQUENCE_TABLE_NAME).read_text()
    assert "lambda\\tphage.fa" in text and all(line.count("\t") == 6 for line in text.splitlines())
    assert read_sequence_table(lambda_windows, read_manifest(lambda_windows)).rows[0].file == str(inputs[1])
    for raw in ("a\\b", "tab\there", "new\nline\r", "\\t literal"):
        assert unescape(escape(raw)) == raw and "\t" not in escape(raw)


def test_verify_names_a_damaged_table(windows, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    shutil.copytree(windows, damaged)
    data = bytearray((damaged / SEQUENCE_TABLE_NAME).read_bytes())
    data[-10] ^= 0x01
    (damaged / SEQUENCE_TABLE_NAME).write_bytes(bytes(data))
    assert verify(windows, progress=False).ok
    assert cli_main(["verify", "-q", str(damaged)]) == 1
    err = capsys.readouterr().err
    assert "BAD" in err and SEQUENCE_TABLE_NAME in err
    with pytest.raises(ManifestError, match=SEQUENCE_TABLE_NAME):
        read_sequence_table(damaged, read_manifest(damaged))


def test_verify_names_a_table_that_disagrees_with_the_splits(windows, tmp_path):
    """A table consistent with its entry (size, sha256, rows) but with a row moved to another split."""
    moved = tmp_path / "moved"
    shutil.copytree(windows, moved)
    manifest = read_manifest(moved)
    rows = read_sequence_table(moved, manifest).rows
    i = next(i for i, row in enumerate(rows) if row.split == "train")
    rows[i] = rows[i]._replace(split="val")
    obj = json.loads((moved / "manifest.json").read_text())
    obj[SEQUENCE_TABLE_KEY] = write_sequence_table(Store(str(moved)), rows)
    (moved / "manifest.json").write_text(dumps_manifest(obj))
    problems = verify(moved, progress=False).problems
    assert any(SEQUENCE_TABLE_NAME in p and "train rows hold" in p for p in problems), problems
    assert any(SEQUENCE_TABLE_NAME in p and "val rows name" in p for p in problems), problems


def test_an_older_dataset_says_how_to_add_the_table_and_prepare_adds_it(inputs, tmp_path, capsys):
    out = tmp_path / "old"
    prepare([inputs[0]], out, options())
    as_format_before_6(out)  # a dataset prepared before the table existed: version 4, names in seq_ids
    before = tree_bytes(out)
    obj = json.loads((out / "manifest.json").read_text())
    del obj[SEQUENCE_TABLE_KEY]
    (out / "manifest.json").write_text(dumps_manifest(obj))
    (out / SEQUENCE_TABLE_NAME).unlink()
    ds = GenomicDataset(str(out), "train", 4, model_inputs=False, seed=SEED)
    with pytest.raises(MissingSequenceTableError, match=r"no sequence table.*same `bionemo-wds prepare`"):
        ds.provenance(next(iter(ds)))
    assert cli_main(["where", str(out), "x/0"]) == 2
    assert "no sequence table" in capsys.readouterr().err
    report = verify(out, progress=False)
    assert report.ok and any("no sequence table" in note for note in report.notes)
    result = prepare([inputs[0]], out, options())
    assert result.status == "table-added"
    assert tree_bytes(out) == before  # shards untouched; table and manifest as a fresh run writes them
    assert read_manifest(out).sequence_table["rows"] == 31
    assert prepare([inputs[0]], out, options()).status == "unchanged"


def test_the_table_in_a_bucket(s3_server, inputs, tmp_path, capsys):
    s3_server.make_bucket("bucket")
    root = "s3://bucket/lambda"
    prepare([inputs[1]], root, options(tags="none", split_at_n=None, split=(1.0, 0.0, 0.0)))
    local = tmp_path / "lambda"
    prepare([inputs[1]], local, options(tags="none", split_at_n=None, split=(1.0, 0.0, 0.0)))
    stored = s3_server.client().get_object(Bucket="bucket", Key=f"lambda/{SEQUENCE_TABLE_NAME}")["Body"].read()
    assert stored == (local / SEQUENCE_TABLE_NAME).read_bytes()
    table = read_sequence_table(root, read_manifest(root))
    assert [r.seq_id for r in table] == [LAMBDA_ID] and table.rows[0].length == 48502
    assert verify(root, progress=False).ok
    assert cli_main(["where", root, f"{LAMBDA_ID}/3"]) == 0
    assert f"{LAMBDA_ID}\t2997\t4018\t+" in capsys.readouterr().out
