"""Shard writers: one task writes one shard; what every task needs (`WriterSetup`) arrives once per process.

A task is (split, shard number); the writer computes that shard's windows from the plan
(`shard_plan.ShardPlan`), reads their bases and writes the shard through `format.write_shard` (atomic: its
name appears only when complete), so a shard's bytes depend only on the plan and the output is
identical for any number of processes, here or in a process pool (`executors/local.py`) or on a
Dask cluster (`executors/dask.py`). Each task returns a `ShardResult` (size, sha256, tokens, record index)
that `prepare` puts into the shard's manifest entry.

"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bionemo_wds.core.tokenizer import UPPERCASE_TABLE, replace_invalid_table
from bionemo_wds.format import RecordIndex, encode_record, record_key, shard_name, write_shard
from bionemo_wds.format.write_errors import writing_output
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


#: Bases a writer reads at a time, in source order (`_read_block`): whole records, about 32 MiB.
READ_BLOCK_BASES = 32 << 20


def base_table(case: str, on_invalid: str) -> bytes | None:
    """The `bytes.translate` table the writers read bases through (None: bytes as the source has
    them): `case` ``upper`` upper-cases every base, ``keep`` leaves soft-masked (lower-case) bases
    as they are; ``--on-invalid replace-N`` also maps every byte that is no IUPAC code to ``N``."""
    if on_invalid == "replace-N":
        return replace_invalid_table(keep_case=case == "keep")
    return UPPERCASE_TABLE if case == "upper" else None


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


def start_writer(setup: WriterSetup) -> None:
    """Make this thread a writer for `setup` (its source reader opens at the first read)."""
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
    of the same setup (a pool worker's or a cluster worker's process). A disk that fills up (or
    another refusal of the OS to write the output) is an `errors.OutputWriteError` naming the shard."""
    if _worker().get("setup") is not setup:
        start_writer(setup)
    windows, starts = setup.plan.shard(split, shard)
    name = f"{split}/{shard_name(shard, setup.prefix)}"
    final = join(setup.root, name)
    with writing_output(final, f"shard {name} of --out {setup.root}", setup.root):
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
