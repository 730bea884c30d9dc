"""What a new (or careless) user hits with `bionemo-wds prepare`, `inspect` and `verify` (issue 10).

The standard: a mistake gets one line naming the culprit and exit code 2 (1 stays "verify found
problems"); nothing exits 0 with wrong output; no traceback for a user error; a refused run
writes nothing. The option cases run the real CLI in a subprocess (`python -m bionemo_wds.cli`) on
the bundled Klebsiella assembly (119 contigs, so every split can be filled and a wrong option is the
only thing that can stop the run), with small windows.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import KLEBSIELLA, LAMBDA, split_seq_ids

from bionemo_wds.cli.main import main
from bionemo_wds.cli.prepare import BUNDLED_GENOME
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import iter_records
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.sources import fasta_copies

ROOT = Path(__file__).resolve().parents[1]
#: Small windows: a run that is not refused takes about a second.
SMALL = ["--seq-length", "1024", "--stride", "1000", "--workers", "1", "--quiet"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`bionemo-wds ARGS` in a fresh interpreter, run in `cwd`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bionemo_wds.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def one_error_line(rc: int, err: str, command: str, *culprits: object) -> str:
    """Exit code 2, no traceback, and one `bionemo-wds COMMAND: error: ...` line naming every culprit."""
    assert "Traceback" not in err, err
    assert rc == 2, f"exit code {rc}; stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got: {err!r}"
    prefix = f"bionemo-wds {command}: error: "
    assert lines[0].startswith(prefix), lines[0]
    for culprit in culprits:
        assert str(culprit) in lines[0], f"{culprit} is not named in: {lines[0]}"
    return lines[0][len(prefix) :]


# --- inputs are required; the demo config names the bundled genome --------------------------------


def test_prepare_without_inputs_is_refused_and_names_the_bundled_genome(tmp_path):
    """On main this prepared the bundled genome without a word about it and exited 0."""
    result = cli("prepare", "--out", "out", *SMALL, cwd=tmp_path)
    message = one_error_line(result.returncode, result.stderr, "prepare", "INPUTS", BUNDLED_GENOME)
    assert "inputs:" in message  # where else they may be given
    assert list(tmp_path.iterdir()) == [], "a refused run wrote something"


def test_config_without_inputs_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "no_inputs.yaml"
    config.write_text("seq_length: 1024\nstride: 1000\nout: out\n")
    rc = main(["prepare", "--config", str(config), "--quiet"])
    one_error_line(rc, capsys.readouterr().err, "prepare", "INPUTS", "inputs:")
    assert [p.name for p in tmp_path.iterdir()] == ["no_inputs.yaml"], "a refused run wrote something"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """tools/demo.sh's prepare line, run as it runs it (from the repository root), into a temporary --out."""
    out = tmp_path_factory.mktemp("demo") / "shards"
    result = cli("prepare", "--config", "configs/prepare_demo.yaml", "--out", str(out), "--quiet", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_demo_config_names_the_bundled_genome_and_still_prepares_it(demo):
    config = yaml.safe_load((ROOT / "configs" / "prepare_demo.yaml").read_text())
    assert config["inputs"] == "bionemo_wds/data/klebsiella_fragmented_assembly.fa.gz"
    assert (ROOT / config["inputs"]).resolve() == BUNDLED_GENOME == KLEBSIELLA.resolve()
    manifest = json.loads((demo / "manifest.json").read_text())
    assert [i["path"] for i in manifest["request"]["inputs"]] == [str(BUNDLED_GENOME)]
    assert manifest["params"]["seq_length"] == 512 and manifest["params"]["stride"] == 500


def test_inspect_names_the_inputs(demo, capsys):
    assert main(["inspect", str(demo)]) == 0
    out = capsys.readouterr().out
    assert f"inputs (1 file(s), 1.7 MB): {BUNDLED_GENOME}" in out.splitlines()[1]


def test_the_sequence_table_names_each_splits_sequences_once(demo, klebsiella_seqs):
    """The names per split, from the sequence table: every input sequence in exactly one split, in input
    order, and exactly the sequences whose windows that split's shards hold; manifest.json names none."""
    text = (demo / "manifest.json").read_text()
    manifest = json.loads(text)
    listed = {split: split_seq_ids(demo, split) for split in manifest["splits"]}
    order = list(klebsiella_seqs)
    assert sorted(n for names in listed.values() for n in names) == sorted(order)
    for split, names in listed.items():
        assert names == sorted(names, key=order.index), f"{split}: not in input order"
        assert len(names) == manifest["splits"][split]["n_sequences"]
        held = set()
        for shard in manifest["splits"][split]["shards"]:
            with open(demo / shard["path"], "rb") as fh:
                held |= {str(s) for _, block in iter_records(fh) for s in block.seq_id}
        assert held == set(names), split
    assert '"seq_ids"' not in text


# --- --help ----------------------------------------------------------------------------------------


def test_help_shows_inputs_and_out_as_required_and_each_default_once(capsys):
    with pytest.raises(SystemExit) as info:
        main(["prepare", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    usage = text.splitlines()[0]
    assert usage.startswith("usage: bionemo-wds prepare INPUTS") and "--out DIR|URL" in usage, usage
    assert "[--out" not in usage, usage
    flat = " ".join(text.split())
    assert "(default: None)" not in flat and "default: the bundled" not in flat
    inputs_entry = flat.split(" INPUTS ", 2)[2].split(" --out ")[0]
    assert "required" in inputs_entry, inputs_entry


# --- options that exited 0 with wrong output, or with a traceback -----------------------------------

OPTION_CASES = {
    # main: exit 0, all three splits written onto out/evil-000000.tar (the last one wins)
    "prefix outside its split": (["--prefix", "../evil"], ["--prefix", "'../evil'", "file-name stem"]),
    # main: exit 0, every sequence in train (NaN compares false everywhere)
    "NaN split ratio": (["--split", "nan,0.5,0.5"], ["--split", "nan,0.5,0.5", "finite"]),
    # main: numpy's "expected non-negative integer" traceback, exit 1
    "negative seed": (["--seed", "-1"], ["--seed", "-1", "at least 0"]),
    # main: exit 0, -1 accepted and quietly run as one writer (`workers <= 1`)
    "negative workers": (["--workers", "-1"], ["--workers", "-1", "at least 1"]),
    # main: zstandard's "level must be less than 23" traceback from a writer process, exit 1
    "zstd level out of range": (["--compress", "zstd", "--compress-level", "99"], ["--compress-level", "99", "22"]),
}


@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_bad_option_is_one_line_exit_2_and_writes_nothing(tmp_path, case):
    argv, culprits = OPTION_CASES[case]
    result = cli("prepare", str(KLEBSIELLA), "--out", "out", *SMALL, *argv, cwd=tmp_path)
    one_error_line(result.returncode, result.stderr, "prepare", *culprits)
    assert list(tmp_path.iterdir()) == [], f"a refused run wrote {sorted(map(str, tmp_path.rglob('*')))}"


def test_out_under_a_file_is_one_line_exit_2(tmp_path):
    """main: `NotADirectoryError` traceback from makedirs, exit 1."""
    (tmp_path / "afile").write_text("not a directory\n")
    result = cli("prepare", str(KLEBSIELLA), "--out", "afile/sub", *SMALL, cwd=tmp_path)
    one_error_line(result.returncode, result.stderr, "prepare", "--out afile/sub", "afile", "not a directory")
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]
    assert (tmp_path / "afile").read_text() == "not a directory\n"


@pytest.mark.parametrize("prefix", ["../evil", "a/b", "a\\b", ".", "..", "", ".hidden", "-x", "a*", "p" * 201])
def test_prefix_must_be_a_plain_file_name_stem(prefix):
    with pytest.raises(BadInputError, match="--prefix must be a plain file-name stem"):
        PrepareOptions(prefix=prefix).check()


@pytest.mark.parametrize("prefix", ["wdshards", "lam", "kleb_v2.1", "E-coli", "p" * 200])
def test_plain_prefixes_are_accepted(prefix):
    PrepareOptions(prefix=prefix).check()


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("split", (float("nan"), 0.5, 0.5), "finite"),
        ("split", (float("inf"), 0.0, 0.0), "finite"),
        ("split", (0.8, -0.1, 0.3), "non-negative"),
        ("split", (0.0, 0.0, 0.0), "not all be zero"),
        ("split", (0.5, 0.5), "3 numbers"),
        ("seed", -1, "at least 0"),
        ("compress_level", 0, "between 1 and 22"),
        ("compress_level", 23, "between 1 and 22"),
        ("stride", 0, "at least 1"),
        ("samples_per_shard", 0, "at least 1"),
        ("seq_length", 1.5, "integer"),
        ("tail", "sideways", "one of end, drop"),
    ],
)
def test_python_api_refuses_the_same_values_before_writing(tmp_path, field, value, words):
    """`prepare()` checks its options first, so the data module and scripts get the same one line."""
    out = tmp_path / "out"
    with pytest.raises(BadInputError, match=words) as info:
        prepare([LAMBDA], out, PrepareOptions(**{field: value, "progress": False}))
    assert str(info.value).startswith("--" + field.replace("_", "-"))
    assert not out.exists()


# --- damaged manifests: inspect and verify name the file --------------------------------------------


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda m: "{not json", ["is not valid JSON"]),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "params"}), ["has no params"]),
        (lambda m: json.dumps({**m, "params": {k: v for k, v in m["params"].items() if k != "prefix"}}), ["prefix"]),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "splits"}), ["has no splits"]),
    ],
    ids=["not-json", "no-params", "no-prefix", "no-splits"],
)
def test_damaged_manifest_names_the_file_exit_2(demo, tmp_path, capsys, damage, words):
    """main: a manifest without `params` ended `inspect` (and `verify` with shards present) in a bare
    `KeyError: 'params'` traceback."""
    ds = tmp_path / "ds"
    shutil.copytree(demo, ds)
    manifest = json.loads((ds / "manifest.json").read_text())
    (ds / "manifest.json").write_text(damage(manifest))
    for command in (["inspect", str(ds)], ["verify", str(ds), "--quiet"]):
        capsys.readouterr()
        rc = main(command)
        one_error_line(rc, capsys.readouterr().err, command[0], ds / "manifest.json", *words)


# --- a full disk while unpacking gzip input ---------------------------------------------------------


def test_full_disk_while_unpacking_gzip_input_is_reported_as_such(tmp_path, capsys, monkeypatch):
    """main called a full disk "not a readable gzip file". The write into the cache fails here with
    OSError(ENOSPC) as a full disk makes it fail: filling a real filesystem would take a small one
    of its own (a tmpfs or loop mount, which needs root and is not there on CI), and filling the
    disk the tests run on would break everything else using it."""
    real_atomic_write = fasta_copies.atomic_write

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.fh, name)

    @contextlib.contextmanager
    def atomic_write_on_a_full_disk(path, *args, **kwargs):
        with real_atomic_write(path, *args, **kwargs) as fh:  # the real temporary, removed on the error
            yield FullDisk(fh)

    monkeypatch.setattr(fasta_copies, "atomic_write", atomic_write_on_a_full_disk)
    out = tmp_path / "out"
    rc = main(["prepare", str(KLEBSIELLA), "--out", str(out), *SMALL])
    cache_copy = out / ".cache" / "0000-klebsiella_fragmented_assembly.fa"
    message = one_error_line(rc, capsys.readouterr().err, "prepare", "no space left on device", cache_copy, KLEBSIELLA)
    assert "gzip" in message and "not a readable" not in message
    assert list(tmp_path.iterdir()) == [], f"the refused run left {sorted(map(str, tmp_path.rglob('*')))}"
