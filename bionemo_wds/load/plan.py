"""The epoch plan: which windows every data-parallel rank reads, in which batches. Pure: never opens a file.

Windows are numbered record-major across the split (record ``r`` holds windows
``first[r] .. first[r+1]-1``). For a training epoch:

1. the records are put in a seeded order of (seed, epoch) (``record_order`` stream), and the
   windows in that order are mixed within consecutive blocks of `mix` windows (``window_mix``
   stream): the epoch's sequence, the same for every data-parallel size. Both orders are computed
   permutations (`permutation.SeededPermutation`, as prepare's window order): `EpochOrder` gives
   the window at any position of the epoch from the record order alone (one integer per record),
   so a rank computes its own positions only, never an array of every window of the epoch;
2. the sequence is cut into ``steps = len // (micro * dp_size)`` global batches; rank ``r`` takes
   the contiguous run ``[r * steps * micro, (r + 1) * steps * micro)`` and reads it in batches of
   `micro`. The windows after ``steps * micro * dp_size`` (fewer than one global batch) are left
   out of this epoch, and every rank yields exactly `steps` batches;
3. a resume position lists the (dp_size, micro, batches) already consumed this epoch; what is left
   is each rank's unconsumed run, in rank order, followed by the left-out tail, and it is cut again
   for the current data-parallel size (elastic). With the same size this gives exactly the batches
   the uninterrupted run would have yielded next.

Evaluation splits are read in stored order, every window once over all ranks: rank ``r`` takes
``ceil(n / dp_size)`` windows and every rank yields the same number of batches, padded with filler
(window id -1: no bases, ``loss_mask`` all zero, flagged in the batch).

Loader workers never change a rank's batches: batches are dealt to workers in units of consecutive
batches (unit ``u`` to worker ``u % workers``; at least `UNIT_BATCHES`, and a mixing block's worth in
the data module, so workers mostly read different records) and the main process puts them back in
order (`worker_units`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from bionemo_wds.errors import OptionError
from bionemo_wds.permutation import SeededPermutation

#: Window id of a filler window (padding of an evaluation rank or a damaged record's place).
FILLER = -1
#: Windows mixed together at once in a training epoch (records of 16 windows: 64 records).
DEFAULT_MIX = 1024
#: Positions an `EpochOrder` computes at once (temporaries of 64k int64 values stay in the CPU cache).
CHUNK = 1 << 16
#: Consecutive batches one loader worker produces at a time: enough that a worker reads the
#: records of its batches once, few enough that the main process holds little to reorder.
UNIT_BATCHES = 16


@dataclass(frozen=True)
class RecordTable:
    """The records of a split, in shard order: which shard each is in, and how many windows it holds."""

    shard: np.ndarray  # int64 shard number per record
    windows: np.ndarray  # int64 windows per record

    def __post_init__(self) -> None:
        if len(self.shard) != len(self.windows):
            raise ValueError("record table columns have different lengths")

    @classmethod
    def from_counts(cls, windows_per_shard: Sequence[Sequence[int]]) -> RecordTable:
        """From the window counts of every record of every shard."""
        shard = np.repeat(np.arange(len(windows_per_shard), dtype=np.int64), [len(w) for w in windows_per_shard])
        windows = np.fromiter((n for shard in windows_per_shard for n in shard), dtype=np.int64, count=len(shard))
        return cls(shard, windows)

    def __len__(self) -> int:
        return len(self.windows)

    @cached_property
    def first(self) -> np.ndarray:
        """First window id of each record, plus the total at the end (length ``len + 1``; computed
        once: every batch locates its windows by it)."""
        return np.concatenate([[0], np.cumsum(self.windows)]).astype(np.int64)

    @property
    def n_windows(self) -> int:
        return int(self.windows.sum())

    def locate(self, window_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record, row within the record) of each window id."""
        first = self.first
        record = np.searchsorted(first, window_ids, side="right") - 1
        return record, window_ids - first[record]


@dataclass(frozen=True)
class Consumed:
    """Batches every rank took of an epoch with one data-parallel layout (one segment of a resumed epoch)."""

    dp_size: int
    micro: int
    batches: int


@dataclass
class RankPlan:
    """What one rank reads in one pass."""

    batches: np.ndarray  # int64 (n_batches, micro): window ids, FILLER for filler
    left_out: int = 0  # windows of the epoch no rank reads (fewer than one global batch)
    first_batch: int = 0  # index of batches[0] in the epoch (after a resume)
    total_batches: int = 0  # batches of the whole epoch on every rank
    extra: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.batches)


class EpochOrder:
    """A training epoch's window ids by position (step 1 above), computed for any positions alone.

    Records come in the order of a seeded permutation (materialised: one integer per record, which
    the prefix sums of their window counts need anyway); position p lies in mixing block
    ``p // mix``, whose positions are shuffled by a permutation of its own (the block number tweaks
    one `SeededPermutation` of `mix`; the last, shorter block has its own). Memory: O(records);
    time: O(positions asked for).
    """

    def __init__(self, table: RecordTable, seed: int, epoch: int, mix: int = DEFAULT_MIX):
        self.n = table.n_windows
        self.mix = max(1, mix)
        self.records = SeededPermutation(len(table), seed, "record_order", epoch).all()
        counts = table.windows[self.records]
        self.ends = np.cumsum(counts)  # windows up to each record of the order
        # window id of a slot = slot + shift of its record (its first id minus the slots before it)
        self.shift = table.first[self.records] - (self.ends - counts)
        self.full = self.n // self.mix * self.mix  # positions in whole blocks
        self.block = SeededPermutation(self.mix, seed, "window_mix", epoch)
        self.tail = SeededPermutation(self.n - self.full, seed, "window_mix_tail", epoch)

    def __len__(self) -> int:
        return self.n

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The window ids at `positions` of the epoch."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        for lo in range(0, len(positions), CHUNK):  # temporaries stay in the CPU cache
            out[lo : lo + CHUNK] = self._ids(positions[lo : lo + CHUNK])
        return out

    def range(self, lo: int, hi: int) -> np.ndarray:
        """The window ids at positions ``[lo, hi)``."""
        out = np.empty(max(0, hi - lo), dtype=np.int64)
        for start in range(lo, hi, CHUNK):
            out[start - lo : start - lo + CHUNK] = self._ids(np.arange(start, min(start + CHUNK, hi), dtype=np.int64))
        return out

    def _ids(self, positions: np.ndarray) -> np.ndarray:
        slot = positions.copy()
        if self.mix > 1:
            whole = positions < self.full
            inside = positions[whole]
            block = inside // self.mix
            offset = inside - block * self.mix  # (np.divmod of int64 arrays is several times slower)
            slot[whole] = block * self.mix + self.block(offset, tweak=block)
            slot[~whole] = self.full + self.tail(positions[~whole] - self.full)
        if len(slot) == 0:
            return slot
        # which record of the order holds each slot: among the records the chunk's slots span
        low, high = int(slot.min()), int(slot.max()) + 1
        k0 = int(np.searchsorted(self.ends, low, side="right"))
        k1 = int(np.searchsorted(self.ends, high - 1, side="right")) + 1
        if high - low <= 4 * len(slot):  # a contiguous stretch (a rank's run): a table of the stretch
            ends = np.minimum(self.ends[k0:k1], high)
            spans = np.diff(ends, prepend=low)
            k = np.repeat(np.arange(k0, k1), spans)[slot - low]
        else:
            k = np.searchsorted(self.ends[k0:k1], slot, side="right") + k0
        return slot + self.shift[k]


def epoch_sequence(table: RecordTable, seed: int, epoch: int, mix: int = DEFAULT_MIX) -> np.ndarray:
    """The whole training epoch's window ids (`EpochOrder` of every position): small tables and tests."""
    return EpochOrder(table, seed, epoch, mix).range(0, table.n_windows)


#: Positions of an epoch's order as runs: (first position, length) arrays, in order.
Runs = tuple[np.ndarray, np.ndarray]


def _cut(runs: Runs, lo: int, hi: int) -> Runs:
    """Positions ``[lo, hi)`` of the sequence the runs make, as runs."""
    starts, lengths = runs
    ends = np.cumsum(lengths)
    begin = ends - lengths
    keep = (ends > lo) & (begin < hi)
    s, b, e = starts[keep], begin[keep], ends[keep]
    head = np.maximum(lo - b, 0)
    return s + head, np.minimum(e, hi) - b - head


def _positions(runs: Runs) -> np.ndarray:
    """Every position of the runs, in order."""
    starts, lengths = runs
    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)


def _rank_runs(runs: Runs, dp_size: int, micro: int) -> tuple[list[Runs], Runs]:
    """Each rank's contiguous run of whole global batches, and the tail no rank gets."""
    total = int(runs[1].sum())
    per_rank = total // (micro * dp_size) * micro
    return [_cut(runs, r * per_rank, (r + 1) * per_rank) for r in range(dp_size)], _cut(runs, dp_size * per_rank, total)


def remaining_runs(n: int, consumed: Sequence[Consumed]) -> Runs:
    """The positions of an n-window epoch not yet consumed, after each segment in turn (each
    rank's unconsumed run in rank order, then the tail), as runs: a few per segment, never one
    entry per window."""
    runs: Runs = (np.zeros(1, np.int64), np.array([n], np.int64))
    for seg in consumed:
        if seg.dp_size < 1 or seg.micro < 1 or seg.batches < 0:
            raise ValueError(f"invalid resume segment {seg}")
        ranks, tail = _rank_runs(runs, seg.dp_size, seg.micro)
        per_rank = int(ranks[0][1].sum())
        taken = seg.batches * seg.micro
        if taken > per_rank:
            raise OptionError(
                f"resume position says {seg.batches} batches were consumed, but the epoch has "
                f"{per_rank // seg.micro} batches per rank at dp_size {seg.dp_size}"
            )
        pieces = [_cut(rank, taken, per_rank) for rank in ranks] + [tail]
        runs = (np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
    return runs


def remaining_sequence(sequence: np.ndarray, consumed: Sequence[Consumed]) -> np.ndarray:
    """The epoch's windows not yet consumed, after each segment in turn (rank order, then the tail)."""
    return sequence[_positions(remaining_runs(len(sequence), consumed))]


def train_batches(n_windows: int, dp_size: int, micro: int, consumed: Sequence[Consumed] = ()) -> int:
    """Batches every rank yields in a training epoch (those consumed before a resume included):
    `train_plan`'s ``total_batches`` by arithmetic alone, without ordering the epoch."""
    done = sum(seg.batches for seg in consumed)
    left = n_windows - sum(seg.batches * seg.micro * seg.dp_size for seg in consumed)
    return done + left // (micro * dp_size)


def train_plan(
    table: RecordTable,
    seed: int,
    epoch: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
    mix: int = DEFAULT_MIX,
) -> RankPlan:
    """Rank `dp_rank`'s batches for a training epoch (from the resume position `consumed`)."""
    _check_rank(dp_rank, dp_size, micro)
    return plan_of_order(EpochOrder(table, seed, epoch, mix), table.n_windows, dp_rank, dp_size, micro, consumed)


def plan_of_sequence(
    full: np.ndarray, dp_rank: int, dp_size: int, micro: int, consumed: Sequence[Consumed] = ()
) -> RankPlan:
    """Rank `dp_rank`'s batches of an epoch whose windows, in order, are `full` (from the resume
    position `consumed`): every rank a contiguous run of whole global batches (steps 2-3 above)."""
    return plan_of_order(full.__getitem__, len(full), dp_rank, dp_size, micro, consumed)


def plan_of_order(
    order: Callable[[np.ndarray], np.ndarray],
    n: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
) -> RankPlan:
    """`plan_of_sequence` of an n-window epoch given as a function from positions to window ids
    (`EpochOrder`): only this rank's positions are computed."""
    _check_rank(dp_rank, dp_size, micro)
    ranks, tail = _rank_runs(remaining_runs(n, consumed), dp_size, micro)
    ids = np.asarray(order(_positions(ranks[dp_rank])), dtype=np.int64)
    done = sum(seg.batches for seg in consumed)
    return RankPlan(
        ids.reshape(-1, micro),
        left_out=int(tail[1].sum()),
        first_batch=done,
        total_batches=done + len(ids) // micro,
    )


def eval_plan(n_windows: int, dp_rank: int, dp_size: int, micro: int) -> RankPlan:
    """Rank `dp_rank`'s batches of an evaluation split: every window once over all ranks, in stored
    order; every rank the same number of batches, the last ones padded with filler."""
    _check_rank(dp_rank, dp_size, micro)
    share = -(-n_windows // dp_size)
    n_batches = -(-share // micro)
    ids = np.arange(dp_rank * share, min((dp_rank + 1) * share, n_windows), dtype=np.int64)
    padded = np.full(n_batches * micro, FILLER, dtype=np.int64)
    padded[: len(ids)] = ids
    return RankPlan(padded.reshape(-1, micro), total_batches=n_batches)


def resampled_plan(
    table: RecordTable,
    seed: int,
    pseudo_epoch: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    batches_per_epoch: int,
    mix: int = DEFAULT_MIX,
) -> RankPlan:
    """Pseudo-epoch `pseudo_epoch` of an endless stream of exact epochs back to back, cut into
    `batches_per_epoch` batches on every rank (bionemo's ``ceil(n_samples / global_batch_size)``)."""
    _check_rank(dp_rank, dp_size, micro)
    steps = table.n_windows // (micro * dp_size)
    if steps == 0:
        raise OptionError(f"{table.n_windows} windows cannot fill one global batch of {micro * dp_size}")
    start = pseudo_epoch * batches_per_epoch
    pieces, cached = [], {}
    for step in range(start, start + batches_per_epoch):
        epoch, within = divmod(step, steps)
        if epoch not in cached:
            cached = {epoch: train_plan(table, seed, epoch, dp_rank, dp_size, micro, mix=mix).batches}
        pieces.append(cached[epoch][within])
    return RankPlan(np.stack(pieces) if pieces else np.empty((0, micro), np.int64), total_batches=batches_per_epoch)


def worker_units(n_batches: int, worker: int, workers: int, unit: int = UNIT_BATCHES) -> list[int]:
    """Indices of the batches (of a rank's pass) loader worker `worker` of `workers` produces, in order."""
    workers = max(workers, 1)
    return [
        b
        for u in range(worker, -(-n_batches // unit), workers)
        for b in range(u * unit, min((u + 1) * unit, n_batches))
    ]


def _check_rank(dp_rank: int, dp_size: int, micro: int) -> None:
    if dp_size < 1 or not 0 <= dp_rank < dp_size:
        raise OptionError(f"data-parallel rank {dp_rank} is not within a size of {dp_size}")
    if micro < 1:
        raise OptionError(f"micro_batch_size must be at least 1, got {micro}")


def split_plan(
    table: RecordTable,
    train: bool,
    resampled_batches: int | None,
    seed: int,
    epoch: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
    mix: int = DEFAULT_MIX,
) -> RankPlan:
    """A rank's batches of one split in `epoch`: `eval_plan` for val/test; for training `train_plan`
    from the `consumed` position, or with `resampled_batches` (bionemo's pseudo-epoch length)
    `resampled_plan` from the batches consumed (a resampled stream resumes only in its own layout)."""
    if not train:
        return eval_plan(table.n_windows, dp_rank, dp_size, micro)
    if resampled_batches is None:
        return train_plan(table, seed, epoch, dp_rank, dp_size, micro, consumed, mix=mix)
    if any((seg.dp_size, seg.micro) != (dp_size, micro) for seg in consumed):
        raise OptionError('resuming with another data-parallel size or micro batch needs epoch="exact"')
    plan = resampled_plan(table, seed, epoch, dp_rank, dp_size, micro, resampled_batches, mix=mix)
    done = sum(seg.batches for seg in consumed)
    return RankPlan(plan.batches[done:], first_batch=done, total_batches=plan.total_batches)


def split_batches(
    n_windows: int,
    train: bool,
    resampled_batches: int | None,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
) -> int:
    """Batches of a whole epoch of a split on every rank (`split_plan`'s ``total_batches``), by arithmetic."""
    if not train:
        return eval_plan(n_windows, dp_rank, dp_size, micro).total_batches
    if resampled_batches is not None:
        return resampled_batches
    return train_batches(n_windows, dp_size, micro, consumed)
