"""The epoch plan: which windows every data-parallel rank reads, in which batches. Pure: never opens a file.

Windows are numbered record-major across the split (record ``r`` holds windows
``first[r] .. first[r+1]-1``). For a training epoch:

1. the records are put in a seeded order of (seed, epoch) (``record_order`` stream), and the
   windows in that order are mixed within consecutive blocks of `mix` windows (``window_mix``
   stream): the epoch's sequence, the same for every data-parallel size;
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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bionemo_wds.seeds import numpy_rng

#: Window id of a filler window (padding of an evaluation rank or a damaged record's place).
FILLER = -1
#: Windows mixed together at once in a training epoch (records of 16 windows: 64 records).
DEFAULT_MIX = 1024
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

    @property
    def first(self) -> np.ndarray:
        """First window id of each record, plus the total at the end (length ``len + 1``)."""
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


def epoch_sequence(table: RecordTable, seed: int, epoch: int, mix: int = DEFAULT_MIX) -> np.ndarray:
    """The training epoch's window ids: records in a seeded order, windows mixed within blocks of `mix`."""
    order = numpy_rng(seed, "record_order", epoch).permutation(len(table))
    first = table.first
    counts = table.windows[order]
    starts = np.repeat(first[order], counts)
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    sequence = starts + within
    if mix > 1 and len(sequence) > 1:
        rng = numpy_rng(seed, "window_mix", epoch)
        n_full = len(sequence) // mix * mix
        blocks = sequence[:n_full].reshape(-1, mix)
        sequence[:n_full] = rng.permuted(blocks, axis=1).reshape(-1)
        tail = sequence[n_full:]
        sequence[n_full:] = tail[rng.permutation(len(tail))]
    return sequence


def _runs(sequence: np.ndarray, dp_size: int, micro: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Each rank's contiguous run of whole global batches, and the tail no rank gets."""
    steps = len(sequence) // (micro * dp_size)
    per_rank = steps * micro
    runs = [sequence[r * per_rank : (r + 1) * per_rank] for r in range(dp_size)]
    return runs, sequence[dp_size * per_rank :]


def remaining_sequence(sequence: np.ndarray, consumed: Sequence[Consumed]) -> np.ndarray:
    """The epoch's windows not yet consumed, after each segment in turn (rank order, then the tail)."""
    for seg in consumed:
        if seg.dp_size < 1 or seg.micro < 1 or seg.batches < 0:
            raise ValueError(f"invalid resume segment {seg}")
        runs, tail = _runs(sequence, seg.dp_size, seg.micro)
        taken = seg.batches * seg.micro
        if runs and taken > len(runs[0]):
            raise ValueError(
                f"resume position says {seg.batches} batches were consumed, but the epoch has "
                f"{len(runs[0]) // seg.micro} batches per rank at dp_size {seg.dp_size}"
            )
        sequence = np.concatenate([*(run[taken:] for run in runs), tail])
    return sequence


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
    return plan_of_sequence(epoch_sequence(table, seed, epoch, mix), dp_rank, dp_size, micro, consumed)


def plan_of_sequence(
    full: np.ndarray, dp_rank: int, dp_size: int, micro: int, consumed: Sequence[Consumed] = ()
) -> RankPlan:
    """Rank `dp_rank`'s batches of an epoch whose windows, in order, are `full` (from the resume
    position `consumed`): every rank a contiguous run of whole global batches (steps 2-3 above)."""
    _check_rank(dp_rank, dp_size, micro)
    sequence = remaining_sequence(full, consumed)
    runs, tail = _runs(sequence, dp_size, micro)
    done = sum(seg.batches for seg in consumed)
    return RankPlan(
        runs[dp_rank].reshape(-1, micro),
        left_out=len(tail),
        first_batch=done,
        total_batches=done + len(runs[dp_rank]) // micro,
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
        raise ValueError(f"{table.n_windows} windows cannot fill one global batch of {micro * dp_size}")
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
        raise ValueError(f"data-parallel rank {dp_rank} is not within a size of {dp_size}")
    if micro < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {micro}")


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
        raise ValueError('resuming with another data-parallel size or micro batch needs epoch="exact"')
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
