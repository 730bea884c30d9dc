"""Bad input to `bionemo-wds prepare`: exit code 2, a one-line message naming the culprit, and
nothing half-written left behind.

Every case runs the CLI in-process (`bionemo_wds.cli.main`) on small FASTA files built in
`tmp_path` from the bundled lambda phage genome, with small windows so each test takes well under
a second.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from bionemo_wds.cli.main import main
from bionemo_wds.format import iter_records

LAMBDA_GZ = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data" / "lambda_phage_NC_001416.fa.gz"

#: Small, fast settings for cases that are not about windows or splits (window = 256 - 3 = 253).
FAST = ["--quiet", "--workers", "1", "--seq-length", "256", "--stride", "200", "--samples-per-shard", "8"]
ONE_SPLIT = ["--split", "1,0,0"]
ERROR_PREFIX = "bionemo-wds prepare: error: "


# --- helpers ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def lambda_bases() -> str:
    """The 48,502 bases of lambda phage NC_001416, upper case, read the plain way."""
    with gzip.open(LAMBDA_GZ, "rt") as fh:
        lines = fh.read().splitlines()
    assert lines[0].startswith(">")
    seq = "".join(line.strip() for line in lines[1:] if not line.startswith(">")).upper()
    assert len(seq) == 48_502 and set(seq) <= set("ACGT")
    return seq


def fasta_text(records: list[tuple[str, str]], width: int = 60) -> str:
    """FASTA text with `width` bases per line (an empty sequence gives a bare header line)."""
    parts = []
    for name, seq in records:
        parts.append(f">{name} lambda phage fragment\n")
        parts.extend(seq[i : i + width] + "\n" for i in range(0, len(seq), width))
    return "".join(parts)


def write_fasta(path: Path, records: list[tuple[str, str]], gz: bool = False) -> Path:
    data = fasta_text(records).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def good_fasta(tmp_path: Path, name: str = "good.fa") -> Path:
    """Three valid lambda fragments, enough for any split."""
    seq = lambda_bases()
    return write_fasta(tmp_path / name, [("lam_a", seq[:3000]), ("lam_b", seq[3000:5500]), ("lam_c", seq[5500:7000])])


def run(capsys, inputs, out: Path, *options: str) -> tuple[int, str, str]:
    """`bionemo-wds prepare INPUTS --out OUT OPTIONS` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()  # drop anything printed before
    rc = main(["prepare", *map(str, inputs), "--out", str(out), *options])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under `root` with its kind, size, mtime and content hash (files)."""
    state = {}
    for path in sorted(root.rglob("*")):
        st = path.stat()
        if path.is_dir():
            state[str(path.relative_to(root))] = ("dir",)
        else:
            state[str(path.relative_to(root))] = (
                "file",
                st.st_size,
                st.st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return state


def assert_refused(rc: int, err: str, *culprits: object) -> str:
    """Exit code 2 and a one-line CLI error that names every culprit; returns the message text."""
    assert rc == 2, f"expected exit code 2, got {rc}; stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got: {err!r}"
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    message = lines[0][len(ERROR_PREFIX) :]
    for culprit in culprits:
        assert str(culprit) in message, f"{culprit!s} is not named in: {message}"
    # Paths (under tmp_path, named after the test) are blanked out, so keyword checks on the rest
    # of the message cannot pass just because the test's own name contains the word.
    for culprit in sorted((c for c in culprits if isinstance(c, Path)), key=lambda c: -len(str(c))):
        message = message.replace(str(culprit), "<path>")
    return message


def assert_no_output(out: Path) -> None:
    """--out did not exist before the refused run, so it must not exist after it."""
    assert not out.exists(), f"refused run left {out}: {sorted(map(str, out.rglob('*')))}"


def shard_windows(out: Path) -> list[tuple[str, int, np.ndarray]]:
    """(seq_id, start, bases) of every window in every shard under `out`."""
    found = []
    for shard in sorted(out.rglob("*.tar")):
        with open(shard, "rb") as fh:
            for _key, block in iter_records(fh, str(shard)):
                for i in range(len(block)):
                    found.append((block.seq_id[i], int(block.start[i]), block.bases(i).copy()))
    return found


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


# --- 1. missing input file ----------------------------------------------------------------------


def test_missing_input_file(tmp_path, capsys):
    missing = tmp_path / "no_such_genome.fa"
    out = tmp_path / "out"
    rc, _, err = run(capsys, [missing], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, missing)
    assert "does not exist" in message
    assert_no_output(out)


def test_missing_input_file_next_to_a_good_one(tmp_path, capsys):
    """The missing one is named, not the good one given before it."""
    good = good_fasta(tmp_path)
    missing = tmp_path / "typo_genome.fa.gz"
    out = tmp_path / "out"
    rc, _, err = run(capsys, [good, missing], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, missing)
    assert str(good) not in message
    assert_no_output(out)


# --- 2. unreadable input file -------------------------------------------------------------------


def test_unreadable_input_file(tmp_path, capsys):
    locked = write_fasta(tmp_path / "locked.fa", [("lam_locked", lambda_bases()[:2000])])
    locked.chmod(0)
    try:
        try:
            with open(locked, "rb") as fh:
                fh.read(1)
        except PermissionError:
            pass
        else:
            pytest.skip(
                f"running as uid {os.getuid()}: root (CAP_DAC_OVERRIDE) bypasses file permissions, so "
                "chmod 000 does not make the file unreadable and there is no bad input to test"
            )
        out = tmp_path / "out"
        rc, _, err = run(capsys, [locked], out, *FAST, *ONE_SPLIT)
        message = assert_refused(rc, err, locked)
        assert "not readable" in message or "ermission denied" in message
        assert_no_output(out)
    finally:
        locked.chmod(0o644)


# --- 3. not FASTA: text, binary, corrupt gzip ---------------------------------------------------


def test_text_file_without_headers(tmp_path, capsys):
    notes = tmp_path / "assembly_notes.fa"
    notes.write_text(
        "Assembly notes for lambda phage\n"
        + lambda_bases()[:120]
        + "\n"  # bases, but no '>' definition line anywhere
        + "coverage 40x, 1 contig\n"
    )
    out = tmp_path / "out"
    rc, _, err = run(capsys, [notes], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, notes)
    assert "not valid FASTA" in message
    assert_no_output(out)


def random_bytes_file(tmp_path: Path) -> Path:
    path = tmp_path / "random_bytes.fa"
    path.write_bytes(np.random.default_rng(20240601).integers(0, 256, 8192, dtype=np.uint8).tobytes())
    assert path.read_bytes()[:2] != b"\x1f\x8b"  # not accidentally gzip
    return path


def test_binary_file(tmp_path, capsys):
    binary = random_bytes_file(tmp_path)
    out = tmp_path / "out"
    rc, _, err = run(capsys, [binary], out, *FAST, *ONE_SPLIT)
    assert_refused(rc, err, binary)
    assert_no_output(out)


def test_binary_file_message_says_not_fasta(tmp_path, capsys):
    binary = random_bytes_file(tmp_path)
    rc, _, err = run(capsys, [binary], tmp_path / "out", *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, binary)
    assert "not FASTA" in message or "binary" in message
    assert "unique" not in message, "a binary file is not a duplicate-name problem"


def test_truncated_gzip(tmp_path, capsys):
    seq = lambda_bases()
    whole = gzip.compress(fasta_text([("lam_gz", seq[:20_000])]).encode(), mtime=0)
    broken = tmp_path / "truncated.fa.gz"
    broken.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "out"
    rc, _, err = run(capsys, [broken], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, broken)
    assert "gzip" in message
    assert_no_output(out)


# --- 4. empty file ------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_empty_file(tmp_path, capsys, gz):
    empty = tmp_path / ("empty.fa.gz" if gz else "empty.fa")
    empty.write_bytes(gzip.compress(b"", mtime=0) if gz else b"")
    if not gz:
        assert empty.stat().st_size == 0
    out = tmp_path / "out"
    rc, _, err = run(capsys, [empty], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, empty)
    assert "does not contain a valid sequence" in message or "no sequences" in message
    assert_no_output(out)


# --- 5. a sequence of length 0 ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["between_headers", "last_record"])
def test_zero_length_sequence(tmp_path, capsys, where):
    seq = lambda_bases()
    records = [("lam_before", seq[:1500]), ("empty_contig_7", ""), ("lam_after", seq[1500:3000])]
    if where == "last_record":
        records = [records[0], records[2], records[1]]
    else:
        assert fasta_text(records).count(">empty_contig_7 lambda phage fragment\n>lam_after") == 1
    path = write_fasta(tmp_path / "with_empty.fa", records)
    out = tmp_path / "out"
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, "'empty_contig_7'", path)
    assert "length 0" in message
    assert "lam_before" not in message and "lam_after" not in message
    assert_no_output(out)


# --- 6. duplicate sequence names ----------------------------------------------------------------


@pytest.mark.parametrize("second_gz", [False, True], ids=["plain", "gzip"])
def test_duplicate_name_across_files(tmp_path, capsys, second_gz):
    seq = lambda_bases()
    first = write_fasta(tmp_path / "run1.fa", [("lam_x", seq[:2000]), ("contig_dup", seq[2000:4000])])
    second = write_fasta(
        tmp_path / ("run2.fa.gz" if second_gz else "run2.fa"),
        [("lam_y", seq[4000:6000]), ("contig_dup", seq[6000:8000])],
        gz=second_gz,
    )
    out = tmp_path / "out"
    rc, _, err = run(capsys, [first, second], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, "'contig_dup'", first, second)
    assert "lam_x" not in message and "lam_y" not in message
    assert_no_output(out)


def test_duplicate_name_within_one_file(tmp_path, capsys):
    seq = lambda_bases()
    path = write_fasta(
        tmp_path / "twice.fa",
        [("contig_dup", seq[:1000]), ("lam_mid", seq[1000:2000]), ("contig_dup", seq[2000:3000])],
    )
    out = tmp_path / "out"
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, path, "contig_dup")
    assert "unique" in message or "uplicate" in message
    assert "lam_mid" not in message
    assert_no_output(out)


# --- 7. characters outside IUPAC ----------------------------------------------------------------


def invalid_fasta(tmp_path: Path, char: str, pos: int, gz: bool = False) -> tuple[Path, str]:
    """'lam_ok' (clean) then 'lam_bad' with `char` at 0-based `pos`; returns (path, clean lam_bad)."""
    seq = lambda_bases()
    clean = seq[10_000:11_000]
    dirty = clean[:pos] + char + clean[pos + 1 :]
    assert len(dirty) == len(clean)
    path = write_fasta(
        tmp_path / ("mixed.fa.gz" if gz else "mixed.fa"), [("lam_ok", seq[:2000]), ("lam_bad", dirty)], gz=gz
    )
    return path, clean


@pytest.mark.parametrize(
    "char,pos,gz",
    [("X", 437, False), ("@", 0, False), ("1", 60, False), ("X", 999, True), ("@", 119, True)],
    ids=["X-mid", "at-first-base", "digit-line-start", "X-last-base-gzip", "at-line-end-gzip"],
)
def test_non_iupac_character_is_refused(tmp_path, capsys, char, pos, gz):
    path, _ = invalid_fasta(tmp_path, char, pos, gz)
    out = tmp_path / "out"
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, "'lam_bad'", path, f"position {pos} ")
    assert repr(char.encode()) in message or repr(char) in message, message
    assert "lam_ok" not in message
    assert "--on-invalid" in message
    assert_no_output(out)


def test_non_iupac_refused_into_existing_empty_out(tmp_path, capsys):
    """--out existed (empty): it stays, still empty (no .cache, no split dirs, no manifest)."""
    path, _ = invalid_fasta(tmp_path, "X", 500, gz=True)  # gzip: a decompressed copy goes to .cache
    out = tmp_path / "out"
    out.mkdir()
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT)
    assert_refused(rc, err, "'lam_bad'", path, "position 500 ")
    assert out.is_dir() and list(out.iterdir()) == []


@pytest.mark.parametrize("char,pos", [("X", 437), ("@", 210), ("1", 60), ("X", 999)])
def test_non_iupac_replace_n(tmp_path, capsys, char, pos):
    path, clean = invalid_fasta(tmp_path, char, pos)
    out = tmp_path / "out"
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT, "--on-invalid", "replace-N")
    assert rc == 0, err
    windows = [(start, bases) for seq_id, start, bases in shard_windows(out) if seq_id == "lam_bad"]
    covering = [(start, bases) for start, bases in windows if start <= pos < start + len(bases)]
    assert covering, f"no stored window of lam_bad covers position {pos}"
    expected_clean = np.frombuffer(clean.encode(), dtype=np.uint8)
    for start, bases in covering:
        assert bases[pos - start] == ord("N"), f"window at {start}: {chr(bases[pos - start])!r} at {pos}"
        # every other base of the window is the original one
        expect = expected_clean[start : start + len(bases)].copy()
        expect[pos - start] = ord("N")
        assert np.array_equal(bases, expect)
    # all of lam_bad is stored (tail 'end' keeps every base), and lam_ok is untouched
    assert min(s for s, _ in windows) == 0 and max(s + len(b) for s, b in windows) == len(clean)
    ok = np.frombuffer(lambda_bases()[:2000].encode(), dtype=np.uint8)
    ok_windows = [(start, bases) for seq_id, start, bases in shard_windows(out) if seq_id == "lam_ok"]
    assert ok_windows
    for start, bases in ok_windows:
        assert np.array_equal(bases, ok[start : start + len(bases)])
    manifest = read_json(out / "manifest.json")
    assert manifest["skipped"] == []
    assert manifest["splits"]["train"]["n_sequences"] == 2


def test_non_iupac_skip(tmp_path, capsys):
    path, _ = invalid_fasta(tmp_path, "@", 437)
    out = tmp_path / "out"
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT, "--on-invalid", "skip")
    assert rc == 0, err
    manifest = read_json(out / "manifest.json")
    assert [s["seq_id"] for s in manifest["skipped"]] == ["lam_bad"]
    assert manifest["skipped"][0]["file"] == str(path)
    assert "position 437" in manifest["skipped"][0]["reason"]
    assert manifest["splits"]["train"]["n_sequences"] == 1
    assert manifest["splits"]["train"]["n_bases"] == 2000
    stored = shard_windows(out)
    assert {seq_id for seq_id, _, _ in stored} == {"lam_ok"}
    ok = np.frombuffer(lambda_bases()[:2000].encode(), dtype=np.uint8)
    for _, start, bases in stored:
        assert np.array_equal(bases, ok[start : start + len(bases)])


def test_non_iupac_skip_of_every_sequence_is_refused(tmp_path, capsys):
    path = write_fasta(tmp_path / "all_bad.fa", [("lam_bad", "ACGT@" + lambda_bases()[:500])])
    out = tmp_path / "out"
    rc, _, err = run(capsys, [path], out, *FAST, *ONE_SPLIT, "--on-invalid", "skip")
    message = assert_refused(rc, err)
    assert "skipped" in message
    assert_no_output(out)


# --- 8. bad stride ------------------------------------------------------------------------------


def test_stride_larger_than_window(tmp_path, capsys):
    good = good_fasta(tmp_path)
    out = tmp_path / "out"
    options = ["--quiet", "--workers", "1", "--samples-per-shard", "8", *ONE_SPLIT, "--seq-length", "100"]
    rc, _, err = run(capsys, [good], out, *options, "--stride", "98")
    assert_refused(rc, err, "--stride 98", "window of 97 bases", "--seq-length 100", "--stride <= 97")
    assert_no_output(out)
    # the largest allowed stride (the window itself) works: the limit is exactly 97
    rc, _, err = run(capsys, [good], out, *options, "--stride", "97")
    assert rc == 0, err
    assert read_json(out / "manifest.json")["params"]["window_length"] == 97


@pytest.mark.parametrize("stride", ["0", "-5"])
def test_stride_not_positive(tmp_path, capsys, stride):
    good = good_fasta(tmp_path)
    out = tmp_path / "out"
    rc, _, err = run(
        capsys,
        [good],
        out,
        "--quiet",
        "--workers",
        "1",
        "--seq-length",
        "256",
        "--samples-per-shard",
        "8",
        *ONE_SPLIT,
        "--stride",
        stride,
    )
    assert_refused(rc, err, "--stride", f"got {stride}")
    assert_no_output(out)


# --- 9. fewer sequences than splits -------------------------------------------------------------


def test_fewer_sequences_than_splits(tmp_path, capsys):
    single = write_fasta(tmp_path / "single.fa", [("lam_only", lambda_bases()[:5000])])
    out = tmp_path / "out"
    rc, _, err = run(capsys, [single], out, *FAST)  # default --split 0.8,0.1,0.1
    message = assert_refused(rc, err, "1 sequence", "3 splits", "--split")
    assert "train, val, test" in message
    assert_no_output(out)
    # the same sequence with every base in train is fine
    rc, _, err = run(capsys, [single], out, *FAST, "--split", "1,0,0")
    assert rc == 0, err
    manifest = read_json(out / "manifest.json")
    assert list(manifest["splits"]) == ["train"]
    assert manifest["splits"]["train"]["n_sequences"] == 1
    assert {seq_id for seq_id, _, _ in shard_windows(out)} == {"lam_only"}


def test_two_sequences_for_three_splits(tmp_path, capsys):
    seq = lambda_bases()
    two = write_fasta(tmp_path / "two.fa", [("lam_1", seq[:4000]), ("lam_2", seq[4000:8000])])
    out = tmp_path / "out"
    rc, _, err = run(capsys, [two], out, *FAST, "--split", "0.8,0.1,0.1")
    assert_refused(rc, err, "2 sequence", "3 splits", "--split")
    assert_no_output(out)


# --- 10. output directory holding other data ----------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "with-overwrite"])
def test_out_dir_with_other_data(tmp_path, capsys, overwrite):
    good = good_fasta(tmp_path)
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("lab notebook: do not delete\n")
    before = snapshot(out)
    rc, _, err = run(capsys, [good], out, *FAST, *ONE_SPLIT, *(["--overwrite"] if overwrite else []))
    message = assert_refused(rc, err, f"--out {out}", out, "notes.txt")
    assert "other data" in message
    assert snapshot(out) == before
    assert (out / "notes.txt").read_text() == "lab notebook: do not delete\n"


# --- 11. different parameters on an existing prepared directory ---------------------------------


def test_changed_parameters_refused_unless_overwrite(tmp_path, capsys):
    good = good_fasta(tmp_path)
    out = tmp_path / "prepared"
    rc, _, err = run(capsys, [good], out, *FAST, *ONE_SPLIT, "--seed", "42")
    assert rc == 0, err
    before = snapshot(out)
    assert any(p.endswith(".tar") for p in before)

    rc, _, err = run(capsys, [good], out, *FAST, *ONE_SPLIT, "--seed", "7")
    message = assert_refused(rc, err, f"--out {out}", out, "seed: 42 -> 7", "--overwrite")
    assert "stride" not in message and "seq_length" not in message  # only what changed
    assert snapshot(out) == before, "a refused run must leave the prepared dataset as it was"

    rc, _, err = run(capsys, [good], out, *FAST, *ONE_SPLIT, "--seed", "7", "--overwrite")
    assert rc == 0, err
    manifest = read_json(out / "manifest.json")
    assert manifest["params"]["seed"] == 7 and manifest["request"]["seed"] == 7
    assert not (out / ".cache").exists() and not (out / ".prepare-plan.json").exists()


def test_identical_rerun_does_nothing(tmp_path, capsys):
    good = good_fasta(tmp_path)
    out = tmp_path / "prepared"
    rc, _, err = run(capsys, [good], out, *FAST, *ONE_SPLIT)
    assert rc == 0, err
    before = snapshot(out)
    shards = sorted(out.rglob("*.tar"))
    assert len(shards) >= 2
    mtimes = [p.stat().st_mtime_ns for p in shards]

    rc, stdout, err = run(capsys, [good], out, *FAST, *ONE_SPLIT)
    assert rc == 0, err
    assert "nothing to do" in stdout
    assert [p.stat().st_mtime_ns for p in sorted(out.rglob("*.tar"))] == mtimes
    assert snapshot(out) == before


def test_overwrite_with_bad_input_keeps_earlier_dataset(tmp_path, capsys):
    good = good_fasta(tmp_path)
    out = tmp_path / "prepared"
    rc, _, err = run(capsys, [good], out, *FAST, *ONE_SPLIT)
    assert rc == 0, err
    before = snapshot(out)
    bad, _ = invalid_fasta(tmp_path, "X", 437)
    rc, _, err = run(capsys, [bad], out, *FAST, *ONE_SPLIT, "--overwrite")
    assert_refused(rc, err, "'lam_bad'", bad, "position 437 ")
    assert snapshot(out) == before, "the refused --overwrite run destroyed the earlier dataset"


# --- 12. a directory input without FASTA files --------------------------------------------------


def test_directory_without_fasta(tmp_path, capsys):
    folder = tmp_path / "downloads"
    (folder / "nested").mkdir(parents=True)
    (folder / "README.txt").write_text("genomes go here\n")
    (folder / "nested" / "reads.fastq").write_text("@r1\nACGT\n+\nIIII\n")
    (folder / "nested" / "table.tsv.gz").write_bytes(gzip.compress(b"name\tlength\n", mtime=0))
    out = tmp_path / "out"
    rc, _, err = run(capsys, [folder], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, f"directory {folder}", folder)
    assert "no FASTA" in message
    assert_no_output(out)


def test_empty_directory_next_to_a_good_file(tmp_path, capsys):
    good = good_fasta(tmp_path)
    folder = tmp_path / "empty_dir"
    folder.mkdir()
    out = tmp_path / "out"
    rc, _, err = run(capsys, [good, folder], out, *FAST, *ONE_SPLIT)
    message = assert_refused(rc, err, f"directory {folder}")
    assert str(good) not in message
    assert_no_output(out)


# --- --out with missing parents -----------------------------------------------------------------


def test_refused_run_removes_created_parents_of_out(tmp_path, capsys):
    bad, _ = invalid_fasta(tmp_path, "X", 437)
    out = tmp_path / "new_project" / "datasets" / "out"
    rc, _, err = run(capsys, [bad], out, *FAST, *ONE_SPLIT)
    assert_refused(rc, err, "'lam_bad'", bad, "position 437 ")
    assert_no_output(out)
    assert not (tmp_path / "new_project").exists(), "refused run left the parents of --out behind"


@pytest.mark.parametrize(
    ("source", "option", "value"),
    [
        ("fasta", "--split-parquet", "train=t.parquet"),
        ("fasta", "--window-db", "train=t.db"),
        ("fasta", "--x-key", "x"),
        ("fasta", "--y-key", "y"),
        ("hdf5", "--split-parquet", "train=t.parquet"),
        ("sharded-eden", "--x-key", "x"),
    ],
)
def test_an_option_of_another_source_is_refused_not_ignored(tmp_path, capsys, source, option, value):
    out = tmp_path / "out"
    rc, _, err = run(capsys, [LAMBDA_GZ], out, *FAST, "--source", source, option, value)
    assert rc == 2
    owner = "hdf5" if option in ("--x-key", "--y-key") else "sharded-eden"
    assert f"{option} is an option of --source {owner}, not of --source {source}" in err
    assert not out.exists()
