"""`prepare`: FASTA in, split + windowed + tokenized WebDataset shards and a manifest out.

Planning (catalog, split, windows, a seeded global window order cut into shards; `plan.py`) happens
once in the calling process; writers (`writers.py`) then produce one shard per task in a process
pool. A run killed at any point resumes by writing only the shards that are missing.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bionemo_wds.errors import BadInputError
from bionemo_wds.format import (
    MANIFEST_NAME,
    file_sha256,
    read_manifest,
    remove_stale_temporaries,
    write_manifest,
)
from bionemo_wds.prepare.options import PrepareOptions
from bionemo_wds.prepare.outdir import CACHE_NAME, PLAN_NAME, OutState, check_out_dir, clear_ours
from bionemo_wds.prepare.plan import plan, request_of
from bionemo_wds.prepare.sources.fasta import catalog_fasta
from bionemo_wds.prepare.writers import run_writers
from bionemo_wds.tokenizer import UPPERCASE_TABLE, replace_invalid_table


@dataclass
class PrepareResult:
    status: str  # "written", "resumed" or "unchanged"
    out: Path
    manifest: dict[str, Any]
    shards_written: int = 0
    shards_reused: int = 0
    seconds: float = 0.0


def prepare(
    inputs: Sequence[str | os.PathLike], out: str | os.PathLike, opts: PrepareOptions | None = None
) -> PrepareResult:
    """Prepare `inputs` into `out`; resumes an interrupted run, refuses to clobber anything else."""
    t0 = time.perf_counter()
    opts = opts or PrepareOptions()
    out = Path(out)
    paths = [str(p) for p in inputs]
    request = request_of(paths, opts)
    state = check_out_dir(out, request, opts.overwrite)
    if state is OutState.FINISHED:
        return PrepareResult("unchanged", out, read_manifest(out))
    created = _first_missing_ancestor(out)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)  # recursive: split directories and the cache (gzip copies, .fai indexes)
    if state is not OutState.RESUME:  # a cache left by a run killed before its plan may hold other inputs
        shutil.rmtree(out / CACHE_NAME, ignore_errors=True)
    try:
        catalog = catalog_fasta(paths, out / CACHE_NAME, opts.tags, opts.on_invalid, opts.progress)
        manifest, tasks = plan(catalog, request, opts)
    except BadInputError:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        elif state in (OutState.NEW, OutState.REPLACE):
            shutil.rmtree(out / CACHE_NAME, ignore_errors=True)
        raise
    if state is OutState.REPLACE:  # only now: a refused new run leaves the earlier one intact
        clear_ours(out, keep_cache=True)
    if state is not OutState.RESUME:
        write_manifest(out / PLAN_NAME, {"request": request})
    for split in manifest["splits"]:
        (out / split).mkdir(exist_ok=True)
    reused = _finished_shards(out, manifest) if state is OutState.RESUME else {}
    table = replace_invalid_table() if opts.on_invalid == "replace-N" else UPPERCASE_TABLE
    workers = opts.workers or os.cpu_count() or 1
    written = run_writers(
        out,
        [t for t in tasks if (t[0], t[1]) not in reused],
        catalog,
        table,
        opts.prefix,
        (opts.compress, opts.compress_level),
        workers,
        opts.progress,
    )
    for split, info in manifest["splits"].items():
        for i, shard in enumerate(info["shards"]):
            size, sha = written.get((split, i)) or reused[(split, i)]
            shard.update(bytes=size, sha256=sha)
    write_manifest(out / MANIFEST_NAME, manifest)
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
