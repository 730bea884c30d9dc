"""A new user's first day with `prepare` and `show`, through the real CLI in a subprocess.

Each test runs `python -m bionemo_wds.cli ...` as a user would and checks the exit code, the message
(one line naming the option) and that nothing was written where a run is refused: the default stride
follows --seq-length; options the plan can judge are checked before the base-by-base scan (a bad option
with a FASTA whose bad character comes later names the option, not the character); a small split gets
several shards by default; --on-invalid replace-N says how many bases it replaced; characters in
messages are shown plainly; the printed rate is over the work only; a misspelt option of a subcommand
gets that subcommand's one-line error with a suggestion; `show` prints the stored windows as text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import servers
from conftest import KLEBSIELLA, LAMBDA, read_fasta, split_seq_ids, write_fasta

ROOT = Path(__file__).resolve().parents[1]
ERROR = "bionemo-wds prepare: error: "
ONE_SPLIT = ["--split", "1,0,0"]

http_server = servers.http_server


def cli(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    """`bionemo-wds ARGS` in a fresh interpreter (the worktree's code first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bionemo_wds.cli", *map(str, args)], env=env, capture_output=True, text=True
    )


def one_error_line(result: subprocess.CompletedProcess, prefix: str = ERROR) -> str:
    """Exit code 2 and exactly one stderr line starting with `prefix`; returns the message after it."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    assert "usage:" not in result.stderr and "Traceback" not in result.stderr
    return lines[0][len(prefix) :]


def assert_nothing_written(out: Path) -> None:
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    assert not Path(f"{out}.lock").exists()


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def lambda_bases() -> str:
    (seq,) = read_fasta(LAMBDA).values()
    return seq


def fasta_with_late_bad_base(tmp_path: Path, lambda_bases: str, description: str | None = None) -> Path:
    """Two lambda pieces, the second with an 'X' near its end: only the scan finds it."""
    seqs = {"lam_a": lambda_bases[:20_000], "lam_b": lambda_bases[20_000:39_990] + "X" + lambda_bases[39_990:40_000]}
    descriptions = {name: description for name in seqs} if description else None
    return write_fasta(tmp_path / "late_bad.fa", seqs, descriptions)


# --- 4. the default stride follows --seq-length; options are checked before the scan -------------------


@pytest.mark.slow
def test_seq_length_1024_works_without_stride(tmp_path):
    out = tmp_path / "out"
    result = cli("prepare", LAMBDA, "--out", out, "--seq-length", "1024", *ONE_SPLIT, "--quiet", "--workers", "1")
    assert result.returncode == 0, result.stderr
    params = manifest(out)["params"]
    assert params["stride"] == 1024 * 999 // 1024 == 999
    assert params["window_length"] == 1021
    assert manifest(out)["request"]["stride"] == 999


@pytest.mark.slow
def test_seq_length_8192_keeps_edens_stride(tmp_path):
    out = tmp_path / "out"
    result = cli("prepare", LAMBDA, "--out", out, *ONE_SPLIT, "--quiet", "--workers", "1")
    assert result.returncode == 0, result.stderr
    assert manifest(out)["params"]["stride"] == manifest(out)["request"]["stride"] == 7992


@pytest.mark.slow
def test_default_stride_never_exceeds_a_window_shortened_by_long_tags(tmp_path, lambda_bases):
    """A 100-byte tag leaves a 256-token sample a window of 153 bases: the default (255) is capped there."""
    tag = "T" * 100
    fasta = write_fasta(tmp_path / "tagged.fa", {"lam": lambda_bases[:5000]}, {"lam": tag})
    out = tmp_path / "out"
    result = cli("prepare", fasta, "--out", out, "--seq-length", "256", "--tags", "description", *ONE_SPLIT, "-q")
    assert result.returncode == 0, result.stderr
    params = manifest(out)["params"]
    assert params["window_length"] == 256 - 3 - 100
    assert params["stride"] == params["window_length"]


def test_an_explicit_stride_too_long_for_seq_length_fails_before_anything(tmp_path, lambda_bases):
    """The old default stride with --seq-length 1024: refused from the options alone, before the FASTA
    is even indexed (no progress bar, no 'X' error although the FASTA has one)."""
    fasta = fasta_with_late_bad_base(tmp_path, lambda_bases)
    out = tmp_path / "out"
    result = cli("prepare", fasta, "--out", out, "--seq-length", "1024", "--stride", "7992", *ONE_SPLIT)
    message = one_error_line(result)
    assert message.startswith("--stride 7992 is larger than the window of 1021 bases"), message
    assert "'X'" not in message
    assert_nothing_written(out)
    assert not list(tmp_path.glob("*.fai"))


def test_a_stride_too_long_for_the_tagged_window_fails_before_the_scan(tmp_path, lambda_bases):
    """The window depends on the longest tag (known from the headers): --stride 1000 fits 1021 bases but
    not the 971 a 50-byte tag leaves, and the error comes before the scan would meet the 'X'."""
    fasta = fasta_with_late_bad_base(tmp_path, lambda_bases, description="D" * 50)
    out = tmp_path / "out"
    argv = ["prepare", fasta, "--out", out, "--seq-length", "1024", "--stride", "1000", "--tags", "description"]
    message = one_error_line(cli(*argv, *ONE_SPLIT, "--quiet"))
    assert "--stride 1000 is larger than the window of 971 bases" in message, message
    assert_nothing_written(out)
    loud = cli(*argv, *ONE_SPLIT)  # with progress bars: the index is built, the scan ("check") never starts
    assert loud.returncode == 2 and "--stride 1000" in loud.stderr
    assert "check" not in loud.stderr, loud.stderr
    assert_nothing_written(out)


def test_too_few_sequences_for_the_splits_fails_before_the_scan(tmp_path, lambda_bases):
    fasta = fasta_with_late_bad_base(tmp_path, lambda_bases)
    out = tmp_path / "out"
    message = one_error_line(cli("prepare", fasta, "--out", out, "--seq-length", "1024", "--quiet"))
    assert message.startswith("2 sequence(s) cannot fill 3 splits (train, val, test)"), message
    assert "--split" in message
    assert_nothing_written(out)


def test_a_split_list_naming_an_unknown_sequence_fails_before_the_scan(tmp_path, lambda_bases):
    fasta = fasta_with_late_bad_base(tmp_path, lambda_bases)
    listed = tmp_path / "train.txt"
    listed.write_text("lam_a\nlam_nope\n")
    out = tmp_path / "out"
    result = cli("prepare", fasta, "--out", out, "--seq-length", "1024", "--split-list", f"train={listed}", "-q")
    message = one_error_line(result)
    assert message == "sequence 'lam_nope' of the train list is not in the inputs", message
    assert_nothing_written(out)


def test_a_group_rule_placing_nothing_fails_before_the_scan(tmp_path, lambda_bases):
    fasta = fasta_with_late_bad_base(tmp_path, lambda_bases)
    out = tmp_path / "out"
    result = cli("prepare", fasta, "--out", out, "--seq-length", "1024", "--group-by", "regex:^GCF_(\\d+)", "-q")
    message = one_error_line(result)
    assert message.startswith("--group-by regex:^GCF_(\\d+) places none of the 2 sequences"), message
    assert_nothing_written(out)


# --- 6a. a small split gets shards for several workers ------------------------------------------------


@pytest.mark.slow
def test_default_shards_feed_several_workers(tmp_path):
    """The bundled bacterial assembly at the default 8192 tokens: every split has at least
    min(8, its records) shards, so `num_workers=2` (or 8) has a shard per worker; each shard but the
    last holds whole records of the split's size."""
    out = tmp_path / "out"
    result = cli("prepare", KLEBSIELLA, "--out", out, "--quiet", "--workers", "2")
    assert result.returncode == 0, result.stderr
    m = manifest(out)
    per_record = m["params"]["windows_per_record"]
    for name, split in m["splits"].items():
        shards = split["shards"]
        records = -(-split["n_samples"] // per_record)
        assert len(shards) >= min(8, records) and len(shards) >= 2, (name, len(shards), records)
        size = split["samples_per_shard"]
        assert size % per_record == 0 and all(sh["n_samples"] == size for sh in shards[:-1]), name
    assert m["request"]["samples_per_shard"] is None and m["request"]["min_shards_per_split"] == 8


@pytest.mark.slow
def test_an_explicit_samples_per_shard_is_kept(tmp_path):
    out = tmp_path / "out"
    argv = ["prepare", KLEBSIELLA, "--out", out, "-q", "--workers", "2", "--samples-per-shard", "1000"]
    assert cli(*argv).returncode == 0
    m = manifest(out)
    assert all(len(s["shards"]) == 1 and s["samples_per_shard"] == 1000 for s in m["splits"].values())
    assert m["request"]["min_shards_per_split"] is None


# --- 7. smaller items ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_replace_n_reports_how_many_bases_it_replaced(tmp_path, lambda_bases):
    seqs = {
        "lam_a": lambda_bases[:3000] + "XX" + lambda_bases[3000:6000] + "@",
        "lam_b": lambda_bases[6000:9000],
        "lam_c": "J" + lambda_bases[9000:12000] + "*",
    }
    fasta = write_fasta(tmp_path / "bad.fa", seqs)
    out = tmp_path / "out"
    argv = ["prepare", fasta, "--out", out, "--seq-length", "1024", *ONE_SPLIT, "--on-invalid", "replace-N", "-q"]
    result = cli(*argv)
    assert result.returncode == 0, result.stderr
    assert "replaced 5 base(s)" in result.stdout and "in 2 sequence(s)" in result.stdout, result.stdout
    assert f"5 in {fasta}" in result.stdout
    assert "5 bases replaced with N in 2 sequences" in cli("inspect", out).stdout
    replaced = manifest(out)["params"]["source"]["replaced"]
    assert replaced == {"bases": 5, "sequences": 2, "by_file": {str(fasta): 5}}


@pytest.mark.slow
def test_a_bad_character_is_printed_plainly_with_its_position(tmp_path, lambda_bases):
    fasta = write_fasta(tmp_path / "bad.fa", {"lam": lambda_bases[:500] + "X" + lambda_bases[500:1000]})
    out = tmp_path / "out"
    message = one_error_line(cli("prepare", fasta, "--out", out, "--seq-length", "256", *ONE_SPLIT, "-q"))
    assert f"sequence 'lam' in {fasta} has 'X' at position 500 (0-based)" in message, message
    assert "b'" not in message
    assert_nothing_written(out)
    skipped = tmp_path / "skipped"
    argv = ["prepare", fasta, LAMBDA, "--out", skipped, "--seq-length", "256", *ONE_SPLIT, "-q", "--on-invalid", "skip"]
    assert cli(*argv).returncode == 0
    (entry,) = manifest(skipped)["skipped"]
    assert "has 'X' at position 500" in entry["reason"] and "b'" not in entry["reason"]


def test_compress_help_describes_what_it_does():
    text = " ".join(cli("prepare", "--help").stdout.split())
    entry = text.split("--compress {none,zstd}", 1)[1].split("--compress-level", 1)[0]
    assert "format version" not in entry
    assert "zstd compresses each record" in entry and "(default: none)" in entry


@pytest.mark.slow
def test_printed_rate_is_over_the_work_not_the_torch_import(tmp_path):
    """Lambda (48 kbp) took ~0.1 s of work and ~2-5 s of importing webdataset/torch: the rate is over
    the work (never a '0.0 Mbp/s'), and the import is said apart."""
    out = tmp_path / "out"
    result = cli("prepare", LAMBDA, "--out", out, *ONE_SPLIT, "--quiet", "--workers", "1")
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[0]
    found = re.fullmatch(r"written 1 shard\(s\) in ([\d.]+) s \(([\d.e+-]+) Mbp/s, plus ([\d.]+) s to load .*", line)
    assert found is not None, line
    seconds, rate, _ = (float(g) for g in found.groups())
    assert "0.0 Mbp/s" not in line and rate > 0, line
    # the rate is over the printed seconds (rounded to 0.01 s): within a factor 2, not the ~20 of the import
    assert 0.5 < rate * max(seconds, 0.01) / (48502 / 1e6) < 2 or seconds < 0.05, line


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("--seq-lenght", "--seq-length"), ("--strid", "--stride"), ("--samples-per-shart", "--samples-per-shard")],
)
def test_a_misspelt_prepare_option_gets_prepares_one_line_error(tmp_path, typo, meant):
    out = tmp_path / "out"
    message = one_error_line(cli("prepare", LAMBDA, "--out", out, typo, "1024"))
    assert message.startswith(f"unrecognized option {typo}; did you mean {meant}"), message
    assert_nothing_written(out)


def test_an_abbreviated_option_is_not_taken(tmp_path):
    """`--seq-len` is not silently read as --seq-length."""
    out = tmp_path / "out"
    message = one_error_line(cli("prepare", LAMBDA, "--out", out, "--seq-len", "1024", *ONE_SPLIT))
    assert message.startswith("unrecognized option --seq-len; did you mean --seq-length"), message
    assert_nothing_written(out)


# --- 9. show ------------------------------------------------------------------------------------------

HEADER = re.compile(
    r">(?P<key>\S+)  sequence=(?P<seq>\S+)  start=(?P<start>\d+)  strand=(?P<strand>[+-])  tag=(?P<tag>.*?)  "
    r"length=(?P<length>\d+)  shard=(?P<shard>\S+)  record=(?P<record>\S+)"
)


def shown(text: str) -> list[tuple[dict[str, str], str]]:
    """(header fields, bases) of every window `show` printed; checks the 80-column wrapping."""
    windows: list[tuple[dict[str, str], list[str]]] = []
    for line in text.splitlines():
        if line.startswith(">"):
            found = HEADER.fullmatch(line)
            assert found is not None, line
            windows.append((found.groupdict(), []))
        else:
            windows[-1][1].append(line)
    for _, lines in windows:
        assert all(len(line) == 80 for line in lines[:-1]) and 0 < len(lines[-1]) <= 80
    return [(fields, "".join(lines)) for fields, lines in windows]


@pytest.fixture(scope="module")
def kleb_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("show") / "kleb"
    argv = ["prepare", KLEBSIELLA, "--out", out, "--seq-length", "1024", "--tags", "regex:NODE_(\\d+)_", "-q"]
    assert cli(*argv, "--workers", "2").returncode == 0
    return out


@pytest.mark.slow
def test_show_prints_the_stored_bases_of_each_window(kleb_dataset, klebsiella_seqs):
    result = cli("show", kleb_dataset, "--split", "val", "-n", "7")
    assert result.returncode == 0, result.stderr
    windows = shown(result.stdout)
    assert len(windows) == 7
    for fields, bases in windows:
        seq, start = fields["seq"], int(fields["start"])
        assert fields["strand"] == "+" and fields["shard"].startswith("val/")
        assert fields["key"].startswith(f"{seq}/")
        assert fields["tag"] == re.match(r"NODE_(\d+)_", seq).group(1)
        assert int(fields["length"]) == len(bases) and len(bases) <= 1021
        assert bases == klebsiella_seqs[seq][start : start + len(bases)]
    assert {fields["seq"] for fields, _ in windows} <= set(split_seq_ids(kleb_dataset, "val"))


@pytest.mark.slow
def test_show_reads_a_dataset_from_a_url(kleb_dataset, http_server):
    local = cli("show", kleb_dataset, "-n", "3")
    server = http_server(kleb_dataset)
    remote = cli("show", server.url, "-n", "3")
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout and len(shown(remote.stdout)) == 3


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--split", "tset"], "has no 'tset' split; it has train, val, test"),
        (["-n", "0"], "argument -n: must be at least 1, got 0"),
        (["-n", "five"], "argument -n: invalid"),
        (["--splt", "val"], "unrecognized option --splt; did you mean --split?"),
    ],
)
def test_show_refuses_bad_arguments_in_one_line(kleb_dataset, args, expected):
    message = one_error_line(cli("show", kleb_dataset, *args), "bionemo-wds show: error: ")
    assert expected in message, message


def test_show_names_a_missing_dataset(tmp_path):
    message = one_error_line(cli("show", tmp_path / "nothing"), "bionemo-wds show: error: ")
    assert str(tmp_path / "nothing") in message and "not a prepared dataset" in message


def test_show_help_explains_every_option():
    text = cli("show", "--help").stdout
    for option in ("--split", "-n N", "--width"):
        assert option in text
    assert "strand" in text and "soft-masked" in text
