"""The base scan (`prepare/scan.py`): unknown characters and `--split-at-n` cutting at runs of N.

Pure helpers (`n_runs`, `merge_runs`, `pieces`) by property tests against a plain reference; `scan`
on the lambda phage genome with planted N runs (lower case, at the ends, across and longer than a
scan chunk); and end to end through `bionemo-wds prepare --split-at-n`, reading the shards back.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import LAMBDA, read_fasta, shard_windows, split_seq_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.cli.main import main
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest, window_key
from bionemo_wds.prepare import scan as scan_module
from bionemo_wds.prepare.scan import merge_runs, n_runs, pieces, scan
from bionemo_wds.prepare.sources.fasta import index_fasta

# ---------------------------------------------------------------------------------------------
# pure helpers


def reference_runs(seq: bytes, k: int) -> list[tuple[int, int]]:
    """Runs of at least `k` N (either case), found the obvious way."""
    return [m.span() for m in re.finditer(rb"[Nn]{%d,}" % k, seq)]


def one_pass(seq: bytes, k: int) -> list[tuple[int, int]]:
    return merge_runs(n_runs(seq.upper(), k), k)


def chunked(seq: bytes, k: int, cuts: list[int]) -> list[tuple[int, int]]:
    """The runs as `scan` finds them when reads end at `cuts` (any positions, any chunk sizes)."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(seq)}), len(seq)]
    found: list[tuple[int, int]] = []
    for lo, hi in itertools.pairwise(bounds):
        found.extend(n_runs(seq[lo:hi].upper(), k, lo))
    return merge_runs(found, k)


def max_n_run(seq: bytes) -> int:
    return max((len(m.group(0)) for m in re.finditer(rb"[Nn]+", seq)), default=0)


#: Sequences of mostly N (so long runs are common) with some real bases and lower-case n.
dna = st.lists(st.sampled_from(b"NNNNnnACGT"), min_size=0, max_size=300).map(bytes)
ks = st.integers(1, 12)


@settings(max_examples=300, deadline=None)
@given(dna, ks)
def test_one_pass_finds_exactly_the_runs_of_at_least_k(seq, k):
    assert one_pass(seq, k) == reference_runs(seq, k)


@settings(max_examples=300, deadline=None)
@given(dna, ks, st.lists(st.integers(0, 300), max_size=30))
def test_runs_merged_across_arbitrary_chunk_boundaries_equal_one_pass(seq, k, cuts):
    assert chunked(seq, k, cuts) == one_pass(seq, k) == reference_runs(seq, k)


@settings(max_examples=300, deadline=None)
@given(dna, ks, st.integers(1, 40))
def test_runs_merged_across_fixed_size_chunks_equal_one_pass(seq, k, chunk):
    assert chunked(seq, k, list(range(chunk, len(seq), chunk))) == reference_runs(seq, k)


@settings(max_examples=300, deadline=None)
@given(dna, ks)
def test_pieces_cover_exactly_the_bases_outside_the_runs(seq, k):
    runs = one_pass(seq, k)
    parts = pieces(len(seq), runs)
    in_run = np.zeros(len(seq), bool)
    for s, e in runs:
        in_run[s:e] = True
    covered = np.zeros(len(seq), int)
    for s, e in parts:
        assert 0 <= s < e <= len(seq)  # none empty
        covered[s:e] += 1
    assert ((covered == 1) == ~in_run).all() and covered.max(initial=0) <= 1
    assert parts == sorted(parts)
    # pieces are maximal: no two touch (they would be one piece)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(parts))


@settings(max_examples=300, deadline=None)
@given(dna, ks)
def test_no_piece_holds_a_run_of_k_and_shorter_runs_are_never_cut(seq, k):
    parts = pieces(len(seq), one_pass(seq, k))
    for s, e in parts:
        assert max_n_run(seq[s:e]) < k
    # every run shorter than k lies whole inside one piece
    for m in re.finditer(rb"[Nn]+", seq):
        if len(m.group(0)) < k:
            assert any(s <= m.start() and m.end() <= e for s, e in parts), m.span()
    if max_n_run(seq) < k:
        assert parts == ([(0, len(seq))] if seq else [])


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 500),
    st.lists(st.tuples(st.integers(0, 500), st.integers(1, 40)), max_size=12),
    ks,
)
def test_pieces_of_arbitrary_disjoint_runs_are_their_complement(length, raw, k):
    """`pieces(length, merge_runs(runs))` for sorted disjoint runs (touching ones allowed)."""
    runs, at = [], 0
    for gap, size in raw:
        start = at + gap % 7
        end = min(start + size, length)
        if start >= end:
            break
        runs.append((start, end))
        at = end
    merged = merge_runs(runs, k)
    in_run = np.zeros(length, bool)
    for s, e in merged:
        assert e - s >= k
        in_run[s:e] = True
    covered = np.zeros(length, bool)
    for s, e in pieces(length, merged):
        assert s < e and not covered[s:e].any()
        covered[s:e] = True
    assert (covered == ~in_run).all()


def test_n_runs_keeps_short_runs_only_at_the_chunk_edges():
    assert n_runs(b"NNACGNNNNANNN", 4, 100) == [(100, 102), (105, 109), (110, 113)]
    assert n_runs(b"ACGNNNNT", 5) == []
    assert n_runs(b"NN", 5, 7) == [(7, 9)]
    assert merge_runs([(0, 2), (2, 4), (4, 5), (9, 10)], 5) == [(0, 5)]


# ---------------------------------------------------------------------------------------------
# scan on lambda phage with planted runs

K = 10
CHUNK = 64
#: (start, bases) planted into lambda phage (48,502 bp) for sequence "lam".
PLANTED = [
    (0, "N" * 30),  # at the very start: cut
    (1000, "N" * 9),  # K - 1: not cut
    (2000, "n" * 10),  # exactly K, lower case: cut
    (5000, "Nn" * 12 + "N"),  # 25 of mixed case: cut
    (100 * CHUNK - 5, "N" * 12),  # across a chunk boundary: cut
    (150 * CHUNK - 4, "n" * 9),  # K - 1 across a chunk boundary: not cut
    (12000, "N" * 300),  # longer than a chunk, spans several: cut
    (300 * CHUNK, "N" * 10),  # starts exactly at a chunk start: cut
    (400 * CHUNK - 10, "N" * 10),  # ends exactly at a chunk end: cut
    (48502 - 15, "n" * 15),  # at the very end: cut
]
LAM_PIECES = [
    (30, 2000),
    (2010, 5000),
    (5025, 6395),
    (6407, 12000),
    (12300, 19200),
    (19210, 25590),
    (25600, 48487),
]


def plant(seq: str, spots: list[tuple[int, str]]) -> str:
    out = list(seq)
    for start, bases in spots:
        out[start : start + len(bases)] = bases
    assert len(out) == len(seq)
    return "".join(out)


def write_fasta(path: Path, seqs: dict[str, str], width: int = 70) -> Path:
    with open(path, "w") as fh:
        for name, seq in seqs.items():
            fh.write(f">{name} planted test sequence\n")
            for i in range(0, len(seq), width):
                fh.write(seq[i : i + width] + "\n")
    return path


@pytest.fixture(scope="module")
def planted() -> dict[str, str]:
    """Lambda phage with runs of N planted, a short one with runs under K at both ends, one of only
    N (crossing chunks), and a plain stretch without any N."""
    (lam,) = read_fasta(LAMBDA).values()
    assert len(lam) == 48502 and "N" not in lam.upper()
    seqs = {
        "lam": plant(lam, PLANTED),
        "short_ends": "N" * 9 + lam[3000:6000] + "n" * 7,
        "all_n": "n" * 100 + "N" * 101,
        "plain": lam[20000:26000],
        "lam_tail": plant(lam[30000:], [(100, "N" * 40), (9000, "n" * 11)]),
    }
    assert seqs["lam"][0:30] == "N" * 30 and seqs["lam"][-15:] == "n" * 15
    return seqs


@pytest.fixture
def planted_fasta(tmp_path, planted) -> Path:
    return write_fasta(tmp_path / "planted.fa", planted)


def catalog_of(path: Path, tmp_path: Path):
    return index_fasta([path], tmp_path / "cache", progress=False)


def rows_of(cat) -> list[tuple[str, int, int, int]]:
    return [
        (n, int(s), int(o), int(ln)) for n, s, o, ln in zip(cat.names, cat.seq, cat.origin, cat.lengths, strict=True)
    ]


@pytest.mark.parametrize("chunk", [CHUNK, 7, 1 << 22])
def test_scan_cuts_at_the_planted_runs(tmp_path, planted_fasta, planted, monkeypatch, chunk):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", chunk)
    cat = scan(catalog_of(planted_fasta, tmp_path), "error", K, progress=False)
    lam_tail_len = len(planted["lam_tail"])
    expected = (
        [("lam", 0, s, e - s) for s, e in LAM_PIECES]
        + [("short_ends", 1, 0, 9 + 3000 + 7)]
        # all_n (sequence 2) is gone
        + [("plain", 3, 0, 6000)]
        + [("lam_tail", 4, 0, 100), ("lam_tail", 4, 140, 9000 - 140), ("lam_tail", 4, 9011, lam_tail_len - 9011)]
    )
    assert rows_of(cat) == expected
    # each piece, read back through the source, has no run of K and is the FASTA's stretch
    reader = cat.source.reader()
    try:
        for name, seq, origin, length in rows_of(cat):
            got = reader.read(seq, origin, origin + length)
            assert got.decode() == planted[name][origin : origin + length]
            assert max_n_run(got) < K
    finally:
        reader.close()
    assert cat.skipped == [
        {"seq_id": "all_n", "file": str(planted_fasta), "reason": f"only runs of N (--split-at-n {K})"}
    ]
    assert cat.notes["split_at_n"] == {"min_run": K, "pieces": len(expected), "sequences_cut": 2}


def test_scan_without_split_at_n_cuts_nothing(tmp_path, planted_fasta, planted, monkeypatch):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", CHUNK)
    cat = scan(catalog_of(planted_fasta, tmp_path), "error", None, progress=False)
    assert rows_of(cat) == [(name, i, 0, len(s)) for i, (name, s) in enumerate(planted.items())]
    assert cat.skipped == [] and "split_at_n" not in cat.notes


def test_a_k_longer_than_every_run_cuts_nothing(tmp_path, planted_fasta, planted, monkeypatch):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", CHUNK)
    cat = scan(catalog_of(planted_fasta, tmp_path), "error", 302, progress=False)
    assert rows_of(cat) == [(name, i, 0, len(s)) for i, (name, s) in enumerate(planted.items())]
    assert cat.notes["split_at_n"] == {"min_run": 302, "pieces": 5, "sequences_cut": 0}


def test_a_catalog_of_only_n_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", 16)
    path = write_fasta(tmp_path / "n.fa", {"a": "N" * 50, "b": "n" * 12})
    with pytest.raises(BadInputError, match="no usable sequences"):
        scan(catalog_of(path, tmp_path), "error", 12, progress=False)


# ---------------------------------------------------------------------------------------------
# end to end: bionemo-wds prepare --split-at-n


def read_windows(root: Path) -> dict[str, list[tuple[str, int, int, bytes]]]:
    """split -> [(seq_id, start, window, bases)] read back from the shards."""
    return {split: [row[:4] for row in rows] for split, rows in shard_windows(root).items()}


def prepare_args(fasta: Path, out: Path, *extra: str) -> list[str]:
    return [
        "prepare",
        str(fasta),
        "--out",
        str(out),
        "--seq-length",
        "512",
        "--stride",
        "500",
        "--samples-per-shard",
        "40",
        "--windows-per-record",
        "6",
        "--quiet",
        *extra,
    ]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, planted) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("split_at_n")
    fasta = write_fasta(tmp / "planted.fa", planted, width=61)
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_module, "SCAN_CHUNK", CHUNK)
        assert main(prepare_args(fasta, out, "--split-at-n", str(K), "--workers", "2", "--split", "0.5,0.25,0.25")) == 0
    return fasta, out


def test_no_window_spans_a_run_of_k_and_every_window_is_its_fasta_stretch(prepared, planted):
    _, out = prepared
    window = read_manifest(out).params.window_length
    assert window == 509
    covered = {name: np.zeros(len(s), bool) for name, s in planted.items()}
    seen = 0
    for rows in read_windows(out).values():
        for seq_id, start, _, bases in rows:
            assert max_n_run(bases) < K, (seq_id, start)
            assert 0 < len(bases) <= window
            assert bases == planted[seq_id][start : start + len(bases)].encode(), (seq_id, start)  # case kept
            covered[seq_id][start : start + len(bases)] = True
            seen += 1
    assert seen > 100
    # tail="end": every base outside the runs of K is in some window, no base of such a run is
    for name, seq in planted.items():
        in_run = np.zeros(len(seq), bool)
        for s, e in reference_runs(seq.encode(), K):
            in_run[s:e] = True
        assert (covered[name] == ~in_run).all(), name


def test_window_keys_are_unique_and_number_on_across_pieces(prepared):
    _, out = prepared
    windows = [w for rows in read_windows(out).values() for w in rows]
    keys = [window_key(seq_id, number) for seq_id, _, number, _ in windows]
    assert len(keys) == len(set(keys))
    # per sequence, window numbers are 0..n-1 and increase with the position in the sequence
    by_seq: dict[str, list[tuple[int, int]]] = {}
    for seq_id, start, number, _ in windows:
        by_seq.setdefault(seq_id, []).append((number, start))
    for seq_id, numbered in by_seq.items():
        numbered.sort()
        assert [n for n, _ in numbered] == list(range(len(numbered))), seq_id
        starts = [s for _, s in numbered]
        assert starts == sorted(starts), seq_id
    # "lam" has 7 pieces; its windows come from all of them
    hit = {p for p, (lo, hi) in enumerate(LAM_PIECES) for _, s in by_seq["lam"] if lo <= s < hi}
    assert hit == set(range(len(LAM_PIECES)))


def test_pieces_of_a_sequence_stay_in_one_split_and_the_manifest_counts_sequences(prepared, planted):
    _, out = prepared
    manifest = read_manifest(out)
    splits_of: dict[str, set[str]] = {}
    for split, rows in read_windows(out).items():
        for seq_id, *_ in rows:
            splits_of.setdefault(seq_id, set()).add(split)
    assert all(len(s) == 1 for s in splits_of.values()), splits_of
    assert set(splits_of) == set(planted) - {"all_n"}
    listed = {split: split_seq_ids(out, split) for split in manifest.splits}
    for split, ids in listed.items():
        assert len(ids) == len(set(ids)) == manifest.splits[split].n_sequences
        assert set(ids) == {s for s, splits in splits_of.items() if split in splits}
    all_ids = [i for ids in listed.values() for i in ids]
    assert sorted(all_ids) == sorted(set(planted) - {"all_n"})  # 4 sequences, not 12 pieces
    assert sum(info.n_sequences for info in manifest.splits.values()) == 4
    # n_bases counts the bases of the pieces (run bases are not in the output)
    total_pieces = sum(e - s for s, e in LAM_PIECES) + 3016 + 6000 + len(planted["lam_tail"]) - 40 - 11
    assert sum(info.n_bases for info in manifest.splits.values()) == total_pieces


def test_the_manifest_records_the_cut(prepared):
    fasta, out = prepared
    manifest = read_manifest(out)
    params = manifest.params
    assert params.split_at_n == K and params.group_by is None
    assert manifest.request["split_at_n"] == K
    assert params.source["kind"] == "fasta"
    assert params.source["split_at_n"] == {"min_run": K, "pieces": 12, "sequences_cut": 2}
    assert manifest.skipped == [{"seq_id": "all_n", "file": str(fasta), "reason": f"only runs of N (--split-at-n {K})"}]
    assert main(["verify", str(out), "--quiet"]) == 0


def test_without_split_at_n_windows_span_the_runs(tmp_path, planted):
    fasta = write_fasta(tmp_path / "planted.fa", planted)
    out = tmp_path / "out"
    assert main(prepare_args(fasta, out, "--workers", "1")) == 0
    windows = [w for rows in read_windows(out).values() for w in rows]
    assert max(max_n_run(b) for *_, b in windows) >= 300 - 1  # the 300-base run lies in some window whole or cut
    assert read_manifest(out).params.split_at_n is None
    assert sum(info.n_sequences for info in read_manifest(out).splits.values()) == 5


# ---------------------------------------------------------------------------------------------
# unknown characters through the chunked scan


@pytest.mark.parametrize("split_at_n", [None, K])
@pytest.mark.parametrize("bad", [5, CHUNK + 3, 5 * CHUNK - 1, 5 * CHUNK])
def test_an_unknown_character_is_named_with_sequence_file_and_position(tmp_path, capsys, monkeypatch, bad, split_at_n):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", CHUNK)
    (lam,) = read_fasta(LAMBDA).values()
    broken = plant(lam[:2000], [(40, "N" * 20), (bad, "X")])
    fasta = write_fasta(tmp_path / "in.fa", {"good": lam[5000:6000], "broken_one": broken})
    out = tmp_path / "out"
    extra = ["--split", "1,0,0"] if split_at_n is None else ["--split", "1,0,0", "--split-at-n", str(split_at_n)]
    assert main(prepare_args(fasta, out, *extra)) == 2
    err = capsys.readouterr().err
    assert f"sequence 'broken_one' in {fasta} has 'X' at position {bad} (0-based)" in err
    assert "--on-invalid" in err
    assert not out.exists()


def test_a_bad_byte_in_the_second_chunk_is_found_with_default_chunks_too(tmp_path, capsys, monkeypatch):
    """The real chunk size, made small only by a little: the bad byte sits one past the first chunk."""
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", 1000)
    (lam,) = read_fasta(LAMBDA).values()
    fasta = write_fasta(tmp_path / "in.fa", {"x": plant(lam, [(1000, "*")])})
    assert main(prepare_args(fasta, tmp_path / "out", "--split", "1,0,0", "--split-at-n", "5")) == 2
    assert f"sequence 'x' in {fasta} has '*' at position 1000 (0-based)" in capsys.readouterr().err


def test_skip_drops_the_bad_sequence_and_still_cuts_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", CHUNK)
    (lam,) = read_fasta(LAMBDA).values()
    fasta = write_fasta(
        tmp_path / "in.fa",
        {"cut": plant(lam[:3000], [(1000, "N" * 20)]), "bad": plant(lam[:3000], [(2500, "?")])},
    )
    cat = scan(catalog_of(fasta, tmp_path), "skip", K, progress=False)
    assert rows_of(cat) == [("cut", 0, 0, 1000), ("cut", 0, 1020, 1980)]
    assert [s["seq_id"] for s in cat.skipped] == ["bad"]
    assert "position 2500 (0-based)" in cat.skipped[0]["reason"]


def test_replace_n_still_cuts_the_runs_after_an_unknown_character(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_module, "SCAN_CHUNK", CHUNK)
    (lam,) = read_fasta(LAMBDA).values()
    seq = plant(lam[:3000], [(500, "N" * 20), (1000, "X"), (2000, "N" * 20)])
    fasta = write_fasta(tmp_path / "in.fa", {"r": seq})
    cat = scan(catalog_of(fasta, tmp_path), "replace-N", K, progress=False)
    assert rows_of(cat) == [("r", 0, 0, 500), ("r", 0, 520, 1480), ("r", 0, 2020, 980)]
