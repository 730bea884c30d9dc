"""Shard writers: one task writes one shard; what every task needs (`WriterSetup`) arrives once per process.

A task is (split, shard number); the writer computes that shard's windows from the plan
(`shard_plan.ShardPlan`), reads their bases and writes the shard through `format.write_shard` (atomic: its
name appears only when complete), so a shard's bytes depend only on the plan and the output is
identical for any number of processes, here (`run_writers`, a process pool) or on a Dask cluster
(`prepare/executors/dask.py`). Each task returns a `ShardResult` (size, sha256, tokens, record index)
that `prepare` puts into the shard's manifest entry.

A pool worker dies with the process that started it (`die_with_parent`): after a ``kill -9`` of
`prepare` no writer lives on holding the cache files the next run deletes.
"""

from __future__ import annotations

import ctypes
import itertools
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from bionemo_wds.core.tokenizer import UPPERCASE_TABLE, replace_invalid_table
from bionemo_wds.format import RecordIndex, encode_record, record_key, shard_name, write_shard
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.shard_plan import ShardPlan
from bionemo_wds.prepare.windows import WindowTable
from bionemo_wds.storage.location import join

#: Per thread: the setup a writer works for, its source reader and lookups. Thread-local because a
#: Dask worker may run several tasks at once in threads (`dask worker --nthreads N`), and a reader
#: (an open file position, a SQLite connection) must not be shared between them.
_LOCAL = threading.local()


def _worker() -> dict[str, Any]:
    """This thread's writer state."""
    state = getattr(_LOCAL, "state", None)
    if state is None:
        state = _LOCAL.state = {}
    return state


#: prctl(2) option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between checks of the parent where prctl is not available.
PARENT_POLL = 0.5
#: Bases a writer reads at a time, in source order (`_read_block`): whole records, about 32 MiB.
READ_BLOCK_BASES = 32 << 20


def base_table(case: str, on_invalid: str) -> bytes | None:
    """The `bytes.translate` table the writers read bases through (None: bytes as the source has
    them): `case` ``upper`` upper-cases every base, ``keep`` leaves soft-masked (lower-case) bases
    as they are; ``--on-invalid replace-N`` also maps every byte that is no IUPAC code to ``N``."""
    if on_invalid == "replace-N":
        return replace_invalid_table(keep_case=case == "keep")
    return UPPERCASE_TABLE if case == "upper" else None


def die_with_parent(parent: int, start_method: str) -> None:
    """Make this process end when `parent` (the process that started it) dies, even by SIGKILL.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills it at once, whatever it is doing
    (a thread could not run while a C call holds the GIL). Elsewhere: a daemon thread that exits
    the process once its parent changes. A parent that died before this call is caught by
    comparing ``os.getppid()`` (with the forkserver start method the parent is the fork server,
    which itself ends with `parent`)."""
    direct = start_method != "forkserver"
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            if direct and os.getppid() != parent:
                os._exit(1)
            return
    watched = os.getppid()
    if direct and watched != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == watched:
            time.sleep(PARENT_POLL)
        os._exit(1)

    threading.Thread(target=watch, name="bionemo-wds-parent-watch", daemon=True).start()


@dataclass(frozen=True)
class WriterSetup:
    """Everything a shard task needs besides (split, shard): sent once to each process (pickled)."""

    root: str  # the output (a directory or a URL)
    catalog: Catalog
    table: bytes | None  # `base_table`
    prefix: str
    codec: tuple[str, int]  # (--compress, --compress-level)
    storage_options: dict | None
    plan: ShardPlan


class ShardResult(NamedTuple):
    """What writing one shard gives its manifest entry."""

    split: str
    shard: int
    bytes: int
    sha256: str
    n_tokens: int
    records: RecordIndex


def _init_writer(setup: WriterSetup, parent: int | None = None, start_method: str = "fork") -> None:
    if parent is not None:  # a pool worker
        die_with_parent(parent, start_method)
    close_writer()
    _worker().update(
        setup=setup,
        catalog=setup.catalog,
        table=setup.table,
        seq=setup.catalog.seq.tolist(),  # lists: per-window indexing of numpy arrays costs more than the read
        origin=setup.catalog.origin.tolist(),
    )


def close_writer() -> None:
    """Close this process's source reader and forget its setup (a run in this process is over)."""
    state = _worker()
    if state.get("reader") is not None:
        state["reader"].close()
    state.clear()


def write_shard_task(setup: WriterSetup, split: str, shard: int) -> ShardResult:
    """Write shard `shard` of `split` as the plan says; the source reader stays open between tasks
    of the same setup (a pool worker's or a cluster worker's process)."""
    if _worker().get("setup") is not setup:
        _init_writer(setup)
    windows, starts = setup.plan.shard(split, shard)
    final = join(setup.root, split, shard_name(shard, setup.prefix))
    written = write_shard(final, _records(shard, windows, starts), setup.storage_options)
    return ShardResult(split, shard, written.bytes, written.sha256, int(windows.length.sum()), written.records)


def _window_bases(row: int, start: int, length: int) -> bytes:
    """Bases of a window: `start` is relative to catalog row `row` (a piece starts at its origin)."""
    state = _worker()
    cat: Catalog = state["catalog"]
    reader = state.get("reader")
    if reader is None:
        reader = state["reader"] = cat.source.reader()
    begin = state["origin"][row] + start
    raw = reader.read(state["seq"][row], begin, begin + length, state["table"])
    if len(raw) != length:
        raise RuntimeError(f"{cat.source.describe(state['seq'][row])} changed while preparing")
    return raw


def _read_block(windows: WindowTable, lo: int, hi: int) -> list[bytes]:
    """Bases of windows ``[lo, hi)`` of a shard, read in (row, start) order and returned in shard order.

    A shard's windows are in a seeded random order; reading them in source order instead turns the
    reads of a block into a forward walk (HDF5 rows read ahead in blocks; SQLite pages and FASTA
    pages are touched once), without changing a byte of the shard.
    """
    rows, starts, lengths = windows.seq_index[lo:hi], windows.start[lo:hi], windows.length[lo:hi]
    order = np.lexsort((starts, rows)).tolist()
    rows_l, starts_l, lengths_l = rows.tolist(), starts.tolist(), lengths.tolist()
    out: list[bytes] = [b""] * (hi - lo)
    for j in order:
        out[j] = _window_bases(rows_l[j], starts_l[j], lengths_l[j])
    return out


def _records(shard: int, windows: WindowTable, starts: np.ndarray) -> Iterator[tuple[str, bytes, int]]:
    cat: Catalog = _worker()["catalog"]
    bounds = [*starts.tolist(), len(windows)]
    done = np.cumsum(windows.length)  # bases up to and including each window
    block: list[bytes] = []
    block_lo = block_hi = 0
    for rec, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if hi > block_hi:  # read the next block of whole records, about READ_BLOCK_BASES of bases
            limit = (done[lo - 1] if lo else 0) + READ_BLOCK_BASES
            block_hi = max(hi, bounds[int(np.searchsorted(bounds, np.searchsorted(done, limit, "right"), "right")) - 1])
            block_lo, block = lo, _read_block(windows, lo, block_hi)
        part = windows.take(np.arange(lo, hi))
        seqs = part.seq_index.tolist()
        bases = block[lo - block_lo : hi - block_lo]
        codec, level = _worker()["setup"].codec
        yield (
            record_key(shard, rec),
            encode_record(
                bases,
                [cat.names[s] for s in seqs],
                (part.start + cat.origin[part.seq_index]).tolist(),  # positions in the source sequence
                part.window_index.tolist(),
                [cat.tags[s] for s in seqs],
                codec,
                level,
            ),
            len(bases),
        )


def _pool_task(task: tuple[str, int]) -> ShardResult:
    return write_shard_task(_worker()["setup"], *task)


def run_writers(
    setup: WriterSetup, tasks: list[tuple[str, int]], workers: int, progress: bool
) -> Iterator[ShardResult]:
    """Write every task's shard, here (one worker or one task) or in a pool of `workers`
    processes; yields each result as its shard is complete."""
    import webdataset  # noqa: F401 - the shard writer's library (it imports torch): once here, before the pool forks

    bar = tqdm(total=len(tasks), desc="write", unit="shard", disable=not progress)
    if workers <= 1 or len(tasks) <= 1:
        _init_writer(setup)
        try:
            for task in tasks:
                yield write_shard_task(setup, *task)
                bar.update()
        finally:  # in this process the handles would outlive the run (and the cache they point into)
            close_writer()
    else:
        context = mp.get_context()
        initargs = (setup, os.getpid(), context.get_start_method())
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_writer, initargs=initargs) as pool:
            for result in pool.map(_pool_task, tasks, chunksize=1):
                yield result
                bar.update()
    bar.close()
