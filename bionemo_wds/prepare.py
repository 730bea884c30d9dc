"""Prepare: FASTA in, split + windowed + tokenized WebDataset shards and a manifest out.

Planning (catalog, split, windows, a seeded global window order cut into shards) happens once in
the calling process; writers then produce one shard per task, in a process pool. A shard's bytes
depend only on its planned windows, so the output is identical for any number of workers, and a
run killed at any point resumes by writing only the shards that are missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from bionemo_wds import __version__
from bionemo_wds.catalog import Catalog
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import (
    CODECS,
    COMPRESSED_FORMAT_VERSION,
    DEFAULT_PREFIX,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    ShardInfo,
    encode_record,
    file_sha256,
    read_manifest,
    shard_name,
    write_json_atomic,
    write_shard_atomic,
)
from bionemo_wds.outdir import CACHE_NAME, PLAN_NAME, OutState, check_out_dir, clear_ours, remove_stale_temporaries
from bionemo_wds.sources.fasta import catalog_fasta, input_fingerprint, read_span
from bionemo_wds.splits import (
    DEFAULT_BUCKET_EDGES,
    SPLIT_NAMES,
    bucket_labels,
    length_buckets,
    split_from_lists,
    stratified_split,
)
from bionemo_wds.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID, UPPERCASE_TABLE, replace_invalid_table
from bionemo_wds.windows import TAIL_MODES, WindowTable, check_stride, window_length, window_table

#: Default shard size in token bytes (about 256 MB: 32k windows at 8 kb).
SHARD_TARGET_BYTES = 256 << 20
#: Default record size in token bytes (16 windows at 8 kb; see format.py for why blocks).
RECORD_TARGET_BYTES = 128 << 10


@dataclass
class PrepareOptions:
    """Everything that shapes the output (except `workers`, `overwrite`, `progress`, which do not)."""

    seq_length: int = 8192
    stride: int = 7992
    tail: str = "end"
    split: Sequence[float] = (0.8, 0.1, 0.1)
    split_lists: dict[str, str] | None = None  # split name -> file with one sequence name per line
    seed: int = 42
    tags: str = "none"
    on_invalid: str = "error"
    samples_per_shard: int | None = None  # None: about SHARD_TARGET_BYTES per shard
    windows_per_record: int | None = None  # None: about RECORD_TARGET_BYTES per record
    prefix: str = DEFAULT_PREFIX
    compress: str = "none"  # record codec: "none" or "zstd" (format version 2)
    compress_level: int = 17  # zstd level: 17 stores DNA at ~2 bits/base and decompresses fast
    workers: int | None = None
    overwrite: bool = False
    progress: bool = True


@dataclass
class PrepareResult:
    status: str  # "written", "resumed" or "unchanged"
    out: Path
    manifest: dict[str, Any]
    shards_written: int = 0
    shards_reused: int = 0
    seconds: float = 0.0


def _read_list(path: str) -> list[str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BadInputError(f"split list {path} cannot be read: {exc}") from exc
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _request(inputs: Sequence[str], opts: PrepareOptions) -> dict[str, Any]:
    """The parts of a run that determine its output, as stored in the plan and the manifest."""
    if opts.compress not in CODECS:
        raise BadInputError(f"--compress must be one of {', '.join(CODECS)}, got {opts.compress!r}")
    if opts.compress == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError as exc:
            raise BadInputError("--compress zstd needs the zstandard package: pip install 'bionemo-wds[zstd]'") from exc
    if opts.tail not in TAIL_MODES:
        raise BadInputError(f"--tail must be one of {', '.join(TAIL_MODES)}, got {opts.tail!r}")
    for name, value in (("--seq-length", opts.seq_length), ("--samples-per-shard", opts.samples_per_shard),
                        ("--windows-per-record", opts.windows_per_record)):
        if value is not None and value < 1:
            raise BadInputError(f"{name} must be at least 1, got {value}")
    lists = None
    if opts.split_lists:
        lists = {
            split: {"path": str(Path(p).resolve()), "sha256": hashlib.sha256("\n".join(_read_list(p)).encode()).hexdigest()}
            for split, p in sorted(opts.split_lists.items())
        }
    return {
        "inputs": input_fingerprint(inputs),
        "seq_length": opts.seq_length,
        "stride": opts.stride,
        "tail": opts.tail,
        "split": [float(r) for r in opts.split] if not lists else None,
        "split_lists": lists,
        "seed": opts.seed,
        "tags": opts.tags,
        "on_invalid": opts.on_invalid,
        "samples_per_shard": opts.samples_per_shard,
        "windows_per_record": opts.windows_per_record,
        "prefix": opts.prefix,
        "compress": opts.compress,
        "compress_level": opts.compress_level if opts.compress != "none" else None,
    }


def _assign_splits(catalog: Catalog, opts: PrepareOptions) -> np.ndarray:
    if opts.split_lists:
        lists = {split: _read_list(path) for split, path in opts.split_lists.items()}
        return split_from_lists(catalog.names, lists)
    return stratified_split(catalog.lengths, opts.split, opts.seed)


def global_order(n: int, seed: int, split: str) -> np.ndarray:
    """Seeded permutation of a split's windows: shards mix sequences instead of following them."""
    return np.random.default_rng([seed, SPLIT_NAMES.index(split), 0x0D0E]).permutation(n)


def _length_mix(lengths: np.ndarray) -> dict[str, dict[str, int]]:
    buckets = length_buckets(lengths)
    return {
        label: {"sequences": int((buckets == b).sum()), "bases": int(lengths[buckets == b].sum())}
        for b, label in enumerate(bucket_labels())
    }


# --- writer side: runs in pool processes; state arrives once through the initializer ---------

_WORKER: dict[str, Any] = {}


def _init_writer(root: Path, catalog: Catalog, table: bytes, prefix: str, codec: tuple[str, int]) -> None:
    _WORKER.clear()
    _WORKER.update(root=root, catalog=catalog, table=table, prefix=prefix, codec=codec, handles={})


def _window_bases(row_seq: int, start: int, length: int) -> bytes:
    cat: Catalog = _WORKER["catalog"]
    handles: dict[int, Any] = _WORKER["handles"]
    f = int(cat.file_index[row_seq])
    if f not in handles:
        handles[f] = open(cat.files[f], "rb")
    raw = read_span(handles[f], int(cat.offsets[row_seq]), start, start + length,
                    int(cat.line_bases[row_seq]), int(cat.line_bytes[row_seq]))
    if len(raw) != length:
        raise RuntimeError(f"sequence {cat.names[row_seq]!r} in {cat.files[f]} changed while preparing")
    return raw.translate(_WORKER["table"])


def _records(shard: int, windows: WindowTable, per_record: int) -> Iterator[tuple[str, bytes]]:
    cat: Catalog = _WORKER["catalog"]
    for rec, lo in enumerate(range(0, len(windows), per_record)):
        part = windows.take(np.arange(lo, min(lo + per_record, len(windows))))
        seqs = part.seq_index.tolist()
        bases = [_window_bases(s, st, ln) for s, st, ln in zip(seqs, part.start.tolist(), part.length.tolist())]
        codec, level = _WORKER["codec"]
        yield f"{shard:06d}-{rec:06d}", encode_record(
            bases, [cat.names[s] for s in seqs], part.start.tolist(), part.window_index.tolist(),
            [cat.tags[s] for s in seqs], codec, level,
        )


def _write_task(task: tuple[str, int, WindowTable, int]) -> tuple[str, int, int, str]:
    split, shard, windows, per_record = task
    final = _WORKER["root"] / split / shard_name(shard, _WORKER["prefix"])
    size, sha = write_shard_atomic(final, _records(shard, windows, per_record))
    return split, shard, size, sha


def _run_writers(root: Path, tasks: list, catalog: Catalog, table: bytes, prefix: str, codec: tuple[str, int],
                 workers: int, progress: bool) -> dict:
    done: dict[tuple[str, int], tuple[int, str]] = {}
    bar = tqdm(total=len(tasks), desc="write", unit="shard", disable=not progress)
    if workers <= 1 or len(tasks) <= 1:
        _init_writer(root, catalog, table, prefix, codec)
        try:
            for task in tasks:
                split, shard, size, sha = _write_task(task)
                done[(split, shard)] = (size, sha)
                bar.update()
        finally:  # in this process the handles would outlive the run (and the cache they point into)
            for handle in _WORKER.get("handles", {}).values():
                handle.close()
            _WORKER.clear()
    else:
        with ProcessPoolExecutor(workers, initializer=_init_writer, initargs=(root, catalog, table, prefix, codec)) as pool:
            for split, shard, size, sha in pool.map(_write_task, tasks, chunksize=1):
                done[(split, shard)] = (size, sha)
                bar.update()
    bar.close()
    return done


# --- the run ------------------------------------------------------------------------------------


def prepare(inputs: Sequence[str | os.PathLike], out: str | os.PathLike, opts: PrepareOptions | None = None) -> PrepareResult:
    """Prepare `inputs` into `out`; resumes an interrupted run, refuses to clobber anything else."""
    t0 = time.perf_counter()
    opts = opts or PrepareOptions()
    out = Path(out)
    inputs = [str(p) for p in inputs]
    request = _request(inputs, opts)
    state = check_out_dir(out, request, opts.overwrite)
    if state is OutState.FINISHED:
        return PrepareResult("unchanged", out, read_manifest(out))
    created = _first_missing_ancestor(out)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    if state is not OutState.RESUME:  # a cache left by a run killed before its plan may hold other inputs
        shutil.rmtree(out / CACHE_NAME, ignore_errors=True)
    try:
        catalog = catalog_fasta(inputs, out / CACHE_NAME, opts.tags, opts.on_invalid, opts.progress)
        manifest, tasks = _plan(catalog, request, opts)
    except BadInputError:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        elif state in (OutState.NEW, OutState.REPLACE):
            shutil.rmtree(out / CACHE_NAME, ignore_errors=True)
        raise
    if state is OutState.REPLACE:  # only now: a refused new run leaves the earlier one intact
        clear_ours(out, keep_cache=True)
    if state is not OutState.RESUME:
        write_json_atomic(out / PLAN_NAME, {"request": request})
    for split in manifest["splits"]:
        (out / split).mkdir(exist_ok=True)
    reused = _finished_shards(out, manifest) if state is OutState.RESUME else {}
    table = replace_invalid_table() if opts.on_invalid == "replace-N" else UPPERCASE_TABLE
    workers = opts.workers or os.cpu_count() or 1
    written = _run_writers(out, [t for t in tasks if (t[0], t[1]) not in reused], catalog, table, opts.prefix,
                           (opts.compress, opts.compress_level), workers, opts.progress)
    for split, info in manifest["splits"].items():
        for i, shard in enumerate(info["shards"]):
            size, sha = written.get((split, i)) or reused[(split, i)]
            shard.update(bytes=size, sha256=sha)
    write_json_atomic(out / MANIFEST_NAME, manifest)
    (out / PLAN_NAME).unlink(missing_ok=True)
    shutil.rmtree(out / CACHE_NAME, ignore_errors=True)
    status = "resumed" if state is OutState.RESUME else "written"
    return PrepareResult(status, out, manifest, len(written), len(reused), time.perf_counter() - t0)


def _first_missing_ancestor(path: Path) -> Path | None:
    """The outermost directory that creating `path` would create (None when it exists)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def _finished_shards(out: Path, manifest: dict) -> dict[tuple[str, int], tuple[int, str]]:
    """(size, sha256) of the shards an interrupted run completed (final names mean complete)."""
    done = {}
    for split, info in manifest["splits"].items():
        for i, shard in enumerate(info["shards"]):
            if (out / shard["path"]).exists():
                done[(split, i)] = file_sha256(out / shard["path"])
    return done


def _plan(catalog: Catalog, request: dict, opts: PrepareOptions):
    """Manifest skeleton (sizes and hashes still empty) and one writer task per shard."""
    max_tag = catalog.max_tag_bytes()
    window = window_length(opts.seq_length, max_tag)
    check_stride(opts.stride, window, opts.seq_length, max_tag)
    per_shard = opts.samples_per_shard or max(1, SHARD_TARGET_BYTES // window)
    per_record = min(opts.windows_per_record or max(1, RECORD_TARGET_BYTES // window), per_shard)
    assignment = _assign_splits(catalog, opts)
    manifest: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": COMPRESSED_FORMAT_VERSION if opts.compress != "none" else FORMAT_VERSION,
        "package_version": __version__,
        "request": request,
        "params": {
            "seq_length": opts.seq_length,
            "stride": opts.stride,
            "window_length": window,
            "tail": opts.tail,
            "tags": opts.tags,
            "max_tag_bytes": max_tag,
            "seed": opts.seed,
            "samples_per_shard": per_shard,
            "windows_per_record": per_record,
            "prefix": opts.prefix,
            "codec": opts.compress,
            "length_buckets": list(DEFAULT_BUCKET_EDGES),
            "tokenizer": {"kind": "byte", "case": "upper", "eos": EOS_ID, "pad": PAD_ID, "bos": BOS_ID,
                          "sep": SEP_ID, "unk": UNK_ID},
        },
        "splits": {},
        "skipped": catalog.skipped,
        "unassigned_sequences": int((assignment < 0).sum()),
    }
    tasks: list = []
    for code, split in enumerate(SPLIT_NAMES):
        rows = np.flatnonzero(assignment == code)
        if len(rows) == 0:
            continue
        lengths = catalog.lengths[rows]
        table = window_table(rows, lengths, window, opts.stride, opts.tail)
        table = table.take(global_order(len(table), opts.seed, split))
        shards = []
        for shard, lo in enumerate(range(0, len(table), per_shard)):
            part = table.take(np.arange(lo, min(lo + per_shard, len(table))))
            rel = f"{split}/{shard_name(shard, opts.prefix)}"
            shards.append(ShardInfo(rel, len(part), int(part.length.sum()), 0, "").as_dict())
            tasks.append((split, shard, part, per_record))
        manifest["splits"][split] = {
            "n_samples": len(table),
            "n_sequences": len(rows),
            "n_bases": int(lengths.sum()),
            "n_tokens": int(table.length.sum()),
            "length_mix": _length_mix(lengths),
            "shards": shards,
        }
    return manifest, tasks
