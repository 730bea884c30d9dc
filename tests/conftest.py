"""Shared fixtures: the bundled real genomes and small prepared datasets built from them."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bionemo_wds.format import INDEX_DTYPE, RecordIndex, file_sha256, iter_records, read_manifest, shard_indexes
from bionemo_wds.format.manifest import dumps_manifest
from bionemo_wds.storage.store import Store

DATA = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data"
LAMBDA = DATA / "lambda_phage_NC_001416.fa.gz"
KLEBSIELLA = DATA / "klebsiella_fragmented_assembly.fa.gz"

#: A few seconds of `bionemo-wds fit`: a one-layer tiny model, 4 steps, validating twice on 2 batches.
TINY_FIT = [
    "--model.d_model",
    "32",
    "--model.n_layers",
    "1",
    "--trainer.max_steps",
    "4",
    "--trainer.val_check_interval",
    "2",
    "--trainer.limit_val_batches",
    "2",
]


def pytest_configure(config: pytest.Config) -> None:
    """One compute thread per test process (unless the caller set OMP_NUM_THREADS): the suite runs a
    test process per core (xdist), so torch's default of a thread per core in each of them, and in
    each script a test starts, oversubscribes the cores; the spinning threads of a small model's
    training then cost several times its CPU (docs/development.md has the figures). Children inherit
    the variable."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


#: The test files that take the most CPU (measured 2026-11-28 with their subprocesses, the largest
#: first): run first, so that with one worker per core (xdist hands out whole files in collection
#: order) the run does not end on one core with a long file started last. Only the order changes.
LONGEST_FILES = (
    "test_benchmark.py",
    "test_docs.py",
    "test_dask_executor.py",
    "test_plan_scale.py",
    "test_remote.py",
    "test_scan_tasks.py",
    "test_map_dataset.py",
    "test_upstream_tests_tool.py",
    "test_first_day_prepare.py",
    "test_dataset.py",
    "test_first_day_fit.py",
    "test_mixed.py",
    "test_output_faults.py",
    "test_datamodule.py",
    "test_ddp.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files of `LONGEST_FILES` first, in its order; every test keeps its place within its file."""
    rank = {name: n for n, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(params=["extension", "translate"])
def table_pass(request, monkeypatch):
    """Run a test twice: bytes through their tables by the C extension (`core.byte_tables`), and by
    `bytes.translate` and numpy as where it is not built (the module's handle set to None)."""
    from bionemo_wds.core import byte_lookup

    if request.param == "extension" and byte_lookup.byte_tables is None:
        pytest.skip("the byte_tables extension is not built")
    if request.param == "translate":
        monkeypatch.setattr(byte_lookup, "byte_tables", None)
    return request.param


@pytest.fixture(scope="module")
def dask_scheduler():
    """The address of a real Dask `LocalCluster` (2 worker processes, a thread each, as ``--executor
    dask`` starts), one per test file that asks for it, shared by its tests that need a cluster to
    run on and end in the same bytes. Per file, not per test run: an idle cluster costs a sixth of a
    core (heartbeats, its workers' profilers), more over a whole run than starting one per file. Tests
    that kill a worker or the cluster, or need a fixture's environment in the workers (the S3
    endpoint), start their own."""
    pytest.importorskip("distributed")
    from bionemo_wds.prepare.executors.dask_client import local_cluster

    with local_cluster(2) as cluster:
        yield cluster.scheduler_address


def tool_module(name: str) -> Any:
    """``tools/NAME.py`` imported as a module (the tools are scripts, not a package), once per test
    process: the tests of one tool share it."""
    import importlib.util
    import sys

    key = f"tools_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parents[1] / "tools" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before running it: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[key]


def read_fasta(path: Path) -> dict[str, str]:
    """Name -> sequence of a (gzip) FASTA, read the plain way, as the reference for tests."""
    opener = gzip.open if path.suffix == ".gz" else open
    seqs: dict[str, list[str]] = {}
    name = None
    with opener(path, "rt") as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if line.startswith(">"):
                name = line[1:].split()[0]
                seqs[name] = []
            elif name is not None:
                seqs[name].append(line)
    return {k: "".join(v) for k, v in seqs.items()}


@pytest.fixture(scope="session")
def klebsiella_seqs() -> dict[str, str]:
    return read_fasta(KLEBSIELLA)


@pytest.fixture(scope="session")
def lambda_seq() -> str:
    (seq,) = read_fasta(LAMBDA).values()
    return seq


@pytest.fixture(scope="session")
def kleb_1024(tmp_path_factory) -> Path:
    """The Klebsiella assembly prepared for 1024-token samples (400 windows per shard, 8 per record).
    Shared read-only by the load-side tests; a test that damages it works on a copy."""
    from bionemo_wds.prepare import PrepareOptions, prepare

    out = tmp_path_factory.mktemp("kleb_1024") / "kleb"
    opts = PrepareOptions(seq_length=1024, stride=1000, samples_per_shard=400, windows_per_record=8, progress=False)
    prepare([KLEBSIELLA], out, opts)
    return out


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under `root` (relative path -> bytes): two outputs compared byte for byte."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def shard_windows(root: Path) -> dict[str, list[tuple[str, int, int, bytes, str]]]:
    """split -> [(seq_id, start, window, bases, tag)] read back from a prepared dataset's shards via its manifest."""
    out = {}
    for split, info in read_manifest(root).splits.items():
        rows = []
        for shard in info.shards:
            with open(root / shard.path, "rb") as fh:
                for _, block in iter_records(fh, shard.path):
                    for i in range(len(block)):
                        seq_id, tag = block.seq_id[i], block.tag[i]
                        rows.append((seq_id, int(block.start[i]), int(block.window[i]), block.bases(i).tobytes(), tag))
        out[split] = rows
    return out


#: Evo2-style lineage tags (header form ``>name |d__...;...;s__Genus species|``), of different lengths
#: and depths: one down to the genus only, one with empty ranks (which grow to ``None`` when dropped).
LINEAGES = (
    "|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;"
    "g__Escherichia;s__Escherichia coli|",
    "|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;"
    "g__Klebsiella;s__Klebsiella pneumoniae|",
    "|d__Bacteria;p__Bacillota;c__Bacilli;o__Bacillales;f__Bacillaceae;g__Bacillus;s__Bacillus subtilis|",
    "|d__Bacteria;p__Actinomycetota;c__Actinomycetes;o__Mycobacteriales;f__Mycobacteriaceae;g__Mycobacterium|",
    "|d__Viruses;p__Uroviricota;c__Caudoviricetes;o__;f__;g__Lambdavirus;s__Lambdavirus lambda|",
)


def metagenome_contigs(seed: int = 0) -> dict[str, str]:
    """The Klebsiella assembly cut into contigs of log-normal length (median 3 kb, sigma 1, at least
    200 bp): a metagenome-like catalog, most contigs shorter than an 8 k window."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, seq in read_fasta(KLEBSIELLA).items():
        pos, k = 0, 0
        while pos < len(seq):
            n = max(200, int(rng.lognormal(np.log(3000), 1.0)))
            out[f"{name}_c{k}"] = seq[pos : pos + n]
            pos, k = pos + n, k + 1
    return out


def write_fasta(path: Path, seqs: dict[str, str], descriptions: dict[str, str] | None = None, width: int = 60) -> Path:
    """Write `seqs` (name -> bases) as a FASTA, each header ``>name description`` when one is given."""
    descriptions = descriptions or {}
    with open(path, "w") as fh:
        for name, seq in seqs.items():
            desc = descriptions.get(name)
            fh.write(f">{name} {desc}\n" if desc else f">{name}\n")
            fh.writelines(seq[i : i + width] + "\n" for i in range(0, len(seq), width))
    return path


#: Piece lengths, cycled, that `lambda_pieces` cuts the lambda genome into (some shorter than a window).
PIECE_LENGTHS = (120, 480, 260, 733, 199, 505)


def lambda_pieces(seq: str) -> tuple[dict[str, str], dict[str, str]]:
    """The lambda genome cut into ~130 records (lengths cycling through `PIECE_LENGTHS`, the rest in
    the last), every third with its middle third soft-masked (lower case), each with a lineage from
    `LINEAGES` in its header: (name -> bases, name -> lineage)."""
    seqs, tags, at, i = {}, {}, 0, 0
    while at < len(seq):
        n = PIECE_LENGTHS[i % len(PIECE_LENGTHS)]
        piece = seq[at : at + n] if len(seq) - at - n >= 100 else seq[at:]
        if i % 3 == 1:
            third = len(piece) // 3
            piece = piece[:third] + piece[third : 2 * third].lower() + piece[2 * third :]
        name = f"lam{i:03d}"
        seqs[name], tags[name] = piece, LINEAGES[i % len(LINEAGES)]
        at, i = at + len(piece), i + 1
    return seqs, tags


@pytest.fixture(scope="session")
def lambda_lineage_fa(tmp_path_factory, lambda_seq) -> tuple[Path, dict[str, str], dict[str, str]]:
    """`lambda_pieces` written as a FASTA: (path, name -> bases, name -> lineage tag). Read-only."""
    seqs, tags = lambda_pieces(lambda_seq)
    path = write_fasta(tmp_path_factory.mktemp("lambda_lineage") / "pieces.fa", seqs, tags)
    return path, seqs, tags


# --- the record index of a prepared dataset (format version 4: a file per split) --------------------


def _read_json(root: Path) -> dict:
    return json.loads((Path(root) / "manifest.json").read_text())


def _write_json(root: Path, manifest: dict) -> None:
    (Path(root) / "manifest.json").write_text(dumps_manifest(manifest))


def record_index_rows(root: Path, split: str) -> list[np.ndarray]:
    """A version-4 dataset's record index of `split`, as each shard's rows (copies, free to change)."""
    manifest = _read_json(root)
    info = manifest["splits"][split]
    rows = np.load(Path(root) / info["record_index"]["path"])
    first = np.concatenate([[0], np.cumsum([shard["n_records"] for shard in info["shards"]])])
    return [rows[a:b].copy() for a, b in itertools.pairwise(first.tolist())]


def write_record_index_rows(root: Path, split: str, per_shard: list[np.ndarray]) -> None:
    """Replace `split`'s record index file with these rows (one array per shard), and make the
    manifest agree with the file (each shard's ``n_records``, the file's records, size and sha256):
    what a damaged index that the manifest still describes looks like."""
    manifest = _read_json(root)
    info = manifest["splits"][split]
    entry = info["record_index"]
    path = Path(root) / entry["path"]
    rows = np.concatenate(per_shard).astype(INDEX_DTYPE) if per_shard else np.empty(0, INDEX_DTYPE)
    np.save(path, rows)
    for shard, part in zip(info["shards"], per_shard):
        shard["n_records"] = len(part)
    entry["records"] = len(rows)
    entry["bytes"], entry["sha256"] = file_sha256(path)
    _write_json(root, manifest)


def edit_record_index(root: Path, split: str, shard: int, record: int, column: str, value: int) -> int:
    """Set one value (`column` of record `record` of shard number `shard`) of a version-4 dataset's
    record index file, the manifest made to agree with the file (`write_record_index_rows`), so only
    the index disagrees with the shard; returns the old value."""
    per_shard = record_index_rows(root, split)
    old = int(per_shard[shard][column][record])
    per_shard[shard][column][record] = value
    write_record_index_rows(root, split, per_shard)
    return old


def split_seq_ids(root: Path | str, split: str) -> list[str]:
    """The names of `split`'s sequences, in input order (the sequence table's, for any version)."""
    from bionemo_wds.format.sequence_table import split_names

    return split_names(root, read_manifest(root), split)


def as_format_before_6(root: Path) -> None:
    """Turn a prepared (version-6) dataset into what `prepare` wrote before version 6: version 4 (the
    windows layout) or 5 (the sequence layout), each split entry naming its sequences (``seq_ids``,
    in input order, after ``length_mix``) as well as the sequence table."""
    manifest = _read_json(root)
    assert manifest["format_version"] == 6
    sequences = manifest["params"].get("layout") == "sequences"
    manifest["format_version"] = 5 if sequences else 4
    rows = [line.split("\t") for line in (Path(root) / "sequences.tsv").read_text().splitlines()[1:]]
    for split, info in list(manifest["splits"].items()):
        names = list(dict.fromkeys(row[1] for row in rows if row[0] == split))
        keys = list(info)
        at = keys.index("length_mix") + 1
        manifest["splits"][split] = {
            **{k: info[k] for k in keys[:at]},
            "seq_ids": names,
            **{k: info[k] for k in keys[at:]},
        }
    _write_json(root, manifest)


def as_format_version_3(root: Path) -> None:
    """Turn a prepared dataset into what version 3 wrote: each shard entry's record index as JSON
    columns (``records``) instead of ``n_records``, no ``record_index`` and no index files."""
    if _read_json(root)["format_version"] == 6:
        as_format_before_6(root)
    manifest = _read_json(root)
    assert manifest["format_version"] == 4
    manifest["format_version"] = 3
    for split, info in manifest["splits"].items():
        for shard, rows in zip(info["shards"], record_index_rows(root, split)):
            del shard["n_records"]
            shard["records"] = {name: rows[name].tolist() for name in ("offset", "size", "windows", "crc32")}
        (Path(root) / info.pop("record_index")["path"]).unlink()
    _write_json(root, manifest)


def shard_index(root: Path, split: str, shard: int) -> RecordIndex:
    """Shard number `shard`'s record index of `split` (any version with one), by the package's reader."""
    store = Store(root)
    index = shard_indexes(store, read_manifest(store), split)
    assert index is not None and index[shard] is not None
    return index[shard]


def as_format_version_1(root: Path) -> None:
    """What a dataset written before the record index looks like: no index (no ``n_records``,
    ``record_index`` nor index file; no ``records`` either), format version 1."""
    if _read_json(root)["format_version"] == 6:
        as_format_before_6(root)
    manifest = _read_json(root)
    manifest["format_version"] = 1
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            shard.pop("n_records", None)
            shard.pop("records", None)
        entry = info.pop("record_index", None)
        if entry is not None:
            (Path(root) / entry["path"]).unlink()
    _write_json(root, manifest)


def main_here(capsys, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    """``bionemo-wds ARGV`` through `bionemo_wds.cli.main` in this process (what the console script
    calls): its exit code and output, without a second interpreter importing torch (and megatron-core)
    again. Shaped as `subprocess.run`'s result, so a test checks either the same way."""
    from bionemo_wds.cli.main import main

    argv = [str(arg) for arg in args]
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["bionemo-wds", *argv], code, captured.out, captured.err)


def refused(result: subprocess.CompletedProcess, *says: str) -> None:
    """A refused run (`main_here` or a subprocess): exit 2 and one line on stderr holding each of `says`."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and all(s in lines[0] for s in says), result.stderr


@pytest.fixture(scope="session")
def zygote(tmp_path_factory):
    """The server that forks script runs after importing torch, Lightning and our data module once
    (`forked_runs`), one per test process: ``tests/`` and the repository on the runs' path, output
    unbuffered, one thread per run for torch's operators (the runs share the machine's cores)."""
    from forked_runs import PRELOAD, Zygote

    tests = Path(__file__).parent
    path = os.pathsep.join(filter(None, [str(tests), str(tests.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    server = Zygote(tmp_path_factory.mktemp("zygote") / "server.log", env, PRELOAD)
    yield server
    server.close()
