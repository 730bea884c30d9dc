"""Cutting an epoch's sequence into ranks' batches, resuming it, and dealing batches to workers. Pure.

1. The sequence is cut into ``steps = len // (micro * dp_size)`` global batches; rank ``r`` takes
   the contiguous run ``[r * steps * micro, (r + 1) * steps * micro)`` and reads it in batches of
   `micro`. The windows after ``steps * micro * dp_size`` (fewer than one global batch) are left
   out of this epoch, and every rank yields exactly `steps` batches. A `whole` epoch (packed
   samples) instead completes the last global batch with `FILLER`: ``ceil`` instead of ``floor``.
2. A resume position lists the (dp_size, micro, batches) already consumed this epoch; what is left
   is each rank's unconsumed run, in rank order, followed by the left-out tail, and it is cut again
   for the current data-parallel size (elastic). With the same size this gives exactly the batches
   the uninterrupted run would have yielded next.
3. Evaluation splits are read in stored order, every window once over all ranks: rank ``r`` takes
   ``ceil(n / dp_size)`` windows and every rank yields the same number of batches, padded with
   `FILLER` (no bases, ``loss_mask`` all zero, flagged in the batch).
4. Loader workers never change a rank's batches: batches are dealt to workers in units of
   consecutive batches (unit ``u`` to worker ``u % workers``; at least `UNIT_BATCHES`, and a mixing
   block's worth in the data module, so workers mostly read different records) and the main
   process puts them back in order (`worker_units`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from bionemo_wds.errors import OptionError
from bionemo_wds.load.plan.order import EpochOrder
from bionemo_wds.load.plan.types import DEFAULT_MIX, FILLER, UNIT_BATCHES, Consumed, RankPlan, RecordTable

#: Positions of a rank's run ordered at once (`plan_of_order`): 8 MB of temporaries.
_FILL = 1 << 20
#: Positions of an epoch's order as runs: (first position, length) arrays, in order.
Runs = tuple[np.ndarray, np.ndarray]


def cut_runs(runs: Runs, lo: int, hi: int) -> Runs:
    """Positions ``[lo, hi)`` of the sequence the runs make, as runs."""
    starts, lengths = runs
    ends = np.cumsum(lengths)
    begin = ends - lengths
    keep = (ends > lo) & (begin < hi)
    s, b, e = starts[keep], begin[keep], ends[keep]
    head = np.maximum(lo - b, 0)
    return s + head, np.minimum(e, hi) - b - head


def run_positions(runs: Runs) -> np.ndarray:
    """Every position of the runs, in order."""
    starts, lengths = runs
    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)


def rank_runs(runs: Runs, dp_size: int, micro: int, whole: bool = False) -> tuple[list[Runs], Runs, int]:
    """Each rank's contiguous run of whole global batches, the tail no rank gets, and the positions
    each rank reads. `whole`: the last global batch is completed with filler instead of left out (so
    the last ranks' runs may be shorter than what they read, and there is no tail)."""
    total = int(runs[1].sum())
    steps = -(-total // (micro * dp_size)) if whole else total // (micro * dp_size)
    per_rank = steps * micro
    ranks = [cut_runs(runs, r * per_rank, (r + 1) * per_rank) for r in range(dp_size)]
    return ranks, cut_runs(runs, min(dp_size * per_rank, total), total), per_rank


def remaining_runs(n: int, consumed: Sequence[Consumed], whole: bool = False) -> Runs:
    """The positions of an n-window epoch not yet consumed, after each segment in turn (each
    rank's unconsumed run in rank order, then the tail), as runs: a few per segment, never one
    entry per window. `whole`: epochs cut with their last global batch completed by filler."""
    runs: Runs = (np.zeros(1, np.int64), np.array([n], np.int64))
    for seg in consumed:
        if seg.dp_size < 1 or seg.micro < 1 or seg.batches < 0:
            raise OptionError(f"invalid resume segment {seg}")
        ranks, tail, per_rank = rank_runs(runs, seg.dp_size, seg.micro, whole)
        taken = seg.batches * seg.micro
        if taken > per_rank:
            raise OptionError(
                f"resume position says {seg.batches} batches were consumed, but the epoch has "
                f"{per_rank // seg.micro} batches per rank at dp_size {seg.dp_size}"
            )
        pieces = [cut_runs(rank, taken, per_rank) for rank in ranks] + [tail]
        runs = (np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
    return runs


def remaining_sequence(sequence: np.ndarray, consumed: Sequence[Consumed], whole: bool = False) -> np.ndarray:
    """The epoch's windows not yet consumed, after each segment in turn (rank order, then the tail)."""
    return sequence[run_positions(remaining_runs(len(sequence), consumed, whole))]


def train_batches(
    n_windows: int, dp_size: int, micro: int, consumed: Sequence[Consumed] = (), whole: bool = False
) -> int:
    """Batches every rank yields in a training epoch (those consumed before a resume included):
    `train_plan`'s ``total_batches`` by arithmetic alone, without ordering the epoch."""
    done = sum(seg.batches for seg in consumed)
    if whole:  # filler was consumed too: count what is left by the runs (a few per segment)
        left = int(remaining_runs(n_windows, consumed, whole)[1].sum())
        return done + -(-left // (micro * dp_size))
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
    check_rank(dp_rank, dp_size, micro)
    return plan_of_order(EpochOrder(table, seed, epoch, mix), table.n_windows, dp_rank, dp_size, micro, consumed)


def plan_of_order(
    order: Callable[[np.ndarray], np.ndarray],
    n: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
    whole: bool = False,
) -> RankPlan:
    """Rank `dp_rank`'s batches of an n-window epoch given as a function from positions to window
    ids (`EpochOrder`, `mixing.mixed_order`), from the resume position `consumed`: every rank a
    contiguous run of whole global batches (1-2 above); only this rank's positions are computed.
    `whole`: the last global batch is completed with `FILLER` instead of left out, so every sample
    is read (packed samples: every base once per epoch)."""
    check_rank(dp_rank, dp_size, micro)
    ranks, tail, per_rank = rank_runs(remaining_runs(n, consumed, whole), dp_size, micro, whole)
    ids = np.empty(per_rank, dtype=np.int64)
    filled = 0
    for start, length in zip(*(part.tolist() for part in ranks[dp_rank])):  # a few runs
        for lo in range(0, length, _FILL):  # the plan's ids alone in memory, not its positions too
            hi = min(lo + _FILL, length)
            ids[filled + lo : filled + hi] = order(np.arange(start + lo, start + hi, dtype=np.int64))
        filled += length
    ids[filled:] = FILLER
    done = sum(seg.batches for seg in consumed)
    return RankPlan(
        ids.reshape(-1, micro),
        left_out=int(tail[1].sum()),
        first_batch=done,
        total_batches=done + per_rank // micro,
    )


def eval_plan(n_windows: int, dp_rank: int, dp_size: int, micro: int) -> RankPlan:
    """Rank `dp_rank`'s batches of an evaluation split: every window once over all ranks, in stored
    order; every rank the same number of batches, the last ones padded with filler."""
    check_rank(dp_rank, dp_size, micro)
    share = -(-n_windows // dp_size)
    n_batches = -(-share // micro)
    ids = np.arange(dp_rank * share, min((dp_rank + 1) * share, n_windows), dtype=np.int64)
    padded = np.full(n_batches * micro, FILLER, dtype=np.int64)
    padded[: len(ids)] = ids
    return RankPlan(padded.reshape(-1, micro), total_batches=n_batches)


def worker_units(n_batches: int, worker: int, workers: int, unit: int = UNIT_BATCHES) -> list[int]:
    """Indices of the batches (of a rank's pass) loader worker `worker` of `workers` produces, in order."""
    return [b for batches in unit_ranges(n_batches, worker, workers, unit) for b in batches]


def unit_ranges(n_batches: int, worker: int, workers: int, unit: int = UNIT_BATCHES) -> Iterator[range]:
    """The units of consecutive batches loader worker `worker` of `workers` produces, in order, one
    at a time (`worker_units` as ranges): a pass of millions of batches starts without a Python step
    per batch."""
    workers = max(workers, 1)
    for u in range(worker, -(-n_batches // unit), workers):
        yield range(u * unit, min((u + 1) * unit, n_batches))


def worker_batches_from(n_batches: int, worker: int, workers: int, unit: int, b: int, count: int) -> list[int]:
    """Batch `b` and the batches worker `worker` produces after it, `count` in all (fewer at the end
    of the pass): ``worker_units(...)`` from `b` on, without listing the pass; ``[b]`` when batch `b`
    is not the worker's."""
    workers = max(workers, 1)
    u = b // unit
    if not 0 <= b < n_batches or u < worker or (u - worker) % workers:
        return [b]
    out: list[int] = []
    while len(out) < count and u * unit < n_batches:
        out.extend(range(max(b, u * unit), min((u + 1) * unit, n_batches))[: count - len(out)])
        u += workers
    return out


def check_rank(dp_rank: int, dp_size: int, micro: int) -> None:
    """A data-parallel place and micro batch that make sense (an `OptionError` naming them)."""
    if dp_size < 1 or not 0 <= dp_rank < dp_size:
        raise OptionError(f"data-parallel rank {dp_rank} is not within a size of {dp_size}")
    if micro < 1:
        raise OptionError(f"micro_batch_size must be at least 1, got {micro}")
