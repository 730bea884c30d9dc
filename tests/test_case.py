"""`prepare --case keep|upper`: soft-masked (lower-case) bases survive into the shards by default.

The input is the real lambda phage genome with planted lower-case stretches (soft-masked repeats):
some inside a window, some across window boundaries, one at the sequence end, runs of lower-case
``n`` and a mixed ``NNNNNnnnnn`` run. Every window read back from the shards must be exactly the
FASTA slice, case included (`keep`), or its upper-cased slice (`upper`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import shard_windows
from hypothesis import given
from hypothesis import strategies as st

from bionemo_wds.cli.main import main
from bionemo_wds.core.tokenizer import UPPERCASE_TABLE, VALID_BASE, replace_invalid_table
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest, stored_case, write_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.writers import base_table

SEQ_LENGTH, STRIDE = 1024, 1000
WINDOW = SEQ_LENGTH - 3
OPTS = dict(seq_length=SEQ_LENGTH, stride=STRIDE, split=(1, 0, 0), samples_per_shard=16, progress=False, workers=1)
#: Soft-masked stretches [start, end): inside window 0, across the boundary of windows 0/1 and 1/2
#: (windows start every 1000 bases, 1021 long), and the last 102 bases.
LOWER = [(100, 300), (950, 1100), (1990, 2050), (48400, 48502)]
#: Runs of N planted (case as written): lower-case n inside a soft-masked stretch and a mixed run.
N_RUNS = [(20010, "n" * 30), (30000, "NNNNNnnnnn")]


def soft_masked(seq: str) -> str:
    """`seq` with the `LOWER` stretches lower-cased and the `N_RUNS` written over it."""
    chars = list(seq)
    for lo, hi in [*LOWER, (20000, 20100)]:
        chars[lo:hi] = [c.lower() for c in chars[lo:hi]]
    for at, run in N_RUNS:
        chars[at : at + len(run)] = list(run)
    return "".join(chars)


def write_fasta(path: Path, seqs: dict[str, str], width: int = 70) -> Path:
    with open(path, "w") as fh:
        for name, seq in seqs.items():
            fh.write(f">{name} soft-masked lambda\n")
            fh.writelines(seq[i : i + width] + "\n" for i in range(0, len(seq), width))
    return path


@pytest.fixture(scope="module")
def masked(lambda_seq) -> str:
    seq = soft_masked(lambda_seq)
    assert seq != seq.upper() and seq.upper() != lambda_seq  # planted lower case and N
    return seq


@pytest.fixture(scope="module")
def masked_fa(tmp_path_factory, masked) -> Path:
    return write_fasta(tmp_path_factory.mktemp("case") / "masked.fa", {"lam": masked})


def windows_of(out: Path) -> list[tuple[str, int, int, bytes, str]]:
    return [row for rows in shard_windows(out).values() for row in rows]


@pytest.mark.parametrize("case", [None, "keep", "upper"])
def test_every_window_is_the_fasta_slice_in_the_chosen_case(tmp_path, masked_fa, masked, case):
    out = tmp_path / "out"
    prepare([masked_fa], out, PrepareOptions(**OPTS, **({"case": case} if case else {})))
    expected = masked if case != "upper" else masked.upper()
    rows = windows_of(out)
    covered = np.zeros(len(masked), bool)
    for seq_id, start, _, bases, _ in rows:
        assert bases == expected[start : start + WINDOW].encode(), (seq_id, start)
        covered[start : start + len(bases)] = True
    assert covered.all()
    lower_windows = sum(bases != bases.upper() for *_, bases, _ in rows)
    # windows 0, 1, 2, 19, 20, 29, 30 and the end-aligned last one hold soft-masked bases
    assert lower_windows == (0 if case == "upper" else 8)
    params = read_manifest(out).params
    assert params.case == params.tokenizer["case"] == (case or "keep")
    assert read_manifest(out).request["case"] == (case or "keep")


@pytest.mark.parametrize("case", ["keep", "upper"])
def test_replace_n_keeps_the_case_of_valid_bases(tmp_path, masked, case):
    """Invalid bytes (lower-case 'x' in a soft-masked stretch, '*' and 'J' in upper case) become N;
    the other bases keep their case with keep."""
    planted = list(masked)
    bad = {150: "x", 5000: "*", 1000: "j", 40000: "J"}
    for at, char in bad.items():
        planted[at] = char
    seq = "".join(planted)
    fa = write_fasta(tmp_path / "bad.fa", {"lam": seq})
    out = tmp_path / "out"
    prepare([fa], out, PrepareOptions(**OPTS, on_invalid="replace-N", case=case))
    fixed = list(seq if case == "keep" else seq.upper())
    for at in bad:
        fixed[at] = "N"
    expected = "".join(fixed)
    rows = windows_of(out)
    for _, start, _, bases, _ in rows:
        assert bases == expected[start : start + WINDOW].encode(), start
    assert any(bases != bases.upper() for *_, bases, _ in rows) == (case == "keep")


def test_invalid_lower_case_byte_is_still_refused_with_keep(tmp_path, masked, capsys):
    fa = write_fasta(tmp_path / "bad.fa", {"lam": masked[:120] + "x" + masked[121:]})
    argv = ["prepare", str(fa), "--out", str(tmp_path / "out"), "-q", "--seq-length", "1024", "--stride", "1000"]
    assert main([*argv, "--split", "1,0,0"]) == 2
    err = capsys.readouterr().err
    assert "'lam'" in err and "has 'x' at position 120" in err
    assert not (tmp_path / "out").exists()


def test_split_at_n_finds_runs_of_either_case_and_pieces_keep_their_case(tmp_path, masked_fa, masked):
    out = tmp_path / "out"
    prepare([masked_fa], out, PrepareOptions(**OPTS, split_at_n=10))
    assert read_manifest(out).params.source["split_at_n"] == {"min_run": 10, "pieces": 3, "sequences_cut": 1}
    rows = windows_of(out)
    for _, start, _, bases, _ in rows:
        assert bases == masked[start : start + len(bases)].encode()
        assert b"n" * 10 not in bases.upper().replace(b"N", b"n")  # no window spans a cut run
    assert any(b"ac" in bases or b"gt" in bases for *_, bases, _ in rows)  # soft-masked bases kept


def test_upper_reproduces_todays_bytes_on_upper_case_input(tmp_path, lambda_seq):
    """On input without lower case, keep and upper write the same shards; only the manifest differs."""
    fa = write_fasta(tmp_path / "upper.fa", {"lam": lambda_seq})
    outs = {}
    for case in ("keep", "upper"):
        outs[case] = tmp_path / case
        prepare([fa], outs[case], PrepareOptions(**OPTS, case=case))
    shards = {case: {p.relative_to(o): p.read_bytes() for p in sorted(o.rglob("*.tar"))} for case, o in outs.items()}
    assert shards["keep"] == shards["upper"] and shards["keep"]
    keep, upper = (read_manifest(o) for o in outs.values())
    assert keep.splits == upper.splits
    assert (keep.params.case, upper.params.case) == ("keep", "upper")


def test_changed_case_on_an_existing_output_is_refused(tmp_path, masked_fa, capsys):
    out = tmp_path / "out"
    argv = ["prepare", str(masked_fa), "--out", str(out), "-q", "--seq-length", "1024", "--stride", "1000"]
    argv += ["--split", "1,0,0", "--workers", "1"]
    assert main(argv) == 0
    before = read_manifest(out)
    capsys.readouterr()
    assert main([*argv, "--case", "upper"]) == 2
    err = capsys.readouterr().err
    assert "case: 'keep' -> 'upper'" in err and "--overwrite" in err
    assert read_manifest(out) == before
    assert main([*argv, "--case", "upper", "--overwrite"]) == 0
    assert read_manifest(out).params.case == "upper"


def test_inspect_prints_the_case_and_old_manifests_read_as_upper(tmp_path, masked_fa, capsys):
    out = tmp_path / "out"
    prepare([masked_fa], out, PrepareOptions(**OPTS))
    assert main(["inspect", str(out)]) == 0
    assert "case keep" in capsys.readouterr().out
    manifest = read_manifest(out)
    assert stored_case(manifest) == "keep"
    # a manifest written before --case existed: no params.case, tokenizer case "upper"
    tokenizer = {**(manifest.params.tokenizer or {}), "case": "upper"}
    params = dataclasses.replace(manifest.params, case=None, tokenizer=tokenizer)
    write_manifest(out / "manifest.json", dataclasses.replace(manifest, params=params))
    assert "case" not in json.loads((out / "manifest.json").read_text())["params"]  # None: left out
    assert stored_case(read_manifest(out)) == "upper"
    assert main(["inspect", str(out)]) == 0
    assert "case upper" in capsys.readouterr().out


def test_an_output_from_before_the_option_counts_as_upper(tmp_path, masked_fa):
    """A request stored without "case" was an upper-casing run: the same run with --case upper is
    finished, with the new default (keep) it is another request."""
    out = tmp_path / "out"
    prepare([masked_fa], out, PrepareOptions(**OPTS, case="upper"))
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["request"]["case"], manifest["params"]["case"]
    write_manifest(out / "manifest.json", manifest)
    assert prepare([masked_fa], out, PrepareOptions(**OPTS, case="upper")).status == "unchanged"
    with pytest.raises(BadInputError, match=r"case: 'upper' -> 'keep'"):
        prepare([masked_fa], out, PrepareOptions(**OPTS))


def test_hdf5_rows_keep_their_case(tmp_path, masked):
    h5py = pytest.importorskip("h5py")
    rows = [masked[i : i + 1000] for i in range(0, 20000, 1000)]
    h5 = tmp_path / "rows.h5"
    with h5py.File(h5, "w") as f:
        f["x"] = np.stack([np.frombuffer(r.encode(), dtype=np.uint8) for r in rows])
    for case in ("keep", "upper"):
        out = tmp_path / case
        argv = ["prepare", "--source", "hdf5", str(h5), "--x-key", "x", "--out", str(out), "-q", "--case", case]
        assert main([*argv, "--seq-length", "1024", "--stride", "1000", "--split", "1,0,0"]) == 0
        found = {int(seq_id): bases for seq_id, _, _, bases, _ in windows_of(out)}
        assert found == {i: (r if case == "keep" else r.upper()).encode() for i, r in enumerate(rows)}
        assert any(b != b.upper() for b in found.values()) == (case == "keep")


@given(st.binary(max_size=200))
def test_base_tables(data):
    """keep leaves bytes as they are; upper upper-cases; replace-N maps exactly the invalid bytes to N,
    keeping the case of the rest with keep."""
    assert base_table("keep", "error") is None and base_table("keep", "skip") is None
    assert base_table("upper", "error") == UPPERCASE_TABLE
    assert replace_invalid_table() == base_table("upper", "replace-N")
    kept = data.translate(base_table("keep", "replace-N"))
    upper = data.translate(base_table("upper", "replace-N"))
    assert kept.upper() == upper
    for before, after in zip(data, kept):
        assert after == (before if VALID_BASE[before] else ord("N"))
