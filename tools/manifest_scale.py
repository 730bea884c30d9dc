#!/usr/bin/env python
"""How a prepared dataset's manifest and record index scale with the shard count: a synthetic
dataset of `--shards` shards (no shard bytes), then the time and memory to read it and to set up the loader.

The manifest is what `prepare` writes (`format.dumps_manifest` text, byte for byte: the tests check
it) for shards of `--records-per-shard` records of `--windows-per-record` windows: realistic paths,
counts, sizes, sha256 strings and record indexes (offsets as a tar lays members out, sizes of
`--seq-length` windows, random crc32s). Format version 6 (the default, what `prepare` writes) puts
the record index in ``<split>/record-index.npy`` (the bytes `write_manifest` writes), each shard's
``n_records`` in the manifest and the sequences' names in ``sequences.tsv`` (one row per sequence);
``--format-version 4`` names them in the manifest too (``seq_ids``, at most 1,000 per split), as
before version 6; ``--format-version 3`` writes the index as JSON columns in the manifest, as before
version 4. The shard files are not written; for the data module's full ``setup("fit")``,
which lists each split folder and compares every shard's size with the manifest, they are made as
sparse files of their listed size (``os.truncate``: no disk blocks) unless ``--no-sparse``. Each
measurement runs `--repeat` times, each in a fresh child process (as a training job starts), and
the best time is reported; its peak RSS is the child's own (``rss_anon_mb`` / ``rss_file_mb``: the
resident memory after it, the process's own and that of mapped files, the index file among them):

    load     `read_manifest`: its time and the memory the parsed manifest holds
    records  the set-up pieces that need no shard file: `format.read_split_index` of the train split
             (version 4: the file opened and memory-mapped; version 3: the JSON columns converted),
             `SplitRecords.from_manifest` (that, the per-shard checks and the `RecordTable`) and the
             train epoch plan (`plan.train_plan`, rank 0 of 1, micro batch `--micro-batch-size`;
             skipped above `--max-plan-windows`)
    setup    ``GenomicWebDataModule(root, seq_length=..., micro_batch_size=..., num_workers=0).setup("fit")``
             (manifest read, checks against the shard files, train and val records; needs the sparse files)
    first-batch  (``--readable`` only) ``setup("fit")`` and then the first batch of ``train_dataloader()``
             on rank 0 of each of `--world-sizes` with each of `--workers` loader workers: the seconds of
             each, their CPU seconds, the rank's plan, the peak RSS (``VmHWM``) of the process and of its
             loader workers (`first_batch.measure`)

With ``--readable`` the shards can be read: one real shard (``prepare`` of ``--template-fasta`` into
``<out>/.template``, all train, `--records-per-shard` records of `--windows-per-record` windows of
`--seq-length`) hard-linked as every shard, the manifest and record index written by the real writer
(`first_batch.write_linked`), so the loader's checks (sizes, each record's crc32) pass on what it reads:

    python tools/manifest_scale.py --shards 100000 --readable --out /tmp/linked100k --keep \
        --skip load records setup --workers 0 2 --world-sizes 1 8

Example (100,000 shards of 16 records: a 23 MB manifest and a 32 MB index file; about a minute):

    python tools/manifest_scale.py --shards 100000 --records-per-shard 16 --out /tmp/scale16

Measured so (2-core AMD EPYC VM, best of 3 fresh processes, 2026-11-24), 100,000 train shards:

    version, records/shard    4, 16       4, 2048     3, 16
    manifest.json             23.1 MB     23.9 MB     75.6 MB
    read_manifest             0.16 s      0.16 s      0.87-1.0 s
    record index file         32.0 MB     4.10 GB     -
    read_split_index          0.007 s     0.006 s     0.55 s
    SplitRecords              0.12 s      3.2-3.4 s   0.67-0.92 s
    setup("fit")              0.9-1.0 s   5.2-5.6 s   2.2-2.3 s
    RSS after setup           0.51 GB     7.5 GB      0.72 GB
      own (anonymous)         0.39 GB     3.5 GB      0.64 GB
      mapped files            0.12 GB     4.0 GB      0.09 GB

(ranges: the runs of each, on a shared machine). Version 4: ~230 bytes of manifest per shard,
whatever its records, and 20 bytes of index file per record, opened in milliseconds (read only where
used); setting up 204.8 million records (2048 per shard: the default 256 MB shard) takes 5.2-5.6 s,
mostly memory traffic: the record table's int64 shard and window columns (3.3 GB of the 3.5 GB own
memory, new pages) and checking every shard against its rows, which reads the whole mapped file
(4.0 GB of page cache, shared by all processes mapping it). Version 3 costs ~30 bytes and ~0.4 us of
`read_manifest` per record, plus ~300 bytes and ~3 us per shard; 2048 records/shard would be a
6.3 GB manifest, ~80 s to read and ~27 GB of Python objects: not measurable on a 23 GB machine. (The
epoch plan of the 2048 case, 3.3 billion windows on one rank, is skipped by `--max-plan-windows`: a
rank's plan holds 8 bytes per window it reads.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_wds.format import FORMAT_NAME, FORMAT_VERSION, MANIFEST_NAME, Manifest, shard_name
from bionemo_wds.format.manifest import dumps_manifest
from bionemo_wds.format.manifest_types import INDEX_FILE_FORMAT_VERSION, SEQUENCE_TABLE_KEY
from bionemo_wds.format.record_index import COLUMNS, INDEX_DTYPE
from bionemo_wds.format.sequence_table import SequenceRow, write_sequence_table
from bionemo_wds.format.split_index_file import RECORD_INDEX_NAME, record_index_path
from bionemo_wds.storage.atomic import HashingWriter
from bionemo_wds.storage.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder: `first_batch`, when loaded by a test

import first_batch

from benchmarks.memory import peak_rss_mb

#: Measurements, in the order they run (`--measure`).
PHASES = ("load", "records", "setup", "first-batch")
#: Tar layout: a 512-byte header before each member, data padded to 512, the archive to 10240.
BLOCK, TAR_RECORD = 512, 10240
#: Bytes a record holds beyond its windows' bases (msgpack framing, keys, starts), per window and once.
PER_WINDOW, PER_RECORD = 58, 40
_PLACEHOLDER = "@@shards:{}@@"
#: The mark of a manifest this tool wrote (``request.synthetic``).
SYNTHETIC = "tools/manifest_scale.py"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module's text as written, and each option's default."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--shards", type=int, default=100_000, help="train shards in the manifest")
    p.add_argument("--val-shards", type=int, default=0, help="val shards too (0: no val split)")
    p.add_argument("--records-per-shard", type=int, default=16, help="records (tar members) per shard")
    p.add_argument("--windows-per-record", type=int, default=16, help="windows per record")
    p.add_argument("--seq-length", type=int, default=8192, help="tokens per sample; a window holds 3 fewer bases")
    p.add_argument(
        "--format-version",
        type=int,
        choices=(3, INDEX_FILE_FORMAT_VERSION, FORMAT_VERSION),
        default=FORMAT_VERSION,
        help=f"{FORMAT_VERSION}: what prepare writes; 4: the sequences named in the manifest too; 3: the record "
        "index as JSON columns in the manifest",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="dataset root to write (None: a temporary directory, removed after)"
    )
    p.add_argument("--keep", action="store_true", help="keep --out (and its sparse shard files) afterwards")
    p.add_argument("--reuse", action="store_true", help="measure the manifest already in --out instead of writing one")
    p.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the best time is reported")
    p.add_argument("--micro-batch-size", type=int, default=8, help="micro batch of the epoch plan and the data module")
    p.add_argument(
        "--no-sparse",
        action="store_true",
        help="make no sparse shard files and skip the full setup measurement (setup checks each shard file's size)",
    )
    p.add_argument(
        "--max-plan-windows",
        type=int,
        default=150_000_000,
        help="skip the train epoch plan above this many windows (its memory grows with the windows)",
    )
    p.add_argument(
        "--readable",
        action="store_true",
        help="every shard a hard link of one real shard prepared from --template-fasta (tools/first_batch.py), "
        "so the first-batch measurement can read them; without it, first-batch is skipped",
    )
    p.add_argument("--template-fasta", type=Path, default=first_batch.KLEBSIELLA, help="what --readable prepares")
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="first-batch: loader workers, each measured")
    p.add_argument(
        "--world-sizes", type=int, nargs="+", default=[1, 8], help="first-batch: data-parallel sizes (rank 0 of each)"
    )
    p.add_argument("--skip", nargs="*", choices=PHASES, default=[], help="measurements to leave out")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic sizes and checksums")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object as well")
    p.add_argument("--measure", choices=PHASES, help=argparse.SUPPRESS)  # the child's one measurement
    return p.parse_args(argv)


# -- the synthetic manifest -------------------------------------------------------------------------


def skeleton(
    args: argparse.Namespace, index: dict[str, dict[str, Any]] | None = None, table: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The manifest without shard entries (each split's ``shards`` holds a placeholder string);
    `index`: each split's ``record_index`` entry (version 4 on), `table` the ``sequence_table`` one (version 6)."""
    window = args.seq_length - 3
    params = {
        "seq_length": args.seq_length,
        "stride": window,
        "window_length": window,
        "tail": "end",
        "tags": "none",
        "max_tag_bytes": 0,
        "case": "keep",
        "seed": 42,
        "samples_per_shard": args.records_per_shard * args.windows_per_record,
        "windows_per_record": args.windows_per_record,
        "records_by": "windows",
        "prefix": "wdshards",
        "codec": "none",
        "length_buckets": [10000, 100000],
        "source": {"kind": "fasta"},
        "group_by": None,
        "split_at_n": None,
        "tokenizer": {"kind": "byte", "case": "keep", "eos": 0, "pad": 1, "bos": 2, "sep": 3, "unk": 4},
    }
    splits = {}
    for split, n in split_counts(args).items():
        samples = int(sum(shard_windows(i, args).sum() for i in range(n)))
        sequences = max(1, n // 10)
        splits[split] = {
            "n_samples": samples,
            "n_sequences": sequences,
            "n_bases": samples * window,
            "n_tokens": samples * (window + 3),
            "length_mix": {">=100kb": {"sequences": sequences, "bases": samples * window}},
            **({"seq_ids": names(split, min(sequences, 1000))} if args.format_version < FORMAT_VERSION else {}),
            **({"record_index": index[split]} if index is not None else {}),
            "shards": [_PLACEHOLDER.format(split)],
        }
    request = {"source": "fasta", "inputs": [], "seq_length": args.seq_length, "synthetic": SYNTHETIC}
    return {
        "format": FORMAT_NAME,
        "format_version": args.format_version,
        "package_version": "synthetic",
        "request": request,
        "params": params,
        "splits": splits,
        "skipped": [],
        "unassigned_sequences": 0,
        **({SEQUENCE_TABLE_KEY: table} if table is not None else {}),
    }


def names(split: str, n: int) -> list[str]:
    """The synthetic names of `split`'s `n` sequences."""
    return [f"{split}_contig_{i}" for i in range(n)]


def write_table(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Write ``<root>/sequences.tsv`` (version 6: where the names are): each split's sequences, their
    bases adding up to the split's; its manifest entry."""
    window = args.seq_length - 3

    def rows() -> Iterator[SequenceRow]:
        for split, n in split_counts(args).items():
            bases = int(sum(shard_windows(i, args).sum() for i in range(n))) * window
            sequences = max(1, n // 10)
            for i, name in enumerate(names(split, sequences)):
                length = bases // sequences + (1 if i < bases % sequences else 0)
                yield SequenceRow(split, name, 0, length, name, "", "synthetic.fa")

    return write_sequence_table(Store(str(root)), rows())


def split_counts(args: argparse.Namespace) -> dict[str, int]:
    return {"train": args.shards, **({"val": args.val_shards} if args.val_shards else {})}


def shard_windows(i: int, args: argparse.Namespace) -> np.ndarray:
    """Windows of each record of shard `i`: full records, the last one shorter in most shards (as a
    sequence's end leaves it)."""
    windows = np.full(args.records_per_shard, args.windows_per_record, dtype=np.int64)
    if len(windows):
        windows[-1] = 1 + i * 7 % args.windows_per_record
    return windows


def shard_entries(split: str, n: int, args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
    """The `n` shard entries of `split` as `prepare` writes them (version 3: the index columns in
    ``records``; version 4: ``n_records``), each with its record index rows (`INDEX_DTYPE`)."""
    rng = np.random.default_rng([args.seed, len(split), n])
    window, rps = args.seq_length - 3, args.records_per_shard
    for i in range(n):
        windows = shard_windows(i, args)
        size = windows * (window + PER_WINDOW) + PER_RECORD + rng.integers(-8, 9, rps)
        span = BLOCK + -(-size // BLOCK) * BLOCK  # header + padded data
        offset = BLOCK + np.concatenate([[0], np.cumsum(span)[:-1]]) if rps else np.empty(0, np.int64)
        end = int(span.sum()) + 2 * BLOCK  # two zero blocks end the archive
        n_samples = int(windows.sum())
        rows = np.empty(rps, dtype=INDEX_DTYPE)
        rows["offset"], rows["size"], rows["windows"] = offset, size, windows
        rows["crc32"] = rng.integers(0, 1 << 32, rps, dtype=np.uint64)
        entry: dict[str, Any] = {
            "path": f"{split}/{shard_name(i)}",
            "n_samples": n_samples,
            "n_tokens": max(0, n_samples * (window + 3) - int(rng.integers(0, 64))),
            "bytes": -(-end // TAR_RECORD) * TAR_RECORD,
            "sha256": hashlib.sha256(f"{split}/{i}/{args.seed}".encode()).hexdigest(),
        }
        if args.format_version >= INDEX_FILE_FORMAT_VERSION:
            entry["n_records"] = rps
        else:
            entry["records"] = {name: rows[name].tolist() for name in COLUMNS}
        yield entry, rows


def shard_text(entry: dict[str, Any], pad: str) -> str:
    """`dumps_manifest`'s text of one shard entry nested `len(pad)` deep (without the comma after it);
    written directly, since ``json.dumps(indent=1)`` of the whole manifest would take minutes."""
    p1, p2 = pad + " ", pad + "  "
    head = [f'{p1}"{key}": {json.dumps(entry[key])},' for key in ("path", "n_samples", "n_tokens", "bytes", "sha256")]
    if "records" not in entry:  # version 4
        return "\n".join([pad + "{", *head, f'{p1}"n_records": {entry["n_records"]}', pad + "}"])
    cols = [f'{p2}"{name}": [{",".join(map(str, entry["records"][name]))}]' for name in COLUMNS]
    return "\n".join([pad + "{", *head, p1 + '"records": {', ",\n".join(cols), p1 + "}", pad + "}"])


def write_index_file(root: Path, split: str, n: int, args: argparse.Namespace, texts: list[str], pad: str) -> dict:
    """Write ``<root>/<split>/record-index.npy`` (the bytes `write_manifest` writes: `numpy.save`'s of
    the rows, streamed shard by shard) and collect the shard entries' text; its ``record_index`` entry."""
    rel = record_index_path(split)
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    header = {
        "descr": np.lib.format.dtype_to_descr(INDEX_DTYPE),
        "fortran_order": False,
        "shape": (n * args.records_per_shard,),
    }
    with open(tmp, "wb") as raw:
        out = HashingWriter(raw)
        np.lib.format.write_array_header_1_0(out, header)
        pending: list[bytes] = []
        for entry, rows in shard_entries(split, n, args):
            texts.append(shard_text(entry, pad))
            pending.append(rows.tobytes())
            if len(pending) >= 1024:
                out.write(b"".join(pending))
                pending = []
        out.write(b"".join(pending))
    os.replace(tmp, path)
    return {"path": rel, "records": n * args.records_per_shard, "bytes": out.size, "sha256": out.sha.hexdigest()}


def _shards_pad(text: str, split: str) -> tuple[str, str, str]:
    """(the text before `split`'s ``shards`` placeholder, the indent of its entries, the text after)."""
    before, after = text.split(f'"shards": ["{_PLACEHOLDER.format(split)}"]', 1)
    return before, " " * (len(before) - before.rindex("\n") - 1 + 1), after  # one deeper than the "shards" key


def write_synthetic(root: Path, args: argparse.Namespace) -> dict[str, int]:
    """Write ``<root>/manifest.json`` (streamed, one shard entry at a time: little memory) and, for
    version 4, each split's record index file first; split -> shards."""
    counts = split_counts(args)
    root.mkdir(parents=True, exist_ok=True)
    texts: dict[str, list[str]] = {}
    index: dict[str, dict[str, Any]] | None = None
    if args.format_version >= INDEX_FILE_FORMAT_VERSION:
        draft = dumps_manifest(skeleton(args, {split: {"path": ""} for split in counts}))
        index = {}
        for split, n in counts.items():
            texts[split] = []
            index[split] = write_index_file(root, split, n, args, texts[split], _shards_pad(draft, split)[1])
    table = write_table(root, args) if args.format_version >= FORMAT_VERSION else None
    text = dumps_manifest(skeleton(args, index, table))
    tmp = root / (MANIFEST_NAME + ".tmp")
    with open(tmp, "w") as fh:
        for split, n in counts.items():
            before, pad, text = _shards_pad(text, split)
            fh.write(before + '"shards": [')
            if n:
                fh.write("\n")
                entries = (
                    texts[split]
                    if index is not None
                    else (shard_text(e, pad) for e, _ in shard_entries(split, n, args))
                )
                for i, entry_text in enumerate(entries):
                    fh.write(("" if i == 0 else ",\n") + entry_text)
                fh.write("\n" + pad[:-1] + "]")
            else:
                fh.write("]")
        fh.write(text)
    os.replace(tmp, root / MANIFEST_NAME)
    return counts


def write_dataset(root: Path, args: argparse.Namespace) -> None:
    """The dataset measured: synthetic (`write_synthetic`), or with `--readable` the hard links of
    one real shard prepared in ``<root>/.template`` (`first_batch.write_linked`)."""
    if not args.readable:
        write_synthetic(root, args)
        return
    if args.val_shards or args.format_version != FORMAT_VERSION:
        raise SystemExit("--readable writes a train split of the current format version only")
    template = first_batch.make_template(
        root / ".template", args.seq_length, args.records_per_shard, args.windows_per_record, args.template_fasta
    )
    first_batch.write_linked(root, template, args.shards, SYNTHETIC)


def is_synthetic(root: Path, missing_ok: bool) -> bool:
    """Is ``<root>/manifest.json`` one this tool wrote (or absent, when `missing_ok`)? Nothing else is
    overwritten: the sparse files would replace a real dataset's shards."""
    path = root / MANIFEST_NAME
    if not path.exists():
        return missing_ok
    with open(path, "rb") as fh:
        head = fh.read(4096).decode("utf-8", "replace")
    return f'"synthetic": "{SYNTHETIC}"' in head


def make_sparse_shards(root: Path, manifest: Manifest) -> int:
    """Every listed shard as a sparse file of its listed size (no disk blocks); returns how many."""
    made = 0
    for info in manifest.splits.values():
        for shard in info.shards:
            path = root / shard.path
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                os.truncate(fh.fileno(), shard.bytes)
            made += 1
    return made


# -- the measurements (each in a child process) -----------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_parts_mb() -> dict[str, float]:
    """The resident memory now, split: anonymous (the process's own) and file-backed (mapped files, the
    record index file among them: page cache, shared by every process mapping it, reclaimable)."""
    parts = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("RssAnon:", "RssFile:")):
                parts[f"rss_{line[3:7].lower()}_mb"] = int(line.split()[1]) / 1024
    return parts


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = call()
    return time.perf_counter() - t0, out


def measure(phase: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement of the dataset at ``args.out`` (run in a child process); ``base_rss_mb`` is the
    process's RSS after its imports, before the measurement."""
    from bionemo_wds.format import read_manifest

    root = args.out
    if phase == "load":
        base = rss_mb()
        seconds, manifest = timed(lambda: read_manifest(root))
        held = rss_mb() - base
        return {"read_manifest_s": seconds, "manifest_rss_mb": held, "base_rss_mb": base, "peak_rss_mb": peak_rss_mb()}
    if phase == "records":
        from bionemo_wds.format import read_split_index
        from bionemo_wds.load.plan import train_plan
        from bionemo_wds.load.records import SplitRecords
        from bionemo_wds.load.shard_errors import ShardErrorPolicy
        from bionemo_wds.storage.store import Store

        out: dict[str, Any] = {"base_rss_mb": rss_mb()}
        store = Store(root)
        manifest = read_manifest(store)
        info = manifest.splits["train"]
        policy = ShardErrorPolicy("raise", {store.url(s.path): s.n_samples for s in info.shards})
        # the index alone (version 4: the file opened, memory-mapped; version 3: the JSON columns converted)
        out["read_split_index_s"], _ = timed(lambda: read_split_index(store, manifest, "train"))
        # sizes {}: every shard taken to have its listed size, so no file is looked at
        out["split_records_s"], records = timed(
            lambda: SplitRecords.from_manifest(store, manifest, "train", policy, {}, None)
        )
        out["records"] = len(records.table)
        out["windows"] = n_windows = records.table.n_windows
        out["rss_after_records_mb"] = rss_mb()
        out |= rss_parts_mb()
        if n_windows <= args.max_plan_windows:
            out["train_plan_s"], plan = timed(lambda: train_plan(records.table, 42, 0, 0, 1, args.micro_batch_size))
            out["train_batches"] = len(plan)
        out["peak_rss_mb"] = peak_rss_mb()
        return out
    if phase == "first-batch":
        micro, workers, world = args.micro_batch_size, args.workers[0], args.world_sizes[0]
        return first_batch.measure(root, args.seq_length, micro, workers, 0, world)
    from bionemo_wds import GenomicWebDataModule

    dm = GenomicWebDataModule(str(root), seq_length=args.seq_length, micro_batch_size=args.micro_batch_size)
    base = rss_mb()
    seconds, _ = timed(lambda: dm.setup("fit"))
    after = {"rss_after_mb": rss_mb(), **rss_parts_mb()}
    return {"setup_fit_s": seconds, "base_rss_mb": base, **after, "peak_rss_mb": peak_rss_mb()}


def best_of(phase: str, args: argparse.Namespace, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """`child(phase)` run `--repeat` times: the least of each time, the most of each memory figure."""
    runs = [child(phase, args, extra) for _ in range(max(args.repeat, 1))]
    if any("error" in run for run in runs):
        return next(run for run in runs if "error" in run)
    pick = {True: min, False: max}
    return {key: pick[key.endswith("_s")](run[key] for run in runs) for key in runs[0]}


def child(phase: str, args: argparse.Namespace, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """`measure(phase)` in a fresh interpreter (with the options `extra`); its result."""
    cmd = [sys.executable, __file__, "--measure", phase, "--out", str(args.out)]
    cmd += ["--seq-length", str(args.seq_length), "--micro-batch-size", str(args.micro_batch_size)]
    cmd += ["--max-plan-windows", str(args.max_plan_windows), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args)))
        return 0
    temporary = args.out is None
    if temporary:
        args.out = Path(tempfile.mkdtemp(prefix="manifest-scale-"))
    try:
        return run(args)
    finally:
        if temporary and not args.keep:
            shutil.rmtree(args.out, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    root: Path = args.out
    results: dict[str, Any] = {"shards": args.shards, "val_shards": args.val_shards}
    results |= {"records_per_shard": args.records_per_shard, "windows_per_record": args.windows_per_record}
    if not is_synthetic(root, missing_ok=not args.reuse):
        print(f"{root} holds a manifest this tool did not write: refusing to overwrite it or its shards")
        return 2
    if not args.reuse:
        results["write_s"], _ = timed(lambda: write_dataset(root, args))
    size = (root / MANIFEST_NAME).stat().st_size
    n_records = (args.shards + args.val_shards) * args.records_per_shard
    results |= {"manifest_bytes": size, "bytes_per_record": size / max(n_records, 1)}
    print(f"{root / MANIFEST_NAME}: {size:,} bytes ({size / 2**20:.1f} MiB), {size / max(n_records, 1):.1f} per record")
    index_files = sorted(root.glob(f"*/{RECORD_INDEX_NAME}"))
    if index_files:  # version 4
        index_bytes = sum(path.stat().st_size for path in index_files)
        results |= {"index_bytes": index_bytes, "index_bytes_per_record": index_bytes / max(n_records, 1)}
        names = ", ".join(str(path.relative_to(root)) for path in index_files)
        print(f"record index ({names}): {index_bytes:,} bytes ({index_bytes / 2**20:.1f} MiB) beside manifest.json")
    for phase in PHASES:
        if phase in args.skip:
            continue
        if phase == "first-batch":
            if not args.readable:
                print("first-batch: skipped (needs shards that can be read: --readable)")
                continue
            results[phase] = {}
            for world in args.world_sizes:
                for workers in args.workers:
                    extra = ("--world-sizes", str(world), "--workers", str(workers))
                    got = results[phase][f"world {world}, workers {workers}"] = best_of(phase, args, extra)
                    print(f"{phase} (rank 0 of {world}, {workers} workers): " + ", ".join(map(_item, got.items())))
            continue
        if phase == "setup" and not args.readable:
            if args.no_sparse:
                print("setup: skipped (--no-sparse: setup(fit) compares every shard file's size with the manifest)")
                continue
            from bionemo_wds.format import read_manifest

            seconds, made = timed(lambda: make_sparse_shards(root, read_manifest(root)))
            results["sparse_files"], results["sparse_s"] = made, seconds
            print(
                f"setup needs the shard files (it lists each split folder and checks every size): made {made:,} "
                f"sparse files of the listed sizes with os.truncate in {seconds:.1f} s (no disk blocks)"
            )
        got = best_of(phase, args)
        results[phase] = got
        print(f"{phase}: " + ", ".join(map(_item, got.items())))
    if "read_manifest_s" in results.get("load", {}):
        seconds = results["load"]["read_manifest_s"]
        print(f"read_manifest: {seconds / max(n_records, 1) * 1e9:.0f} ns per record, {size / seconds / 1e6:.0f} MB/s")
    if args.json:
        print(json.dumps(results))
    return 0


def _item(item: tuple[str, Any]) -> str:
    return f"{item[0]} {_fmt(item[1])}"


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


if __name__ == "__main__":
    sys.exit(main())
