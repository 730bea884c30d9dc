"""`prepare --source bed`: BED intervals over a reference (HyenaDNA's and Caduceus' hg38 recipe), here
intervals over the bundled Klebsiella assembly's 119 contigs.

Each interval (0-based, half-open) is a sequence ``chrom:start-end`` whose stored windows equal the
reference's bases; a split column fixes each interval's split (train, valid, validation, val, test);
without one the intervals are split as any sequences are. Bad input is one line naming file and
line, exit 2, nothing written.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, main_here, read_fasta, shard_windows, tree_bytes

from bionemo_wds.prepare import PrepareOptions, prepare

OPTS = {"source": "bed", "reference": str(KLEBSIELLA), "seq_length": 2048, "stride": 2000, "progress": False}
#: Split words as BED files write them, cycled over the intervals, and the split each means.
WORDS = ("train", "valid", "test", "train", "validation", "Train", "val", "TEST")
MEANS = {"train": "train", "valid": "val", "validation": "val", "val": "val", "test": "test"}


def intervals(contigs: dict[str, str]) -> list[tuple[str, int, int]]:
    """Intervals over every contig: the whole of some, a middle stretch of others, and two
    overlapping stretches of each long one (as BED files of windows have)."""
    out = []
    for k, (name, seq) in enumerate(contigs.items()):
        n = len(seq)
        if k % 3 == 0:
            out.append((name, 0, n))
        else:
            out.append((name, (k * 37) % (n // 3), n - (k * 11) % (n // 4)))
        if n > 50_000:
            out.append((name, 1000, 30_000))
            out.append((name, 20_000, n - 1))
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    return read_fasta(KLEBSIELLA)


@pytest.fixture(scope="module")
def split_bed(tmp_path_factory, reference) -> tuple[Path, dict[str, str]]:
    """A BED file with a split column (a comment and a track line first): (path, interval id -> split)."""
    path = tmp_path_factory.mktemp("bed") / "kleb_intervals.bed"
    rows = intervals(reference)
    lines = ["# intervals over the Klebsiella assembly\n", 'track name="kleb"\n']
    lines += [f"{c}\t{s}\t{e}\t{WORDS[k % len(WORDS)]}\n" for k, (c, s, e) in enumerate(rows)]
    path.write_text("".join(lines))
    return path, {f"{c}:{s}-{e}": MEANS[WORDS[k % len(WORDS)].lower()] for k, (c, s, e) in enumerate(rows)}


@pytest.fixture(scope="module")
def prepared(split_bed, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "data"
    prepare([split_bed[0]], out, PrepareOptions(**OPTS, workers=1))
    return out


def check_windows(out: Path, reference: dict[str, str]) -> dict[str, str]:
    """Every stored window equals the reference's bases and each interval is covered to its end;
    returns interval id -> split."""
    split_of: dict[str, str] = {}
    covered: dict[str, int] = {}
    for split, rows in shard_windows(out).items():
        for seq_id, start, _, bases, _ in rows:
            chrom, span = seq_id.rsplit(":", 1)
            lo = int(span.split("-")[0])
            assert bases.decode() == reference[chrom][lo + start : lo + start + len(bases)], (seq_id, start)
            assert split_of.setdefault(seq_id, split) == split
            covered[seq_id] = max(covered.get(seq_id, 0), start + len(bases))
    assert all(
        covered[seq_id] == int(seq_id.rsplit("-", 1)[1]) - int(seq_id.rsplit(":", 1)[1].split("-")[0])
        for seq_id in covered
    )
    return split_of


def test_windows_equal_the_reference_and_the_split_column_is_kept(prepared, split_bed, reference):
    _, splits = split_bed
    assert check_windows(prepared, reference) == splits


def test_the_sequence_table_names_the_bed_file(prepared, split_bed):
    path, splits = split_bed
    with open(prepared / "sequences.tsv") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert {row["seq_id"]: row["split"] for row in rows} == splits
    assert {row["file"] for row in rows} == {str(path)}


def test_the_same_bytes_with_writers_in_a_pool(prepared, split_bed, tmp_path):
    out = tmp_path / "data"
    prepare([split_bed[0]], out, PrepareOptions(**OPTS, workers=2))
    assert tree_bytes(out) == tree_bytes(prepared)


def test_without_a_split_column_the_intervals_are_split_by_length(tmp_path, reference):
    rows = intervals(reference)
    path = tmp_path / "kleb.bed.gz"
    path.write_bytes(gzip.compress("".join(f"{c} {s} {e}\n" for c, s, e in rows).encode(), mtime=0))
    out = tmp_path / "data"
    prepare([path], out, PrepareOptions(**OPTS, tags=r"regex:NODE_(\d+)_", workers=1))
    split_of = check_windows(out, reference)
    assert len(split_of) == len(rows) and set(split_of.values()) == {"train", "val", "test"}
    for rows_of_split in shard_windows(out).values():
        for seq_id, *_, tag in rows_of_split:
            assert tag == seq_id.split("_")[1]  # the interval's chromosome's tag


# --- bad input: one line naming file and line, exit 2, nothing written ------------------------------


def bed_run(capsys, tmp_path: Path, text: str, *extra: str, files: dict[str, str] | None = None):
    path = tmp_path / "x.bed"
    path.write_text(text)
    more = [tmp_path / name for name in files or {}]
    for name, body in (files or {}).items():
        (tmp_path / name).write_text(body)
    out = tmp_path / "out"
    args = ["prepare", path, *more, "--out", out, "--quiet", "--workers", "1", "--seq-length", "256", *extra]
    if "--source" not in extra:
        args += ["--source", "bed", "--reference", KLEBSIELLA]
    result = main_here(capsys, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert not out.exists()
    return lines[0], path


NODE = "NODE_116_length_272_cov_3.20359_ID_5527"  # 272 bases


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            f"{NODE}\t0\t100\ttrain\n{NODE}\t200\t273\ttrain\n",
            f"line 2: interval {NODE}:200-273 ends past {NODE}'s end (272 bases)",
        ),
        (f"{NODE}\t0\t100\nchrX\t0\t100\n", "line 2: chromosome 'chrX' is not in the reference"),
        (f"{NODE}\t100\t100\n", "line 1: start 100 must be 0 or more and below end 100"),
        (f"{NODE}\t100\t50\n", "line 1: start 100 must be 0 or more and below end 50"),
        (f"#c\n{NODE}\t1\tten\n", "line 2: start and end must be whole numbers, got '1' and 'ten'"),
        (f"{NODE}\t1\n", "line 1: a BED line needs chrom, start and end"),
        (f"{NODE}\t0\t100\ttrain\n{NODE}\t100\t200\tholdout\n", "line 2: the split column (4th) holds 'holdout'"),
        (f"{NODE}\t0\t100\n{NODE}\t0\t100\n", f"line 2: interval {NODE}:0-100 is given twice"),
        ("# nothing here\n", "holds no intervals"),
    ],
    ids=["past-end", "unknown-chrom", "empty", "reversed", "not-a-number", "two-columns", "bad-split", "twice", "none"],
)
def test_a_bad_line_is_named(capsys, tmp_path, text, message):
    line, path = bed_run(capsys, tmp_path, text)
    assert message in line and str(path) in line, line


def test_a_split_column_and_split_options_are_refused_together(capsys, tmp_path):
    (tmp_path / "train.txt").write_text(f"{NODE}:0-100\n")
    line, _ = bed_run(capsys, tmp_path, f"{NODE}\t0\t100\ttrain\n", "--split-list", f"train={tmp_path / 'train.txt'}")
    assert "the BED split column (4th) and --split-list both decide the split" in line, line
    line, _ = bed_run(capsys, tmp_path, f"{NODE}\t0\t100\ttrain\n", "--split", "0.5,0.5,0")
    assert "and --split both decide the split" in line, line


def test_files_that_disagree_on_the_split_column_are_refused(capsys, tmp_path):
    line, _ = bed_run(capsys, tmp_path, f"{NODE}\t0\t100\ttrain\n", files={"y.bed": f"{NODE}\t100\t200\n"})
    assert "has a split column (4th)" in line and "y.bed has none" in line, line


def test_the_reference_is_needed_and_only_for_bed(capsys, tmp_path):
    line, _ = bed_run(capsys, tmp_path, f"{NODE}\t0\t100\n", "--source", "bed")
    assert "--source bed needs --reference FASTA" in line, line
    line, _ = bed_run(capsys, tmp_path, f"{NODE}\t0\t100\n", "--source", "fasta", "--reference", str(KLEBSIELLA))
    assert "--reference is an option of --source bed" in line, line


def test_split_from_names_is_refused(capsys, tmp_path):
    line, _ = bed_run(capsys, tmp_path, f"{NODE}\t0\t100\n", "--split-from-names")
    assert "--split-from-names does not apply to --source bed" in line, line
