"""`prepare`: FASTA in, split + windowed + tokenized WebDataset shards and a manifest out.

Planning (catalog, split, windows, a seeded global window order cut into shards; `shard_plan.py`)
happens once in the calling process; writers (`writers.py`) then produce one shard per task, run by
an executor (`executors/`): a process pool (``--executor local``) or a Dask cluster (``--executor
dask``), and the manifest is written last from their results, just after the sequence table
(``sequences.tsv``: every sequence's split, group, tag and file; `sequence_table.py`). A run killed
at any point (or whose cluster was lost) resumes by writing only the shards that are missing; the
same request into a finished output that predates the sequence table adds the table alone.

A run holds the output's lock (`lock_path`: ``<out>.lock``) from the moment it looks at the output
until it is done, so two runs into one output (two shells, or the ranks of a job calling
`GenomicWebDataModule.prepare_data`) do not race: the second waits and finds the first finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from bionemo_wds.errors import BadInputError, OutputWriteError
from bionemo_wds.format import (
    MANIFEST_NAME,
    Manifest,
    index_shard,
    read_manifest,
    remove_stale_temporaries,
    write_manifest,
    write_sequence_index,
)
from bionemo_wds.format.sequence_index import sequence_index_path
from bionemo_wds.format.sequence_table import table_entry
from bionemo_wds.format.write_errors import writing_output
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.executors import executor
from bionemo_wds.prepare.executors.dask_client import client_session
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.groups import apply_groups, is_similarity
from bionemo_wds.prepare.options import PrepareOptions
from bionemo_wds.prepare.outdir import (
    CACHE_NAME,
    PLAN_NAME,
    OutState,
    check_out_dir,
    clear_ours,
    kept_split_note,
    recorded_split_rule,
)
from bionemo_wds.prepare.precheck import check_before_scan
from bionemo_wds.prepare.request import request_of
from bionemo_wds.prepare.scan import scan
from bionemo_wds.prepare.sequence_layout import sequence_index_rows
from bionemo_wds.prepare.sequence_table import add_missing_table, write_table
from bionemo_wds.prepare.shard_plan import ShardPlan, plan
from bionemo_wds.prepare.similarity_groups import apply_similarity
from bionemo_wds.prepare.sources import source_catalog
from bionemo_wds.prepare.writers import ShardResult, WriterSetup, base_table
from bionemo_wds.storage.store import Store


@dataclass
class PrepareResult:
    status: str  # "written", "resumed", "unchanged" or "table-added" (an older output given its sequence table)
    out: Path | str  # a URL when prepared into an object store
    manifest: Manifest
    shards_written: int = 0
    shards_reused: int = 0
    #: Time the run's work took: everything but `startup_seconds`.
    seconds: float = 0.0
    #: Time spent loading the tar writer's library (webdataset, which imports torch) once per process.
    startup_seconds: float = 0.0


def local_cache(out: Store) -> Path:
    """Where a run keeps its FASTA cache (gzip copies, .fai indexes): ``<out>/.cache`` for a local
    output; for an object store, a directory of this machine's temporary space named after the URL."""
    if not out.remote:
        return Path(out.root) / CACHE_NAME
    digest = hashlib.sha256(out.root.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "bionemo-wds-prepare" / digest


def lock_path(out: Store) -> Path:
    """The lock file of an output location, held by every `prepare` into it (and so by the data
    module's `prepare_data`): ``<out>.lock`` beside a local output (shared by the nodes of a shared
    filesystem); for an object store, a file in this machine's temporary directory named by a hash
    of the URL (one node's processes share it)."""
    if not out.remote:
        return Path(f"{out.root}.lock")
    digest = hashlib.sha256(out.root.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"bionemo-wds-{digest}.lock"


@contextlib.contextmanager
def output_lock(out: Store, progress: bool = False) -> Iterator[None]:
    """Hold `out`'s lock (`lock_path`), waiting for another run that holds it (saying so when
    `progress`). A run refused with `BadInputError` removes the lock file (and the directories made
    for it) when it created them; one stopped by `OutputWriteError` (a full disk) keeps them, and what
    it wrote, for the rerun to resume from."""
    path = lock_path(out)
    lock = FileLock(str(path))
    made = _first_missing_ancestor(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if progress:
                print(f"waiting for another prepare into {out.root} to finish (lock {path})", file=sys.stderr)
            lock.acquire()
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is not a directory" if blocker else f"cannot create its lock file {path}: {exc}"
        raise BadInputError(f"--out {out.root}: {why}") from exc
    try:
        yield
    except OutputWriteError:  # the run wrote, and a rerun resumes from what it wrote: keep it
        raise
    except BadInputError:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        elif created:
            path.unlink(missing_ok=True)
        raise
    finally:
        lock.release()


def prepare(
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    opts: PrepareOptions | None = None,
    storage_options: dict[str, Any] | None = None,
) -> PrepareResult:
    """Prepare `inputs` into `out` (a directory or an object-store URL such as ``s3://bucket/run1``);
    resumes an interrupted run, refuses to clobber anything else. Holds `out`'s lock meanwhile: a
    second run into the same output waits for the first, then finds it finished ("unchanged")."""
    t0 = time.perf_counter()
    opts = opts or PrepareOptions()
    store = Store(out, storage_options, write=True, what="--out")  # a malformed URL fails here, before any write
    paths = [str(p) for p in inputs]
    request = request_of(paths, opts)
    created = None if store.remote else _first_missing_ancestor(Path(store.root))
    with (
        output_lock(store, opts.progress),
        writing_output(None, f"in --out {store.root}", store.root),
        client_session(),  # with --executor dask: one cluster for the run's passes and its writers
    ):
        return _prepare_locked(store, paths, request, opts, storage_options, created, t0)


def _prepare_locked(
    store: Store,
    paths: list[str],
    request: dict[str, Any],
    opts: PrepareOptions,
    storage_options: dict[str, Any] | None,
    created: Path | None,
    t0: float,
) -> PrepareResult:
    """`prepare` under the output's lock; `created`: the outermost directory the run creates."""
    result_out: Path | str = store.root if store.remote else Path(store.root)
    request, opts = _keep_recorded_split(store, request, opts)
    state = check_out_dir(store, request, opts.overwrite)
    if state is OutState.FINISHED:
        finished = read_manifest(store)
        if table_entry(finished) is not None:
            return PrepareResult("unchanged", result_out, finished)
        _add_table(store, paths, request, opts)  # prepared before the sequence table existed
        return PrepareResult("table-added", result_out, read_manifest(store), seconds=time.perf_counter() - t0)
    cache = local_cache(store)
    store.makedirs()
    if not store.remote:
        remove_stale_temporaries(store.root)  # recursive: split directories and the cache (gzip copies, .fai)
    else:
        cache.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(cache)
    if state is not OutState.RESUME:  # a cache left by a run killed before its plan may hold other inputs
        shutil.rmtree(cache, ignore_errors=True)
    try:
        catalog, manifest, shard_plan = _catalog_and_plan(paths, request, opts, cache)
    except BadInputError:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        elif state in (OutState.NEW, OutState.REPLACE):
            shutil.rmtree(cache, ignore_errors=True)
        raise
    if state is OutState.REPLACE:  # only now: a refused new run leaves the earlier one intact
        clear_ours(store, keep_cache=True)
    if state is not OutState.RESUME:
        with writing_output(store.url(PLAN_NAME), "the run's plan, written first", store.root):
            write_manifest(store.url(PLAN_NAME), {"request": request}, storage_options)
    for split in manifest["splits"]:
        store.makedirs(split)
    reused = _finished_shards(store, manifest) if state is OutState.RESUME else set()
    setup = WriterSetup(
        store.root,
        catalog,
        base_table(opts.case, opts.on_invalid),
        opts.prefix,
        (opts.compress, opts.compress_level),
        storage_options,
        shard_plan,
    )
    todo = [task for task in shard_plan.tasks() if task not in reused]
    startup = _load_tar_writer() if todo else 0.0
    results = executor(opts.executor)(setup, todo, opts) if todo else iter(())
    written = 0
    for result in results:
        _fill_entry(manifest, result)
        written += 1
    for split, k in reused:
        windows, _ = shard_plan.shard(split, k)
        manifest["splits"][split]["shards"][k]["n_tokens"] = int(windows.length.sum())
    if not store.remote:  # what writers that died (a killed pool or cluster worker) left, now that all are done
        remove_stale_temporaries(store.root)
    if manifest["params"].get("layout") == "sequences":
        _write_sequence_indexes(store, manifest, catalog, shard_plan)
    assert shard_plan.assignment is not None
    write_table(store, manifest, catalog, shard_plan.assignment)
    # last: it names only shards that exist (and writes each split's record index file just before)
    write_manifest(store.url(MANIFEST_NAME), manifest, storage_options)  # `manifest` is then what the file holds
    written_manifest = Manifest.from_json(manifest, store.url(MANIFEST_NAME))
    store.remove(PLAN_NAME)
    shutil.rmtree(cache, ignore_errors=True)
    status = "resumed" if state is OutState.RESUME else "written"
    seconds = time.perf_counter() - t0 - startup
    return PrepareResult(status, result_out, written_manifest, written, len(reused), seconds, startup)


def _keep_recorded_split(
    store: Store, request: dict[str, Any], opts: PrepareOptions
) -> tuple[dict[str, Any], PrepareOptions]:
    """Without --split-rule, a re-run into an output split by another rule (one prepared before
    ``seeded``) keeps that rule, and so the split its manifest records, and says so in one line
    (`kept_split_note`); the request and options it returns name that rule."""
    kept = None if opts.split_rule is not None else recorded_split_rule(store, request)
    if kept is None:
        return request, opts
    warnings.warn(kept_split_note(store, kept), stacklevel=3)
    return {**request, "split_rule": kept}, dataclasses.replace(opts, split_rule=kept)


def _catalog_and_plan(
    paths: list[str], request: dict[str, Any], opts: PrepareOptions, cache: Path
) -> tuple[Catalog, dict[str, Any], ShardPlan]:
    """The inputs' catalog (scanned, grouped) and the run's plan: the manifest skeleton and shard plan."""
    catalog = source_catalog(paths, opts, cache)
    check_before_scan(catalog, opts)  # every option the catalog can judge, before a base is read
    catalog = scan(catalog, opts.on_invalid, opts.split_at_n, opts.progress, TaskPlace.of(opts))
    if opts.group_by is not None and is_similarity(opts.group_by):  # clusters of the bases, sketched in tasks
        table = base_table(opts.case, opts.on_invalid)
        catalog = apply_similarity(apply_groups(catalog, None), opts.group_by, table, TaskPlace.of(opts))
    else:
        catalog = apply_groups(catalog, opts.group_by)
    manifest, shard_plan = plan(catalog, request, opts)
    return catalog, manifest, shard_plan


def _add_table(store: Store, paths: list[str], request: dict[str, Any], opts: PrepareOptions) -> None:
    """Add the sequence table to a finished output that lacks one: the catalog and plan made again
    (the same request gives the same splits), the table written, the manifest rewritten with its entry;
    the shards are left as they are."""
    cache = local_cache(store)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        catalog, _, shard_plan = _catalog_and_plan(paths, request, opts, cache)
        assert shard_plan.assignment is not None
        add_missing_table(store, catalog, shard_plan.assignment)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _write_sequence_indexes(store: Store, manifest: dict[str, Any], catalog: Catalog, shard_plan: ShardPlan) -> None:
    """Write each split's sequence index file (the sequence layout) and list it in its split entry,
    just before the manifest (a rerun writes the same bytes again)."""
    for split, windows in shard_plan.splits.items():
        with writing_output(store.url(sequence_index_path(split)), f"the sequence index of split {split}", store.root):
            entry = write_sequence_index(store, split, sequence_index_rows(catalog, windows))
        manifest["splits"][split]["sequence_index"] = entry


def _load_tar_writer() -> float:
    """Import the shard writer's library (webdataset, which imports torch: seconds, once per process)
    before the pool forks; returns how long that took, which is no part of the run's work (a
    lambda-phage run would otherwise report its rate over the import)."""
    started = time.perf_counter()
    import webdataset  # noqa: F401

    return time.perf_counter() - started


def _fill_entry(manifest: dict[str, Any], result: ShardResult) -> None:
    """Put what writing a shard gave into its manifest entry (its record index in memory, until
    `write_manifest` writes it into the split's record index file)."""
    entry = manifest["splits"][result.split]["shards"][result.shard]
    entry.update(n_tokens=result.n_tokens, bytes=result.bytes, sha256=result.sha256, records=result.records)


def _first_missing_ancestor(path: Path) -> Path | None:
    """The outermost directory that creating `path` would create (None when it exists)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def _finished_shards(out: Store, manifest: dict) -> set[tuple[str, int]]:
    """The shards an interrupted run completed (a final name means complete: files and objects
    appear whole), each read once to fill its manifest entry's size, sha256 and record index."""
    done = set()
    for split, info in manifest["splits"].items():
        present = out.sizes(split) or {}
        for i, shard in enumerate(info["shards"]):
            if shard["path"].rsplit("/", 1)[-1] in present:
                with out.open(shard["path"]) as stream:
                    size, sha, index = index_shard(out.url(shard["path"]), stream)
                shard.update(bytes=size, sha256=sha, records=index)
                done.add((split, i))
    return done
