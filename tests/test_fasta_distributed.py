"""FASTA as OpenGenome2's ``fasta/`` tree distributes it: split gzip parts (a real byte split of the
bundled Klebsiella ``.fa.gz``, read as one stream), a tar archive of FASTA files (plain members read
in place, gzip members unpacked), and a file whose lines differ in width (rewrapped into the cache).

Every stored window equals its source's bases, the sequence table names each sequence's part set
or archive member, the bytes are the same with the index and the writers in a pool, a resumed run
gives the same bytes, and each bad input (a missing part, a member that is not FASTA, ...) is one
line, exit 2, nothing written.
"""

from __future__ import annotations

import csv
import gzip
import io
import tarfile
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, LAMBDA, lambda_pieces, main_here, read_fasta, shard_windows, tree_bytes
from test_prepare import resume_from

from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.sources import fasta_copies, fasta_index
from bionemo_wds.prepare.sources.fasta import index_fasta
from bionemo_wds.prepare.sources.fasta_index import index_files
from bionemo_wds.prepare.sources.fasta_inputs import fasta_inputs

PARTS = [f"windows_5kb.fasta.gz.a{c}" for c in "abcdefg"]
OPTS = {"seq_length": 2048, "stride": 2000, "progress": False}


def fasta_bytes(seqs: dict[str, str], widths: list[int] | None = None, crlf: bool = False) -> bytes:
    """FASTA text of `seqs`, 60 bases per line, or line widths cycling through `widths`."""
    out = []
    end = "\r\n" if crlf else "\n"
    for name, seq in seqs.items():
        out.append(f">{name} some description{end}")
        at, k = 0, 0
        while at < len(seq):
            width = widths[k % len(widths)] if widths else 60
            out.append(seq[at : at + width] + end)
            at, k = at + width, k + 1
    return "".join(out).encode()


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """OpenGenome2's fasta/ shapes from the bundled genomes: ``parts/`` (the Klebsiella .fa.gz cut
    into 7 parts), ``gtdb/batch1.tar`` (lambda plain, Klebsiella contigs renamed ``t_`` in a gzip
    and a plain member, beside a directory entry) and ``ragged.fa`` (lambda pieces renamed ``r_``,
    lines of 50, 61 and 77 bases, one record in CRLF): (root, name -> bases of every sequence)."""
    root = tmp_path_factory.mktemp("og2")
    data = KLEBSIELLA.read_bytes()
    (root / "parts").mkdir()
    size = -(-len(data) // len(PARTS))
    for k, name in enumerate(PARTS):
        (root / "parts" / name).write_bytes(data[k * size : (k + 1) * size])
    kleb = read_fasta(KLEBSIELLA)
    lam = read_fasta(LAMBDA)
    renamed = {f"t_{name}": seq for name, seq in list(kleb.items())[:24]}
    half = dict(list(renamed.items())[:12])
    rest = dict(list(renamed.items())[12:])
    (root / "gtdb").mkdir()
    with tarfile.open(root / "gtdb" / "batch1.tar", "w") as tar:
        info = tarfile.TarInfo("batch1")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        add_member(tar, "batch1/lambda.fa", gzip.decompress(LAMBDA.read_bytes()))
        add_member(tar, "batch1/genome_17.fna.gz", gzip.compress(fasta_bytes(half), mtime=0))
        add_member(tar, "batch1/genome_18.fa", fasta_bytes(rest, widths=[70]))
    pieces = {f"r_{name}": seq for name, seq in lambda_pieces(next(iter(lam.values())))[0].items()}
    first = dict(list(pieces.items())[:5])
    others = dict(list(pieces.items())[5:])
    (root / "ragged.fa").write_bytes(fasta_bytes(first, crlf=True) + fasta_bytes(others, widths=[50, 61, 77]))
    return root, {**kleb, **lam, **renamed, **pieces}


def inputs_of(root: Path) -> list[Path]:
    return [root / "parts", root / "gtdb" / "batch1.tar", root / "ragged.fa"]


@pytest.fixture(scope="module")
def prepared(tree, tmp_path_factory) -> Path:
    root, _ = tree
    out = tmp_path_factory.mktemp("prepared") / "data"
    prepare(inputs_of(root), out, PrepareOptions(**OPTS, workers=1))
    return out


def test_every_window_equals_its_source_bases(tree, prepared):
    _, seqs = tree
    covered: dict[str, int] = {}
    for rows in shard_windows(prepared).values():
        for seq_id, start, _, bases, _ in rows:
            assert bases.decode() == seqs[seq_id][start : start + len(bases)], (seq_id, start)
            covered[seq_id] = max(covered.get(seq_id, 0), start + len(bases))
    assert covered == {name: len(seq) for name, seq in seqs.items()}  # every sequence, to its last base


def test_the_sequence_table_names_the_part_set_and_the_member(tree, prepared):
    root, seqs = tree
    with open(prepared / "sequences.tsv") as fh:
        file_of = {row["seq_id"]: row["file"] for row in csv.DictReader(fh, delimiter="\t")}
    assert set(file_of) == set(seqs)
    kleb = next(iter(read_fasta(KLEBSIELLA)))
    assert file_of[kleb] == f"{root / 'parts' / 'windows_5kb.fasta.gz'}.{{aa..ag}}"
    lam = next(iter(read_fasta(LAMBDA)))
    assert file_of[lam] == f"{root / 'gtdb' / 'batch1.tar'}/batch1/lambda.fa"
    members = {file_of[name].rsplit("/", 1)[-1] for name in seqs if name.startswith("t_")}
    assert members == {"genome_17.fna.gz", "genome_18.fa"}
    assert {file_of[name] for name in seqs if name.startswith("r_")} == {str(root / "ragged.fa")}


def test_plain_members_are_read_in_place_the_rest_from_the_cache(tree, tmp_path):
    root, seqs = tree
    catalog = index_fasta(inputs_of(root), tmp_path / "cache", progress=False)
    source = catalog.source
    tar, cache = root / "gtdb" / "batch1.tar", tmp_path / "cache"
    assert dict(zip(source.origins, source.files)) == {
        f"{root / 'parts' / 'windows_5kb.fasta.gz'}.{{aa..ag}}": str(cache / "0000-windows_5kb.fasta"),
        f"{tar}/batch1/lambda.fa": str(tar),  # plain members: read in place
        f"{tar}/batch1/genome_17.fna.gz": str(cache / "0002-genome_17.fna"),
        f"{tar}/batch1/genome_18.fa": str(tar),
        str(root / "ragged.fa"): str(cache / "0004-rewrapped-ragged.fa"),
    }
    reader = source.reader()
    try:
        for seq, name in enumerate(catalog.names):
            assert reader.read(seq, 0, int(catalog.lengths[seq])).decode() == seqs[name], name
    finally:
        reader.close()
    again = index_fasta(inputs_of(root), tmp_path / "cache", progress=False)  # what a resumed run finds
    assert (again.names, again.lengths.tolist(), again.source.files) == (
        catalog.names,
        catalog.lengths.tolist(),
        source.files,
    )


def test_a_ragged_file_in_byte_ranges_indexes_as_one(tree, tmp_path, monkeypatch):
    root, _ = tree
    units = fasta_inputs([root / "ragged.fa"])
    (tmp_path / "whole").mkdir()
    ((whole_local, whole),) = index_files(units, tmp_path / "whole", False, TaskPlace())
    monkeypatch.setattr(fasta_index, "RANGE_BYTES", 5_000)  # ~10 ranges, each ragged or not
    (tmp_path / "ranges").mkdir()
    ((local, table),) = index_files(units, tmp_path / "ranges", False, TaskPlace())
    assert "rewrapped" in local and Path(local).read_bytes() == Path(whole_local).read_bytes()
    assert (table.names, table.lengths, table.offsets) == (whole.names, whole.lengths, whole.offsets)
    assert set(table.line_bases) == {80}


@pytest.mark.parametrize("block", [7, 100, 4096, fasta_copies.COPY_BYTES])
def test_a_rewrap_is_the_headers_and_bases_in_lines_of_80_for_any_block_size(tree, tmp_path, monkeypatch, block):
    root, seqs = tree
    monkeypatch.setattr(fasta_copies, "COPY_BYTES", block)
    (unit,) = fasta_inputs([root / "ragged.fa"])
    data = (root / "ragged.fa").read_bytes()
    start = data.index(b">r_lam002")  # from a header inside the file, as a tar member starts in its archive
    fasta_copies.rewrap(unit, root / "ragged.fa", start, len(data) - 1, tmp_path / "copy.fa")  # no last newline
    names = [name for name in seqs if name.startswith("r_")]
    expected = b"".join(
        f">{name} some description\n".encode()
        + b"".join(seqs[name][i : i + 80].encode() + b"\n" for i in range(0, len(seqs[name]), 80))
        for name in names[names.index("r_lam002") :]
    )
    assert (tmp_path / "copy.fa").read_bytes() == expected


def test_the_same_bytes_with_the_index_and_writers_in_a_pool(tree, prepared, tmp_path, monkeypatch):
    root, _ = tree
    monkeypatch.setattr(fasta_index, "POOL_INDEX_BYTES", 0)
    out = tmp_path / "data"
    parts = [root / "parts" / name for name in PARTS]  # the parts by name: the same inputs as their directory
    prepare([*parts, root / "gtdb" / "batch1.tar", root / "ragged.fa"], out, PrepareOptions(**OPTS, workers=2))
    assert tree_bytes(out) == tree_bytes(prepared)


@pytest.mark.slow
def test_the_same_bytes_on_a_dask_cluster(tree, prepared, tmp_path, dask_scheduler):
    root, _ = tree
    where = {"executor": "dask", "scheduler": dask_scheduler}
    prepare(inputs_of(root), tmp_path / "data", PrepareOptions(**OPTS, **where))
    assert tree_bytes(tmp_path / "data") == tree_bytes(prepared)


def test_a_resumed_run_gives_the_same_bytes(tree, prepared, tmp_path):
    root, _ = tree
    out = tmp_path / "data"
    resume_from(prepared, out, 2)
    result = prepare(inputs_of(root), out, PrepareOptions(**OPTS, workers=1))
    assert result.status == "resumed" and result.shards_reused == 2
    assert tree_bytes(out) == tree_bytes(prepared)


# --- bad input: one line, exit 2, nothing written ------------------------------------------------


def gap(root: Path, parts: Path) -> tuple[list[Path], str]:
    for name in PARTS:
        if not name.endswith(".ac"):
            (root / name).write_bytes((parts / name).read_bytes())
    return [root], f"split part {root / 'windows_5kb.fasta.gz.ac'} is missing"


def last_part_missing(root: Path, parts: Path) -> tuple[list[Path], str]:
    for name in PARTS[:-1]:
        (root / name).write_bytes((parts / name).read_bytes())
    return [root], "is not a readable gzip file"


def part_beside(root: Path, parts: Path) -> tuple[list[Path], str]:
    for name in PARTS:
        (root / name).write_bytes((parts / name).read_bytes())
    return [root / name for name in PARTS[:3]], f"split part {root / PARTS[3]} lies beside the given parts"


def readme_member(root: Path, parts: Path) -> tuple[list[Path], str]:
    with tarfile.open(root / "batch2.tar", "w") as tar:
        add_member(tar, "batch2/genome_1.fa", fasta_bytes({"g1": "ACGT" * 100}))
        add_member(tar, "batch2/README", b"GTDB release 220\n")
    return [root / "batch2.tar"], f"tar member batch2/README of {root / 'batch2.tar'} is not FASTA"


def text_member(root: Path, parts: Path) -> tuple[list[Path], str]:
    with tarfile.open(root / "batch3.tar", "w") as tar:
        add_member(tar, "genome_2.fa", b"this is no FASTA\n")
    return [root / "batch3.tar"], f"input {root / 'batch3.tar'}/genome_2.fa is not valid FASTA: line 1 holds bases"


def compressed_tar(root: Path, parts: Path) -> tuple[list[Path], str]:
    with tarfile.open(root / "batch4.tar.gz", "w:gz") as tar:
        add_member(tar, "genome_3.fa", fasta_bytes({"g3": "ACGT" * 100}))
    return [root / "batch4.tar.gz"], f"input {root / 'batch4.tar.gz'} is a compressed tar archive"


def blank_in_ragged(root: Path, parts: Path) -> tuple[list[Path], str]:
    text = fasta_bytes({"a": "ACGT" * 100}, widths=[50, 61]).split(b"\n")
    text[4] = b""
    (root / "blank.fa").write_bytes(b"\n".join(text))
    return [root / "blank.fa"], f"input {root / 'blank.fa'} is not valid FASTA: blank line 5 inside sequence 'a'"


@pytest.mark.parametrize(
    "case", [gap, last_part_missing, part_beside, readme_member, text_member, compressed_tar, blank_in_ragged]
)
def test_bad_input_is_one_line_exit_2_nothing_written(tree, tmp_path, capsys, case):
    root, _ = tree
    here = root / "bad" / case.__name__
    here.mkdir(parents=True)
    inputs, message = case(here, root / "parts")
    out = tmp_path / "out"
    result = main_here(capsys, "prepare", *inputs, "--out", out, "--quiet", "--workers", "1", "--seq-length", "256")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not out.exists()
