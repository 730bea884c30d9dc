"""Weighted mixing of several datasets with exact quotas: which window fills each slot of an epoch. Pure.

Evo2 trained on a blend of about fifty subsets with weights from 0.235 down to 0.0001. Mixing by
random draws gives each source its share only on average (and a wrong weight shows up only as a
strange loss curve); here an epoch of `length` slots holds exactly the quota of every dataset:

1. **Quotas**: dataset d gets ``round(share_d x length)`` slots, rounded by largest remainder so
   the quotas add up to `length` (ties to the earlier dataset).
2. **Interleaving**: dataset d's slots sit at the positions ``(k + u_d) / q_d`` (k = 0..q_d-1, u_d
   a seeded offset of (seed, epoch)) merged in order, so each source is spread evenly through the
   epoch: a run of one source d is at most `run_bound` long.
3. **Streams**: each dataset is read as an endless stream of passes, pass p being its own seeded
   epoch order (`plan.epoch_sequence` with the dataset's seed). Epoch e takes the windows
   ``[e x q_d, (e + 1) x q_d)`` of the stream: a dataset asked for fewer windows than it has is
   subsampled without repeats and the next epoch continues with windows not yet seen; one asked for
   more is repeated, each repeat in a fresh order.
4. **Virtual window ids**: a slot holds ``pass x total + offset_d + window`` (``total``: windows of
   all datasets; ``offset_d``: the first id of dataset d), so a plan stays one int64 array (resume
   and elastic re-division work on it unchanged) and a reader recovers the window and the pass
   (`split_virtual`); the pass seeds the window's reverse-complement coin and tag dropout, so each
   repeat of a window draws afresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bionemo_wds.load.plan import DEFAULT_MIX, Consumed, RankPlan, RecordTable, epoch_sequence, plan_of_sequence
from bionemo_wds.seeds import numpy_rng, stream_seed


def quotas(weights: Sequence[float], length: int) -> np.ndarray:
    """Slots of each dataset in an epoch of `length`: ``share x length`` rounded by largest remainder,
    summing to `length` exactly. Weights are positive and need not sum to 1."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) == 0 or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"mixing weights must be finite and positive, got {list(weights)}")
    if length < 0:
        raise ValueError(f"an epoch cannot have {length} samples")
    raw = w / w.sum() * length
    base = np.floor(raw).astype(np.int64)
    left = int(length - base.sum())
    order = np.lexsort((np.arange(len(w)), -(raw - base)))  # largest remainder first, ties by index
    base[order[:left]] += 1
    return base


def interleave(counts: Sequence[int] | np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The dataset of every slot of the epoch (int64, length ``sum(counts)``): dataset d's
    ``counts[d]`` slots evenly spaced at ``(k + u_d) / counts[d]``, with offsets u_d of (seed, epoch)."""
    q = np.asarray(counts, dtype=np.int64)
    offsets = numpy_rng(seed, "mix_offsets", epoch).random(len(q))
    positions = np.concatenate([(np.arange(n) + offsets[d]) / n for d, n in enumerate(q.tolist()) if n] or [[]])
    sources = np.repeat(np.arange(len(q), dtype=np.int64), q)
    return sources[np.lexsort((sources, positions))]


def run_bound(counts: Sequence[int] | np.ndarray) -> int:
    """Longest run of one dataset `interleave` can give: ``1 + ceil(q_d / q_other)`` for the largest
    quota q_d against the largest other one (any stretch of q_d's slots that long holds a slot of
    every dataset with a quota at least that share); the whole epoch when only one dataset is read."""
    q = sorted((int(n) for n in counts if n), reverse=True)
    if len(q) < 2:
        return q[0] if q else 0
    return 1 + -(-q[0] // q[1])


def source_seed(seed: int, dataset: int) -> int:
    """The seed of dataset `dataset`'s stream of passes (its epoch orders, RC coins and tag dropout)."""
    return stream_seed(seed, "mix_source", dataset)


def stream_windows(
    table: RecordTable, seed: int, start: int, count: int, mix: int = DEFAULT_MIX
) -> tuple[np.ndarray, np.ndarray]:
    """Windows ``[start, start + count)`` of a dataset's endless stream (pass p is
    ``epoch_sequence(table, seed, p, mix)``): (window ids, pass of each)."""
    n = table.n_windows
    if count and n == 0:
        raise ValueError("a dataset with no windows cannot fill its quota")
    ids, passes = [], []
    position, end = start, start + count
    while position < end:
        p, within = divmod(position, n)
        take = min(n - within, end - position)
        ids.append(epoch_sequence(table, seed, p, mix)[within : within + take])
        passes.append(np.full(take, p, dtype=np.int64))
        position += take
    if not ids:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(ids), np.concatenate(passes)


def split_virtual(ids: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Virtual window ids -> (window id across all datasets, pass of its dataset's stream)."""
    passes, window = np.divmod(ids, total)
    return window, passes


def mixed_sequence(
    tables: Sequence[RecordTable], counts: Sequence[int] | np.ndarray, seed: int, epoch: int, mix: int = DEFAULT_MIX
) -> np.ndarray:
    """The virtual window id of every slot of a mixed epoch (see the module docstring)."""
    sizes = np.array([t.n_windows for t in tables], dtype=np.int64)
    total = int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    order = interleave(counts, seed, epoch)
    sequence = np.empty(len(order), dtype=np.int64)
    for d, (table, n) in enumerate(zip(tables, counts)):
        if not n:
            continue
        ids, passes = stream_windows(table, source_seed(seed, d), epoch * int(n), int(n), mix)
        sequence[order == d] = passes * total + offsets[d] + ids
    return sequence


def mixed_plan(
    tables: Sequence[RecordTable],
    counts: Sequence[int] | np.ndarray,
    seed: int,
    epoch: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
    mix: int = DEFAULT_MIX,
) -> RankPlan:
    """Rank `dp_rank`'s batches of a mixed training epoch (from the resume position `consumed`): the
    mixed sequence cut as every training epoch is (`plan.plan_of_sequence`)."""
    sequence = mixed_sequence(tables, counts, seed, epoch, mix)
    return plan_of_sequence(sequence, dp_rank, dp_size, micro, consumed)


def stream_positions(counts: Sequence[int] | np.ndarray, epoch: int, taken: Sequence[int]) -> list[int]:
    """Where each dataset's stream stands after `taken[d]` of its windows were consumed in `epoch`
    (for checkpoints and logs: ``epoch x q_d + taken_d``)."""
    return [epoch * int(q) + int(t) for q, t in zip(counts, taken)]
