"""prepare on real genomes: exact windows, disjoint and stratified splits, determinism, resume."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    KLEBSIELLA,
    LAMBDA,
    as_format_version_1,
    as_format_version_3,
    edit_record_index,
    record_index_rows,
    shard_index,
    shard_windows,
    tree_bytes,
    write_record_index_rows,
)

from bionemo_wds.cli.main import main
from bionemo_wds.format import file_sha256, index_shard, iter_records, read_manifest, write_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.report import verify
from bionemo_wds.prepare.splits import SPLIT_NAMES, length_buckets

SMALL = dict(seq_length=2048, stride=1900, samples_per_shard=150, windows_per_record=7, progress=False)


@pytest.fixture(scope="module")
def kleb_small(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kleb") / "out"
    prepare([KLEBSIELLA], out, PrepareOptions(**SMALL, workers=2))
    return out


@pytest.mark.parametrize("tail", ["end", "drop"])
def test_every_window_is_the_fasta_substring(tmp_path, klebsiella_seqs, tail):
    out = tmp_path / "out"
    prepare([KLEBSIELLA], out, PrepareOptions(**{**SMALL, "tail": tail}, workers=1))
    window = read_manifest(out).params.window_length
    assert window == 2048 - 3
    seen = 0
    covered = {name: np.zeros(len(s), bool) for name, s in klebsiella_seqs.items()}
    for rows in shard_windows(out).values():
        for seq_id, start, _, bases, tag in rows:
            ref = klebsiella_seqs[seq_id][start : start + window].upper().encode()
            assert bases == ref, (seq_id, start)
            assert tag == ""
            covered[seq_id][start : start + len(bases)] = True
            seen += 1
    assert seen > 1000
    lost = sum(int((~c).sum()) for c in covered.values())
    if tail == "end":
        assert lost == 0
    else:
        assert 0 < lost <= len(covered) * (1900 - 1)


def test_no_sequence_in_two_splits_and_length_mix(kleb_small, klebsiella_seqs):
    manifest = read_manifest(kleb_small)
    seqs_by_split = {split: {r[0] for r in rows} for split, rows in shard_windows(kleb_small).items()}
    assert set(seqs_by_split) == set(SPLIT_NAMES)
    for a in SPLIT_NAMES:
        for b in SPLIT_NAMES:
            if a < b:
                assert not seqs_by_split[a] & seqs_by_split[b]
    assert set().union(*seqs_by_split.values()) == set(klebsiella_seqs), "no sequence lost"
    lengths = {n: len(s) for n, s in klebsiella_seqs.items()}
    names = list(lengths)
    bucket_of = dict(zip(names, length_buckets(np.array([lengths[n] for n in names]))))
    ratios = dict(zip(SPLIT_NAMES, (0.8, 0.1, 0.1)))
    for bucket in set(bucket_of.values()):
        total = sum(lengths[n] for n in names if bucket_of[n] == bucket)
        for split, members in seqs_by_split.items():
            share = sum(lengths[n] for n in members if bucket_of[n] == bucket) / total
            assert abs(share - ratios[split]) < 0.03, (bucket, split, share)
        # the manifest's length mix says the same thing
    for split, info in manifest.splits.items():
        assert info.n_sequences == len(seqs_by_split[split])
        assert info.n_bases == sum(lengths[n] for n in seqs_by_split[split])


def test_windows_are_in_seeded_global_order(kleb_small):
    rows = shard_windows(kleb_small)["train"]
    seq_ids = [r[0] for r in rows]
    changes = sum(a != b for a, b in itertools.pairwise(seq_ids))
    assert changes > len(rows) // 2, "shards mix sequences instead of following contig order"


def test_same_bytes_for_one_and_two_workers(tmp_path, kleb_small):
    one = tmp_path / "one"
    prepare([KLEBSIELLA], one, PrepareOptions(**SMALL, workers=1))
    assert len(read_manifest(one).splits["train"].shards) > 3
    assert tree_bytes(one) == tree_bytes(kleb_small)


@pytest.mark.slow
def test_gzip_plain_and_multimember_inputs_give_the_same_shards(tmp_path, kleb_small):
    plain = tmp_path / "kleb.fa"
    plain.write_bytes(gzip.decompress(KLEBSIELLA.read_bytes()))
    # bgzip files are multi-member gzip; this checks that path without needing the bgzip tool
    data = plain.read_bytes()
    multi = tmp_path / "kleb_multi.fa.gz"
    multi.write_bytes(b"".join(gzip.compress(data[i : i + 65280]) for i in range(0, len(data), 65280)))
    for src in (plain, multi):
        out = tmp_path / f"out-{src.name}"
        prepare([src], out, PrepareOptions(**SMALL, workers=2))
        shards = {k: v for k, v in tree_bytes(out).items() if k.endswith(".tar")}
        assert shards == {k: v for k, v in tree_bytes(kleb_small).items() if k.endswith(".tar")}
    assert not (tmp_path / "kleb.fa.fai").exists(), "nothing is written beside the inputs"


def test_many_inputs_and_directories(tmp_path, lambda_seq, klebsiella_seqs):
    indir = tmp_path / "in"
    indir.mkdir()
    shutil.copy(LAMBDA, indir / "lambda.fa.gz")
    out = tmp_path / "out"
    prepare([indir, KLEBSIELLA], out, PrepareOptions(**SMALL, workers=2))
    seen = {r[0] for rows in shard_windows(out).values() for r in rows}
    assert seen == set(klebsiella_seqs) | {"gi|9626243|ref|NC_001416.1|"}


def test_lineage_tags_shrink_the_window_and_travel_with_each_window(tmp_path, lambda_seq):
    fa = tmp_path / "tagged.fa"
    tag = "d__Viruses;p__Uroviricota;c__Caudoviricetes"
    fa.write_text(f">lam1 phage lambda {tag}\n{lambda_seq[:20000]}\n>lam2 untagged half\n{lambda_seq[20000:]}\n")
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="gave no tag to 1 of 2 sequences"):  # lam2
        prepare([fa], out, PrepareOptions(seq_length=1024, stride=900, tags="lineage", split=(1, 0, 0), progress=False))
    params = read_manifest(out).params
    assert params.max_tag_bytes == len(tag) + 2
    assert params.window_length == 1024 - 3 - len(tag) - 2
    tags = {r[0]: r[4] for r in shard_windows(out)["train"]}
    assert tags == {"lam1": f"|{tag}|", "lam2": ""}


def test_rerun_is_a_no_op_and_other_options_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    args = [
        "prepare",
        str(LAMBDA),
        "--out",
        str(out),
        "--seq-length",
        "1024",
        "--stride",
        "1000",
        "--split",
        "1,0,0",
        "--quiet",
    ]
    assert main(args) == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.tar")}
    capsys.readouterr()
    assert main(args) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in out.rglob("*.tar")}
    assert main([*args, "--stride", "900"]) == 2
    assert "stride" in capsys.readouterr().err
    assert main([*args, "--stride", "900", "--overwrite"]) == 0
    assert read_manifest(out).params.stride == 900


def test_verify_catches_flipped_byte_and_truncation(tmp_path, kleb_small, capsys):
    ds = tmp_path / "ds"
    shutil.copytree(kleb_small, ds)
    assert verify(ds, progress=False).ok
    shards = sorted(ds.rglob("*.tar"))
    flipped, truncated = shards[0], shards[-1]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    truncated.write_bytes(truncated.read_bytes()[:-3000])
    report = verify(ds, progress=False)
    names = "\n".join(report.problems)
    assert str(flipped.relative_to(ds)) in names and str(truncated.relative_to(ds)) in names
    assert main(["verify", str(ds), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert flipped.name in err and truncated.name in err


@pytest.mark.slow
def test_kill_9_then_rerun_gives_the_same_bytes(tmp_path, kleb_small):
    """A real SIGKILL mid-write: no partial shard is visible, and the rerun completes the same bytes."""
    out = tmp_path / "out"
    opts = ["--seq-length", "2048", "--stride", "1900", "--samples-per-shard", "150", "--windows-per-record", "7"]
    cmd = [
        sys.executable,
        "-m",
        "bionemo_wds.cli",
        "prepare",
        str(KLEBSIELLA),
        "--out",
        str(out),
        "--quiet",
        "--workers",
        "1",
        *opts,
    ]
    # slow the writer down only enough to be caught mid-run: many tiny shards, one fsync each
    slow = [*cmd[: -len(opts)], *opts[:4], "--samples-per-shard", "3", "--windows-per-record", "1"]
    proc = subprocess.Popen(slow, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    deadline = time.time() + 60
    while time.time() < deadline and len(list(out.glob("train/*.tar"))) < 5:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "killed too late to test resume"
    partial = sorted(out.rglob("*.tar"))
    assert partial, "killed before any shard"
    assert all(p.name.startswith("wdshards-") for p in partial)
    # the rerun with the same options finishes the job
    subprocess.run(slow, check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert not list(out.rglob(".*tmp*")) and not (out / ".cache").exists()
    uninterrupted = tmp_path / "ref"
    ref_cmd = [*slow]
    ref_cmd[ref_cmd.index(str(out))] = str(uninterrupted)
    subprocess.run(ref_cmd, check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert tree_bytes(out) == tree_bytes(uninterrupted)
    assert verify(out, progress=False).ok


def test_config_file_and_command_line_precedence(tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"inputs: [{LAMBDA}]\nseq_length: 1024\nstride: 1000\nsplit: [1, 0, 0]\nseed: 7\n")
    out = tmp_path / "out"
    assert main(["prepare", "--config", str(cfg), "--out", str(out), "--stride", "800", "--quiet"]) == 0
    params = read_manifest(out).params
    assert (params.seq_length, params.stride, params.seed) == (1024, 800, 7)
    bad = tmp_path / "bad.yaml"
    bad.write_text("seq_lenght: 10\n")
    assert main(["prepare", "--config", str(bad), "--out", str(tmp_path / "x"), "--quiet"]) == 2


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    text = capsys.readouterr().out
    for option in (
        "--seq-length",
        "--stride",
        "--tail",
        "--split",
        "--split-list",
        "--seed",
        "--tags",
        "--on-invalid",
        "--samples-per-shard",
        "--windows-per-record",
        "--workers",
        "--overwrite",
        "--config",
        "--prefix",
        "--quiet",
    ):
        assert option in text


@pytest.mark.slow
def test_zstd_records_hold_the_same_windows_at_a_quarter_of_the_bytes(tmp_path, kleb_small, klebsiella_seqs):
    out = tmp_path / "z"
    # fewer, larger records and shards than SMALL: per-shard tar padding would dominate 0.3 bytes/base
    prepare(
        [KLEBSIELLA],
        out,
        PrepareOptions(**{**SMALL, "samples_per_shard": 5000, "windows_per_record": 64}, workers=2, compress="zstd"),
    )
    manifest = read_manifest(out)
    assert manifest.format_version == 6 and manifest.params.codec == "zstd"
    assert shard_windows(out) == shard_windows(kleb_small)
    size = sum(p.stat().st_size for p in out.rglob("*.tar"))
    assert size / sum(len(s) for s in klebsiella_seqs.values()) < 0.35
    assert verify(out, progress=False).ok
    plain = read_manifest(kleb_small)
    assert plain.format_version == 6 and plain.params.codec == "none"


# --- regressions found in review ---------------------------------------------------------------

REGRESSION_OPTS = dict(seq_length=1024, stride=1000, samples_per_shard=400, windows_per_record=8, progress=False)


def test_a_stale_cache_is_not_taken_for_the_input(tmp_path):
    """A run killed while cataloguing leaves only .cache; a later run with another input of the same
    name must not read the cached copy of the old one."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "genome.fa.gz").write_bytes(LAMBDA.read_bytes())
    (b / "genome.fa.gz").write_bytes(gzip.compress(b">other_genome\n" + b"ACGT" * 3000 + b"\n"))
    out = tmp_path / "out"
    prepare([a / "genome.fa.gz"], out, PrepareOptions(**{**REGRESSION_OPTS, "split": (1, 0, 0)}))
    for name in os.listdir(out):  # what a kill during cataloguing leaves: the cache only
        if name != ".cache":
            import shutil

            shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink()
    (out / ".cache").mkdir(exist_ok=True)
    (out / ".cache" / "0000-genome.fa").write_bytes(gzip.decompress(LAMBDA.read_bytes()))
    prepare([b / "genome.fa.gz"], out, PrepareOptions(**{**REGRESSION_OPTS, "split": (1, 0, 0)}))
    assert {r[0] for r in shard_windows(out)["train"]} == {"other_genome"}


def test_single_process_prepare_closes_its_files(tmp_path):
    out = tmp_path / "o"
    prepare([KLEBSIELLA], out, PrepareOptions(**REGRESSION_OPTS, workers=1))
    open_paths = [
        os.readlink(f"/proc/self/fd/{fd}")
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}")
    ]
    assert not [p for p in open_paths if str(out) in p]


# --- the record index (format versions 3 and 4) ----------------------------------------------------------

#: sha256 of every shard of `bionemo-wds prepare <Klebsiella> --samples-per-shard 100 --workers 2
#: --split-rule longest-first`. First pinned with the code before the record index existed (format
#: version 1): the index changed the manifest only, never a shard byte. Pinned again when the window
#: order across shards became computed (`permutation.SeededPermutation`, request key ``window_order``):
#: the same windows with the same bytes, in another order (test_shard_plan checks the windows are the
#: grid's). The split rule of those versions, now ``--split-rule longest-first``, still writes them.
PINNED_DEFAULT_SHARDS = {
    "test/wdshards-000000.tar": "3215b30c6febea16c6dc26c9f871392a3306644ccd7f4809fb0b0565cf95701e",
    "train/wdshards-000000.tar": "29690e62ac513c6d86d64ed7aa5e19c5ca0cf99847d85a4f4586308b8bda7de5",
    "train/wdshards-000001.tar": "cb8685eee0099778c1d391e710bf358e101d737dccb8b1b4fca72ae0d42341e3",
    "train/wdshards-000002.tar": "a4a73df6673b8e0bdac704b17137dc8ec017f784669a9e626a857cd6b37d258d",
    "train/wdshards-000003.tar": "c44367b308a89c9c228c1469e07000b769dcab532eebed285bd56f5af64b70e2",
    "train/wdshards-000004.tar": "acf489abea5cf3b3678034334432c24e1a83da44b4e8379f8189bf3eb6f73754",
    "train/wdshards-000005.tar": "5209fff773743d81b77996d3fca679b3cdc10b8b7d33287f1caa7d3af7c9079f",
    "train/wdshards-000006.tar": "aac9d52cd074c4ffd3fc45f3b61f4ea5c2359cffa0a0165f921dc39becba1383",
    "val/wdshards-000000.tar": "80b183ed58794f0df7a72b7eec1c0be8265e632120147e5585c22f3147bdf51c",
}
#: sha256 over "<path> <sha256>" lines of the 21 shards of `kleb_small` (SMALL options), pinned with
#: them, and again when the default split became the seeded one (``--split-rule seeded``).
PINNED_SMALL_DIGEST = "636ec2de970d2df351ed79db43577def767a8732839efd0c9d93bc296b6aeca4"


@pytest.mark.parametrize("case", [None, "upper", "keep"])
def test_shard_bytes_are_those_of_format_version_1(tmp_path, kleb_small, case):
    """--case upper (with the split rule of those versions) writes what every earlier version wrote;
    the bundled genome has no lower case, so the default (keep) writes the same bytes too: only the
    manifest's case differs."""
    out = tmp_path / "default"
    # 16 windows per record: the default of format version 1 (records are now cut by bases by default,
    # which gives the same records for full-length windows but fewer for short contigs)
    argv = ["prepare", str(KLEBSIELLA), "--out", str(out), "--quiet", "--samples-per-shard", "100", "--workers", "2"]
    argv += ["--split-rule", "longest-first", "--windows-per-record", "16"]
    assert main([*argv, *(["--case", case] if case else [])]) == 0
    shards = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*.tar")}
    assert shards == PINNED_DEFAULT_SHARDS
    manifest = read_manifest(out)
    assert manifest.params.case == manifest.params.tokenizer["case"] == (case or "keep")
    assert {sh.path: sh.sha256 for s in manifest.splits.values() for sh in s.shards} == shards
    lines = [
        f"{p.relative_to(kleb_small)} {hashlib.sha256(p.read_bytes()).hexdigest()}"
        for p in sorted(kleb_small.rglob("*.tar"))
    ]
    assert hashlib.sha256("\n".join(lines).encode()).hexdigest() == PINNED_SMALL_DIGEST


def test_default_records_are_cut_by_bases(tmp_path):
    """Without --windows-per-record a record holds the windows whose first base falls in one block of
    16 full windows' bases: 16 full-length windows, or more short ones (contigs below 8 kb)."""
    out = tmp_path / "o"
    prepare([KLEBSIELLA], out, PrepareOptions(split=(1, 0, 0), progress=False, workers=1))
    manifest = read_manifest(out)
    window, per_record = manifest.params.window_length, manifest.params.windows_per_record
    assert per_record == 16 and manifest.params.records_by == "bases"
    budget = per_record * window
    counts = []
    for k, shard in enumerate(manifest.splits["train"].shards):
        with open(out / shard.path, "rb") as fh:
            lengths = [len(block.bases(i)) for _, block in iter_records(fh, shard.path) for i in range(len(block))]
        bounds = [0, *itertools.accumulate(shard_index(out, "train", k).windows.tolist())]
        for lo, hi in itertools.pairwise(bounds):
            first_bases = [sum(lengths[:i]) for i in range(lo, hi)]
            assert len({b // budget for b in first_bases}) == 1  # one block of bases per record
            if all(n == window for n in lengths[lo:hi]):
                assert hi - lo == per_record or hi == len(lengths)
            counts.append(hi - lo)
    assert max(counts) > per_record  # short contigs share records


def test_every_shard_has_its_record_index(kleb_small):
    manifest = read_manifest(kleb_small)
    written = json.loads((kleb_small / "manifest.json").read_text())  # the keys in the file's order
    for split, info in manifest.splits.items():
        assert list(written["splits"][split])[-2:] == ["record_index", "shards"]
        entry = info.record_index
        assert entry.path == f"{split}/record-index.npy"
        assert (entry.bytes, entry.sha256) == file_sha256(kleb_small / entry.path)
        assert entry.records == sum(shard.n_records for shard in info.shards)
        for k, shard in enumerate(info.shards):
            assert list(written["splits"][split]["shards"][k]) == [
                "path",
                "n_samples",
                "n_tokens",
                "bytes",
                "sha256",
                "n_records",
            ]
            index = shard_index(kleb_small, split, k)
            assert len(index) == shard.n_records and int(index.windows.sum()) == shard.n_samples
            assert index.windows.max() == 7 and all(0 < w <= 7 for w in index.windows.tolist())
            assert index_shard(kleb_small / shard.path) == (shard.bytes, shard.sha256, index)


def resume_from(done: Path, out: Path, keep: int | None) -> None:
    """Make `out` what a run killed after writing shards but before its manifest leaves: the plan
    file, and `keep` of `done`'s shards and no record index file (all shards and the index files
    when None: killed between those and the manifest)."""
    from bionemo_wds.prepare.outdir import PLAN_NAME

    shutil.copytree(done, out)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").unlink()
    (out / PLAN_NAME).write_text(json.dumps({"request": manifest["request"]}))
    if keep is not None:  # killed before the index files (written just before the manifest) too
        for p in sorted(out.rglob("*.tar"))[keep:]:
            p.unlink()
        for p in out.rglob("record-index.npy"):
            p.unlink()


@pytest.mark.parametrize("keep", [5, None], ids=["some-shards-reused", "all-shards-reused"])
def test_a_resumed_run_indexes_the_shards_it_reuses(tmp_path, kleb_small, keep):
    out = tmp_path / "out"
    resume_from(kleb_small, out, keep)
    result = prepare([KLEBSIELLA], out, PrepareOptions(**SMALL, workers=2))
    shards = sum(len(info.shards) for info in read_manifest(kleb_small).splits.values())
    assert result.status == "resumed" and result.shards_reused == (keep or shards)
    assert tree_bytes(out) == tree_bytes(kleb_small)  # the manifest too, index and all
    assert verify(out, progress=False).ok


def test_write_manifest_refuses_to_index_a_shard_that_is_not_the_listed_one(tmp_path, kleb_small):
    out = tmp_path / "out"
    shutil.copytree(kleb_small, out)
    manifest = read_manifest(out).to_json()
    del manifest["splits"]["train"]["record_index"]  # a split whose index is still to be written
    shard = manifest["splits"]["train"]["shards"][0]
    shard["sha256"] = "0" * 64
    with pytest.raises(ValueError, match="sha256"):
        write_manifest(out / "manifest.json", manifest)
    assert tree_bytes(out) == tree_bytes(kleb_small)  # neither the manifest nor an index file was written


def tokens_start(record: bytes) -> int:
    """Where the bases of a record start: after the ``tokens`` key and its msgpack bin header."""
    at = record.index(b"\xa6tokens") + 7
    return at + {0xC4: 2, 0xC5: 3, 0xC6: 5}[record[at]]


def test_verify_names_the_record_whose_bytes_changed(tmp_path, kleb_small, capsys):
    """A base set to 0x00 (same size, the manifest's sha256 rewritten to match): only the record
    index can tell, and verify names shard and record."""
    ds = tmp_path / "ds"
    shutil.copytree(kleb_small, ds)
    manifest = read_manifest(ds).to_json()
    shard = manifest["splits"]["train"]["shards"][2]
    index = shard_index(ds, "train", 2)
    path = ds / shard["path"]
    data = bytearray(path.read_bytes())
    offset, size = int(index.offset[3]), int(index.size[3])
    at = offset + tokens_start(bytes(data[offset : offset + size])) + 10
    assert data[at] in b"ACGTN"
    data[at] = 0
    path.write_bytes(bytes(data))
    shard["bytes"], shard["sha256"] = file_sha256(path)
    (ds / "manifest.json").write_text(json.dumps(manifest))
    crc = zlib.crc32(data[offset : offset + size])
    report = verify(ds, progress=False)
    assert report.problems == [
        f"{shard['path']}: record 000002-000003 fails its crc32 check ({crc:08x}, the record index says "
        f"{index.crc32[3]:08x})"
    ]
    assert main(["verify", str(ds), "--quiet"]) == 1
    assert "record 000002-000003 fails its crc32 check" in capsys.readouterr().err


def test_verify_checks_offsets_sizes_and_windows_against_the_index_file(tmp_path, kleb_small):
    ds = tmp_path / "ds"
    shutil.copytree(kleb_small, ds)
    shards = read_manifest(ds).splits["train"].shards
    offset = edit_record_index(ds, "train", 0, 1, "offset", int(shard_index(ds, "train", 0).offset[1]) + 512)
    size = edit_record_index(ds, "train", 1, 0, "size", int(shard_index(ds, "train", 1).size[0]) - 1)
    edit_record_index(ds, "train", 2, 4, "windows", 6)
    rows = record_index_rows(ds, "train")
    n3 = len(rows[3]) - 1
    write_record_index_rows(ds, "train", [*rows[:3], rows[3][:-1], *rows[4:]])  # one record fewer, listed so
    assert verify(ds, progress=False).problems == [
        f"{shards[0].path}: record 000000-000001 starts at byte {offset}, the record index says {offset + 512}",
        f"{shards[1].path}: record 000001-000000 has {size} bytes, the record index says {size - 1}",
        f"{shards[2].path}: record 000002-000004 holds 7 windows, the record index says 6",
        f"{shards[3].path}: record 000003-{n3:06d} is record {n3 + 1} of the shard but the record index lists {n3}",
    ]


def test_verify_checks_a_version_3_manifests_index_columns(tmp_path, kleb_small):
    ds = tmp_path / "ds"
    shutil.copytree(kleb_small, ds)
    as_format_version_3(ds)
    manifest = read_manifest(ds).to_json()
    shards = manifest["splits"]["train"]["shards"]
    shards[0]["records"]["offset"][1] += 512
    shards[1]["records"]["size"][0] -= 1
    shards[2]["records"]["windows"][4] = 6
    shards[3]["records"] = {k: v[:-1] for k, v in shards[3]["records"].items()}
    del shards[4]["records"]
    (ds / "manifest.json").write_text(json.dumps(manifest))
    problems = verify(ds, progress=False).problems
    n3 = len(shards[3]["records"]["offset"])
    assert problems == [
        f"{shards[0]['path']}: record 000000-000001 starts at byte {shards[0]['records']['offset'][1] - 512}, "
        f"the record index says {shards[0]['records']['offset'][1]}",
        f"{shards[1]['path']}: record 000001-000000 has {shards[1]['records']['size'][0] + 1} bytes, "
        f"the record index says {shards[1]['records']['size'][0]}",
        f"{shards[2]['path']}: record 000002-000004 holds 7 windows, the record index says 6",
        f"{shards[3]['path']}: record 000003-{n3:06d} is record {n3 + 1} of the shard but the record index lists {n3}",
        f"{shards[4]['path']}: no record index in the manifest",
    ]


def test_a_dataset_of_format_version_1_verifies_and_says_it_has_no_index(tmp_path, kleb_small):
    ds = tmp_path / "ds"
    shutil.copytree(kleb_small, ds)
    as_format_version_1(ds)
    manifest = read_manifest(ds)
    report = verify(ds, progress=False)
    assert report.ok and report.samples == sum(s.n_samples for s in manifest.splits.values())
    assert report.notes == [
        f"{ds} has no record index (format version 1; written since version 3): records are checked by "
        "their shard's sha256 only"
    ]


def test_writers_read_in_source_order_without_changing_a_byte(tmp_path, monkeypatch):
    """Windows are read a block at a time sorted by (sequence, start); any block size gives the same shards."""
    from bionemo_wds.prepare import writers
    from bionemo_wds.prepare.sources.fasta import FastaReader

    reads: list[tuple[int, int]] = []
    real_read = FastaReader.read
    monkeypatch.setattr(
        FastaReader, "read", lambda self, seq, *a: (reads.append((seq, a[0])), real_read(self, seq, *a))[1]
    )
    digests = []
    default = writers.READ_BLOCK_BASES
    for block in (default, 20_000, 1):
        monkeypatch.setattr(writers, "READ_BLOCK_BASES", block)
        out = tmp_path / f"b{block}"
        reads.clear()
        prepare([KLEBSIELLA], out, PrepareOptions(seq_length=1024, stride=1000, progress=False, workers=1))
        digests.append(sorted((str(p.relative_to(out)), file_sha256(p)) for p in out.rglob("*.tar")))
        writes = reads[-sum(s.n_samples for s in read_manifest(out).splits.values()) :]
        if block == default:  # one block per shard: each shard's reads in source order
            per_shard = [s.n_samples for info in read_manifest(out).splits.values() for s in info.shards]
            at = 0
            for n in per_shard:
                assert writes[at : at + n] == sorted(writes[at : at + n])
                at += n
    assert digests[0] == digests[1] == digests[2]
