"""`contains` and `leakage` (and `verify --leakage`) on real prepared datasets: a near-identical copy
of a Klebsiella contig planted in a second input is reported as a leak when the sequence-level split
parts it from its original, kept with it by ``--group-by similarity:0.95``, and found by `contains`;
both layouts, external evaluation sets, object stores and bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyfaidx
import pytest
import servers
from conftest import (
    KLEBSIELLA,
    LAMBDA,
    as_format_version_1,
    as_format_version_3,
    read_fasta,
    shard_windows,
    split_seq_ids,
    tree_bytes,
    write_fasta,
)

from bionemo_wds.cli.main import main
from bionemo_wds.format import read_manifest
from bionemo_wds.homology.leakage import leakage
from bionemo_wds.homology.membership import contains
from bionemo_wds.homology.sketch import KSIZE
from bionemo_wds.prepare import PrepareOptions, prepare

pytest.importorskip("sourmash")
pytest.importorskip("screed")

s3_server = servers.s3_server

#: Contigs of the bundled assembly in the small dataset: ~20 of 20-45 kb (NODE_36 to NODE_56) and a
#: few short ones, among them NODE_110, which is near-identical to NODE_105 (a real leak of the assembly).
NODES = (*range(36, 57), 74, 86, 94, 102, 105, 110)
#: The contig the copy is made of (24,091 bases): one the sequence-level split parts from a copy of
#: itself (the seed only orders contigs of equal length, so which contigs part depends on the lengths).
ORIGINAL_NODE = 48
COPY = "copy_of_NODE_48"
#: Windows of 1021 bases every 999: consecutive windows share 22 bases, so every 21-mer lies in one.
OPTIONS = dict(seq_length=1024, progress=False, workers=1)
SEEDS = range(51)


def mutate(seq: str, rate: float, seed: int) -> str:
    """`seq` with round(rate * len) distinct positions changed to another base (seeded)."""
    rng = np.random.default_rng(seed)
    codes = np.frombuffer(seq.upper().encode(), dtype=np.uint8)
    index = np.full(256, 0, dtype=np.uint8)
    index[list(b"ACGT")] = [0, 1, 2, 3]
    at = rng.choice(len(codes), round(rate * len(codes)), replace=False)
    out = codes.copy()
    out[at] = np.frombuffer(b"ACGT", np.uint8)[(index[codes[at]] + rng.integers(1, 4, len(at))) % 4]
    return out.tobytes().decode()


def reverse_complement(seq: str) -> str:
    return seq.upper().translate(str.maketrans("ACGTN", "TGCAN"))[::-1]


def kmer_set(seq: str, k: int = KSIZE) -> set[str]:
    """The canonical k-mers of `seq` (plain Python: the reference for the numpy codes)."""
    seq = seq.upper()
    out = set()
    for i in range(len(seq) - k + 1):
        kmer = seq[i : i + k]
        if set(kmer) <= set("ACGT"):
            out.add(min(kmer, reverse_complement(kmer)))
    return out


class Inputs:
    """The two FASTA inputs (a subset of the assembly, and the copy) and the sequences they hold."""

    def __init__(self, root: Path) -> None:
        kleb = read_fasta(KLEBSIELLA)
        named = {int(name.split("_")[1]): name for name in kleb}
        self.seqs = {named[n]: kleb[named[n]] for n in NODES}
        self.original = named[ORIGINAL_NODE]
        self.copy = mutate(self.seqs[self.original], 0.01, seed=27)
        self.kleb = write_fasta(root / "kleb.fa", self.seqs)
        self.copy_fa = write_fasta(root / "copy.fa", {COPY: self.copy})
        self.original_fa = write_fasta(root / "original.fa", {self.original: self.seqs[self.original]})
        self.far_fa = write_fasta(root / "far.fa", {"far_20pct": mutate(self.seqs[self.original], 0.20, seed=5)})
        self.root = root

    @property
    def paths(self) -> list[Path]:
        return [self.kleb, self.copy_fa]


def by_node(inputs: Inputs, node: int) -> str:
    """The name of contig NODE_`node` of the assembly."""
    (name,) = [n for n in inputs.seqs if n.startswith(f"NODE_{node}_")]
    return name


def split_of(root: Path | str, seq_id: str) -> str:
    """The split whose sequence table lists `seq_id`."""
    (split,) = [s for s in read_manifest(root).splits if seq_id in split_seq_ids(root, s)]
    return split


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Inputs:
    return Inputs(tmp_path_factory.mktemp("membership_inputs"))


@pytest.fixture(scope="module")
def apart(inputs, tmp_path_factory) -> tuple[int, Path]:
    """(seed, dataset): the first seed of `SEEDS` whose sequence-level split puts the copy and its
    original in different splits (windows layout, no similarity grouping)."""
    root = tmp_path_factory.mktemp("membership_apart")
    for seed in SEEDS:
        out = root / f"seed{seed}"
        prepare(inputs.paths, out, PrepareOptions(**OPTIONS, seed=seed))
        if split_of(out, COPY) != split_of(out, inputs.original):
            return seed, out
        shutil.rmtree(out)
    raise AssertionError(f"no seed of {SEEDS} splits the copy from its original")


@pytest.fixture(scope="module")
def grouped(inputs, apart, tmp_path_factory) -> Path:
    """The same inputs and seed, prepared with ``--group-by similarity:0.95``."""
    out = tmp_path_factory.mktemp("membership_grouped") / "ds"
    prepare(inputs.paths, out, PrepareOptions(**OPTIONS, seed=apart[0], group_by="similarity:0.95"))
    return out


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """`bionemo-wds ARGV`: (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def contains_json(capsys, dataset, *argv) -> dict[str, dict[str, list[dict]]]:
    """`contains --json`: query -> split -> hits."""
    code, out, err = run(capsys, "contains", dataset, *argv, "--json", "-q")
    assert code == 0, err
    return {m["query"]: {a["split"]: a["hits"] for a in m["splits"]} for m in json_lines(out)}


def leak_rows(capsys, dataset, *argv) -> dict[tuple[str, str], dict]:
    """`leakage --json`: (from, to) -> row."""
    code, out, err = run(capsys, "leakage", dataset, *argv, "--json", "-q")
    assert code == 0, err
    return {(row["source"], row["target"]): row for row in json_lines(out)}


def names_pair(row: dict, a: str, b: str) -> list:
    """The example of `row` pairing sequence `a` with `b` (``[]`` when none does)."""
    return [e for e in row["examples"] if e[0] == a and e[1] == b]


# --- the done-when scenario ---------------------------------------------------------------------------------


def test_the_sequence_level_split_leaks_the_copy_and_leakage_reports_it(capsys, inputs, apart):
    _, dataset = apart
    original = inputs.seqs[inputs.original]
    assert sum(a != b for a, b in zip(inputs.copy, original)) == round(0.01 * len(original))
    copy_split, original_split = split_of(dataset, COPY), split_of(dataset, inputs.original)
    rows = leak_rows(capsys, dataset)
    assert len(rows) == 6  # every ordered pair of train, val, test
    there = rows[(copy_split, original_split)]
    assert there["leaked_sequences"] >= 1 and there["leaked_bases"] >= len(inputs.copy)
    (example,) = names_pair(there, COPY, inputs.original)
    assert example[2] == pytest.approx(0.99, abs=0.005)
    back = rows[(original_split, copy_split)]  # the original is as much in the copy
    assert names_pair(back, inputs.original, COPY)
    assert there["sequence_share"] == there["leaked_sequences"] / there["sequences"]
    splits = read_manifest(dataset).splits
    for (source, _), row in rows.items():  # the windows cover every base (--tail end)
        assert (row["sequences"], row["bases"]) == (splits[source].n_sequences, splits[source].n_bases)
    assert there["base_share"] == there["leaked_bases"] / there["bases"]
    # the TSV says the same, one line per pair
    code, out, _ = run(capsys, "leakage", dataset, "-q")
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split("\t")[:4] == ["from", "to", "sequences", "leaked_sequences"]
    cells = [line.split("\t") for line in lines]
    (line,) = [c for c in cells if c[:2] == [copy_split, original_split]]
    assert int(line[3]) == there["leaked_sequences"] and int(line[6]) == there["leaked_bases"]
    # the Python API gives the rows the CLI prints
    report = leakage(str(dataset))
    assert {(leak.source, leak.target): leak.leaked_sequences for leak in report.leaks} == {
        pair: row["leaked_sequences"] for pair, row in rows.items()
    }


def test_verify_leakage_fails_naming_the_leaking_pair(capsys, inputs, apart):
    _, dataset = apart
    copy_split, original_split = split_of(dataset, COPY), split_of(dataset, inputs.original)
    code, out, err = run(capsys, "verify", dataset, "--leakage", "-q")
    assert code == 1
    bad = [line for line in err.splitlines() if line.startswith("BAD leakage")]
    (line,) = [line for line in bad if f"of {copy_split} " in line and f"in {original_split}," in line]
    assert line.endswith(f"e.g. {COPY} ~ {inputs.original}")  # the nearest pair of the two splits
    assert "problem(s)" in out
    rows = leak_rows(capsys, dataset)
    share = max(max(r["sequence_share"], r["base_share"]) for r in rows.values())
    assert run(capsys, "verify", dataset, "--leakage", "--max-leakage", share, "-q")[0] == 0


def test_similarity_groups_keep_the_copy_with_its_original_and_nothing_leaks_between_them(capsys, inputs, grouped):
    home = split_of(grouped, COPY)
    assert split_of(grouped, inputs.original) == home
    rows = leak_rows(capsys, grouped)
    for row in rows.values():
        assert not names_pair(row, COPY, inputs.original) and not names_pair(row, inputs.original, COPY)
    # exactly: neither is near-identical to anything stored outside their split
    found = contains_json(capsys, grouped, inputs.copy_fa, inputs.original_fa)
    for query in (COPY, inputs.original):
        assert {split for split, hits in found[query].items() if hits} == {home}
    # the clusters join every pair leakage would report at this identity (max containment >= either
    # direction's), so nothing leaks at all: the real pair NODE_110 ~ NODE_105 is kept together too
    assert {row["leaked_sequences"] for row in rows.values()} == {0}
    assert split_of(grouped, by_node(inputs, 110)) == split_of(grouped, by_node(inputs, 105))
    # whatever real leaks the assembly has left, a threshold above them passes
    share = max(max(r["sequence_share"], r["base_share"]) for r in rows.values())
    assert run(capsys, "verify", grouped, "--leakage", "--max-leakage", share, "-q")[0] == 0


def test_contains_finds_the_copy_and_its_original_in_their_split(capsys, inputs, grouped):
    home = split_of(grouped, COPY)
    code, out, _ = run(capsys, "contains", grouped, inputs.copy_fa, "-q")
    assert code == 0
    header, *lines = (line.split("\t") for line in out.splitlines())
    rows = {dict(zip(header, line))["split"]: dict(zip(header, line)) for line in lines}
    assert set(rows) == {"train", "val", "test"}
    assert rows[home]["found"] == "yes" and rows[home]["best_match"] == COPY
    assert float(rows[home]["identity"]) == 1.0 and rows[home]["matches"] == "2"
    assert all(r["found"] == "no" and r["matches"] == "0" for s, r in rows.items() if s != home)
    # --json carries every hit, exact and sketched, with the exact share the k-mer sets give
    found = contains_json(capsys, grouped, inputs.copy_fa)[COPY]
    best, other = found[home]
    assert best["seq_id"] == COPY and best["identity"] == 1.0 and best["containment"] == 1.0
    assert other["seq_id"] == inputs.original
    copy_kmers, original_kmers = kmer_set(inputs.copy), kmer_set(inputs.seqs[inputs.original])
    assert other["shared_kmers"] == len(copy_kmers & original_kmers)
    assert other["containment"] == pytest.approx(len(copy_kmers & original_kmers) / len(copy_kmers), abs=1e-12)
    assert other["containment"] == pytest.approx(0.81, abs=0.03)
    assert other["identity"] == pytest.approx(0.99, abs=0.003)
    assert other["identity"] == pytest.approx(other["containment"] ** (1 / KSIZE), abs=1e-12)
    assert other["sketch_identity"] == pytest.approx(other["identity"], abs=0.02)
    # the Python API answers the same
    (membership,) = contains(str(grouped), [str(inputs.copy_fa)])
    assert membership.length == len(inputs.copy) and membership.kmers == len(copy_kmers)
    assert {a.split: [h.seq_id for h in a.hits] for a in membership.splits} == {
        s: [h["seq_id"] for h in hits] for s, hits in found.items()
    }


def test_a_distant_copy_is_found_only_below_its_identity(capsys, inputs, grouped):
    home = split_of(grouped, inputs.original)
    assert not any(contains_json(capsys, grouped, inputs.far_fa)["far_20pct"].values())
    hits = contains_json(capsys, grouped, inputs.far_fa, "--min-identity", "0.75")["far_20pct"]
    assert {s for s, h in hits.items() if h} == {home}
    best = hits[home][0]
    assert best["seq_id"] == inputs.original
    assert best["identity"] == pytest.approx(0.8, abs=0.01)
    assert best["identity"] == pytest.approx(best["containment"] ** (1 / KSIZE), abs=1e-12)
    assert 0.75 <= min(h["identity"] for h in hits[home])


# --- both layouts -----------------------------------------------------------------------------------------


def test_a_stored_window_is_found_whole_in_its_split(capsys, inputs, apart):
    _, dataset = apart
    windows = shard_windows(dataset)
    split = split_of(dataset, inputs.original)
    seq_id, start, _, stored, _ = next(w for w in windows[split] if w[0] == inputs.original and w[1] > 5000)
    fasta = pyfaidx.Fasta(str(inputs.kleb))
    bases = str(fasta[seq_id][start : start + len(stored)])
    assert bases.encode() == stored
    query = write_fasta(inputs.root / "window.fa", {"window": bases})
    hits = contains_json(capsys, dataset, query)["window"]
    assert hits[split][0]["seq_id"] == seq_id and hits[split][0]["identity"] == 1.0
    assert {h["seq_id"] for h in hits[split]} == {seq_id}
    (near,) = hits[split_of(dataset, COPY)]  # the copy holds it with its ~10 substitutions
    assert near["seq_id"] == COPY and 0.95 <= near["identity"] < 1.0
    assert near["shared_kmers"] == len(kmer_set(bases) & kmer_set(inputs.copy))


def test_a_reverse_complement_is_found(capsys, inputs, apart):
    _, dataset = apart
    name = by_node(inputs, 50)
    query = write_fasta(inputs.root / "rc.fa", {"rc": reverse_complement(inputs.seqs[name])})
    hits = contains_json(capsys, dataset, query)["rc"][split_of(dataset, name)]
    assert hits[0]["seq_id"] == name and hits[0]["identity"] == 1.0 and hits[0]["sketch_identity"] == 1.0


def test_the_sequence_layout_answers_as_the_windows_layout(capsys, inputs, apart, tmp_path):
    seed, windows = apart
    dataset = tmp_path / "seqs"
    prepare(inputs.paths, dataset, PrepareOptions(**OPTIONS, seed=seed, layout="sequences"))
    assert read_manifest(dataset).params.layout == "sequences"
    query = write_fasta(tmp_path / "rc.fa", {"rc": reverse_complement(inputs.copy)})
    queries = (inputs.copy_fa, query)
    assert contains_json(capsys, dataset, *queries) == contains_json(capsys, windows, *queries)
    rows = leak_rows(capsys, dataset)
    copy_split, original_split = split_of(dataset, COPY), split_of(dataset, inputs.original)
    if copy_split != original_split:
        assert names_pair(rows[(copy_split, original_split)], COPY, inputs.original)
    # every sequence is stored whole: the report counts each split's bases as the manifest does
    for (source, _), row in rows.items():
        assert row["bases"] == read_manifest(dataset).splits[source].n_bases


def test_gzip_and_fastq_queries(capsys, inputs, apart, tmp_path):
    _, dataset = apart
    zipped = tmp_path / "copy.fa.gz"
    zipped.write_bytes(gzip.compress(inputs.copy_fa.read_bytes()))
    read = inputs.seqs[inputs.original][1000:1300]
    fastq = tmp_path / "reads.fq"
    fastq.write_text(f"@read1 a 300 bp read\n{read}\n+\n{'I' * len(read)}\n")
    found = contains_json(capsys, dataset, zipped, fastq)
    assert found[COPY] == contains_json(capsys, dataset, inputs.copy_fa)[COPY]
    hits = found["read1"][split_of(dataset, inputs.original)]
    assert hits[0]["seq_id"] == inputs.original and hits[0]["identity"] == 1.0
    assert hits[0]["sketch_identity"] is None or hits[0]["sketch_identity"] == 1.0  # ~3 hashes: maybe too few


def test_a_query_without_a_kmer_is_warned_about(capsys, inputs, apart, tmp_path):
    query = write_fasta(tmp_path / "q.fa", {"short": "ACGTACGTAC", "gap": "N" * 500, "copy": inputs.copy})
    with pytest.warns(UserWarning) as warned:
        code, out, _ = run(capsys, "contains", apart[1], query, "-q")
    assert code == 0
    (message,) = [str(w.message) for w in warned]  # one line, however many queries
    assert message.startswith(f"2 of 3 queries (the first 'short' of {query}) hold no 21 A/C/G/T bases in a row")
    found = {(c[0], c[3]): c[4] for c in (line.split("\t") for line in out.splitlines()[1:])}
    assert {f for (q, _), f in found.items() if q != "copy"} == {"no"}
    assert {f for (q, _), f in found.items() if q == "copy"} == {"yes", "no"}


@pytest.mark.slow
def test_the_cli_prints_that_warning_as_one_line(inputs, apart, tmp_path):
    """Through the real command (a subprocess, so Python's own warning display is what prints)."""
    query = write_fasta(tmp_path / "q.fa", {"short": "ACGTACGTAC"})
    done = subprocess.run(
        [sys.executable, "-m", "bionemo_wds.cli", "contains", str(apart[1]), str(query), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bionemo-wds contains: warning: 1 of 1 queries (the first 'short' of ")


@pytest.mark.parametrize("older", [as_format_version_3, as_format_version_1])
def test_older_format_versions_answer_the_same(capsys, inputs, apart, tmp_path, older):
    _, dataset = apart
    old = tmp_path / "old"
    shutil.copytree(dataset, old)
    older(old)
    assert contains_json(capsys, old, inputs.copy_fa) == contains_json(capsys, dataset, inputs.copy_fa)
    assert leak_rows(capsys, old) == leak_rows(capsys, dataset)


# --- external evaluation sets -------------------------------------------------------------------------------


def test_leakage_against_an_eval_file_reports_both_directions(capsys, inputs, apart):
    _, dataset = apart
    train = split_seq_ids(dataset, "train")
    planted = next(n for n in train if len(inputs.seqs.get(n, "")) >= 20_000 and n != inputs.original)
    (phage,) = read_fasta(LAMBDA).values()
    eval_fa = write_fasta(inputs.root / "eval.fa", {"planted": mutate(inputs.seqs[planted], 0.01, 3), "phage": phage})
    rows = leak_rows(capsys, dataset, "--against", eval_fa)
    ev = str(eval_fa)
    assert len(rows) == 6 + 2 * 3
    into = rows[(ev, "train")]
    assert into["sequences"] == 2 and into["leaked_sequences"] == 1
    assert into["bases"] == len(phage) + len(inputs.seqs[planted])
    assert into["leaked_bases"] == len(inputs.seqs[planted])
    assert names_pair(into, "planted", planted)
    assert rows[("train", ev)]["leaked_sequences"] >= 1 and names_pair(rows[("train", ev)], planted, "planted")
    for split in ("val", "test"):
        assert rows[(ev, split)]["leaked_sequences"] == 0


# --- bad input ----------------------------------------------------------------------------------------------


def bad(capsys, *argv: str) -> str:
    """Run, expect exit 2 with one line on stderr and nothing on stdout; the line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--ksize", "22", "--ksize must be an odd number from 7 to 31, got 22"),
        ("--ksize", "41", "--ksize must be an odd number from 7 to 31, got 41"),
        ("--scaled", "0", "--scaled must be from 1 to"),
        ("--min-identity", "1.5", "--min-identity must be from 0.5 to 1"),
    ],
)
@pytest.mark.parametrize("command", ["contains", "leakage", "verify"])
def test_sketch_options_out_of_range(capsys, inputs, apart, command, option, value, message):
    _, dataset = apart
    before = tree_bytes(dataset)
    argv = {"contains": [inputs.copy_fa], "leakage": [], "verify": ["--leakage"]}[command]
    assert message in bad(capsys, command, dataset, *argv, option, value, "-q")
    assert tree_bytes(dataset) == before


def test_max_leakage_above_one(capsys, apart):
    assert "--max-leakage must be a share from 0 to 1, got 2.0" in bad(
        capsys, "verify", apart[1], "--leakage", "--max-leakage", "2", "-q"
    )


@pytest.mark.parametrize("kind", ["plain text", "empty", "missing"])
@pytest.mark.parametrize("command", ["contains", "leakage"])
def test_a_query_file_that_is_not_fasta(capsys, apart, tmp_path, kind, command):
    path = tmp_path / "query.fa"
    if kind == "plain text":
        path.write_text("These are my notes on Klebsiella,\nnot a sequence.\n")
    elif kind == "empty":
        path.write_text("")
    flag = ["--against"] if command == "leakage" else []
    message = bad(capsys, command, apart[1], *flag, path, "-q")
    assert str(path) in message
    assert {"plain text": "is not FASTA", "empty": "holds no sequence", "missing": "does not exist"}[kind] in message


def test_split_limits_the_answer_to_the_splits_named(capsys, inputs, apart):
    _, dataset = apart
    home = split_of(dataset, COPY)
    found = contains_json(capsys, dataset, inputs.copy_fa, "--split", home, "--split", home)
    assert list(found[COPY]) == [home] and found[COPY][home][0]["seq_id"] == COPY


def test_an_unknown_split(capsys, inputs, apart):
    message = bad(capsys, "contains", apart[1], inputs.copy_fa, "--split", "nope", "-q")
    assert "no split 'nope'" in message and "train, val, test" in message


@pytest.mark.parametrize("command", ["contains", "leakage"])
def test_a_dataset_without_a_manifest(capsys, inputs, tmp_path, command):
    argv = [inputs.copy_fa] if command == "contains" else []
    message = bad(capsys, command, tmp_path, *argv, "-q")
    assert str(tmp_path) in message and "manifest" in message


@pytest.mark.parametrize("command", ["contains", "leakage"])
def test_a_damaged_shard_is_named(capsys, inputs, apart, tmp_path, command):
    dataset = tmp_path / "ds"
    shutil.copytree(apart[1], dataset)
    shutil.rmtree(dataset / "sketches", ignore_errors=True)  # an earlier leakage's: it would read no shard
    shard = read_manifest(dataset).splits["train"].shards[0].path
    data = bytearray((dataset / shard).read_bytes())
    data[100:108] = b"\xff" * 8  # the first member's tar header: its mode field, so its checksum fails
    (dataset / shard).write_bytes(bytes(data))
    argv = [inputs.copy_fa] if command == "contains" else []
    message = bad(capsys, command, dataset, *argv, "-q")
    assert shard in message


def test_verify_leakage_on_a_damaged_shard_reports_the_shard(capsys, apart, tmp_path):
    dataset = tmp_path / "ds"
    shutil.copytree(apart[1], dataset)
    shard = read_manifest(dataset).splits["train"].shards[0].path
    data = bytearray((dataset / shard).read_bytes())
    data[100:108] = b"\xff" * 8
    (dataset / shard).write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", dataset, "--leakage", "-q")
    assert code == 1
    assert any(line.startswith(f"BAD {shard}") for line in err.splitlines()), err
    assert "leakage not measured" in err and "problem(s)" in out


def test_verify_checks_its_leakage_options_before_reading_the_dataset(capsys, tmp_path):
    # an empty folder: verify itself would fail on the missing manifest
    assert "--ksize must be" in bad(capsys, "verify", tmp_path, "--leakage", "--ksize", "8", "-q")
    assert "manifest" in bad(capsys, "verify", tmp_path, "--leakage", "-q")


@pytest.mark.parametrize(("option", "value"), [("--max-leakage", "0.1"), ("--min-identity", "0.9"), ("--ksize", "31")])
def test_a_leakage_option_without_leakage_is_refused(capsys, apart, option, value):
    message = bad(capsys, "verify", apart[1], option, value, "-q")
    assert f"{option} applies only with --leakage" in message
    assert run(capsys, "verify", apart[1], "-q")[0] == 0


@pytest.mark.parametrize("command", ["contains", "leakage", "verify --leakage"])
def test_without_sourmash_the_error_says_how_to_install_it(capsys, monkeypatch, inputs, apart, command):
    monkeypatch.setitem(sys.modules, "sourmash", None)
    argv = [inputs.copy_fa] if command == "contains" else []
    name, *rest = command.split()
    message = bad(capsys, name, apart[1], *argv, *rest, "-q")
    assert "pip install 'bionemo-wds[homology]'" in message


# --- object stores ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_dataset_in_a_bucket_answers_as_the_local_one(capsys, s3_server, inputs, apart):
    pytest.importorskip("s3fs")
    seed, local = apart
    s3_server.make_bucket("bucket")
    remote = "s3://bucket/kleb"
    prepare(inputs.paths, remote, PrepareOptions(**OPTIONS, seed=seed))
    queries = [inputs.copy_fa, inputs.far_fa]
    assert contains_json(capsys, remote, *queries, "--min-identity", "0.75") == contains_json(
        capsys, local, *queries, "--min-identity", "0.75"
    )
    assert leak_rows(capsys, remote) == leak_rows(capsys, local)


# --- --help -------------------------------------------------------------------------------------------------


def help_entries(text: str) -> dict[str, str]:
    """Option -> its help text (whitespace collapsed), from the options part of `--help`."""
    entries: list[list[str]] = []
    for line in text.split("options:", 1)[1].splitlines():
        if line.startswith("  -"):
            entries.append([line])
        elif entries and line.startswith("   "):
            entries[-1].append(line)
    out = {}
    for lines in entries:
        head, _, rest = lines[0].strip().partition("  ")
        for flag in head.split(", "):
            out[flag.split()[0]] = " ".join((rest + " " + " ".join(lines[1:])).split())
    return out


PLACE = ["--workers", "--executor", "--scheduler"]


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("contains", ["--split", "--min-identity", "--ksize", "--scaled", "--json", "--quiet", *PLACE]),
        ("leakage", ["--against", "--min-identity", "--ksize", "--scaled", "--json", "--quiet", *PLACE]),
        ("verify", ["--leakage", "--max-leakage", "--min-identity", "--ksize", "--scaled"]),
    ],
)
def test_help_explains_every_option(capsys, command, options):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    entries = help_entries(capsys.readouterr().out)
    for option in options:
        assert len(entries[option].split()) > 2, f"{command} {option} has no help: {entries[option]!r}"
    for option in ("--min-identity", "--ksize", "--scaled"):
        assert "(default " in entries[option], entries[option]
    if command == "verify":
        for option in options[1:]:
            assert "with --leakage" in entries[option], entries[option]


# --- where the shards are read ------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_process_a_pool_and_dask_answer_alike(capsys, inputs, apart, dask_scheduler):
    """The shards are read as tasks; the answers do not depend on where they run."""
    _, dataset = apart
    queries = (inputs.copy_fa,)
    one = contains_json(capsys, dataset, *queries, "--workers", "1")
    assert one == contains_json(capsys, dataset, *queries, "--workers", "2")
    leaks = leak_rows(capsys, dataset, "--workers", "1")
    assert leaks == leak_rows(capsys, dataset, "--workers", "2")
    dask = ("--executor", "dask", "--scheduler", dask_scheduler)
    assert contains_json(capsys, dataset, *queries, *dask) == one
    assert leak_rows(capsys, dataset, *dask) == leaks


def test_a_scheduler_needs_the_dask_executor(capsys, inputs, apart):
    _, dataset = apart
    message = bad(capsys, "leakage", dataset, "--scheduler", "tcp://127.0.0.1:8786", "-q")
    assert "--scheduler tcp://127.0.0.1:8786 needs --executor dask" in message
    assert "--workers must be at least 1" in bad(capsys, "contains", dataset, inputs.copy_fa, "--workers", "0")
