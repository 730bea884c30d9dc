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
   epoch order (`plan.EpochOrder` with the dataset's seed). A dataset asked for fewer windows
   than it has (q <= n) is subsampled without repeats: a pass serves ``n // q`` epochs, each the
   next q windows of it, so the next epoch continues with windows not yet seen, and a new pass (a
   new order) starts with a new epoch, never inside one. One asked for more (q > n) is repeated:
   epoch e takes the windows ``[e x q, (e + 1) x q)`` of the stream, each repeat in a fresh order.
4. **Virtual window ids**: a slot holds ``pass x total + offset_d + window`` (``total``: windows of
   all datasets; ``offset_d``: the first id of dataset d), so a plan stays one int64 array (resume
   and elastic re-division work on it unchanged) and a reader recovers the window and the pass
   (`split_virtual`); the pass seeds the window's reverse-complement coin and tag dropout, so each
   repeat of a window draws afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from bionemo_wds.core.seeds import numpy_rng, stream_seed
from bionemo_wds.errors import BlendError
from bionemo_wds.load.plan.cut import plan_of_order
from bionemo_wds.load.plan.order import epoch_order
from bionemo_wds.load.plan.types import DEFAULT_MIX, Consumed, RankPlan, Samples

#: A dataset read more than this many times per epoch is warned about (`repeat_warnings`): a model
#: sees its windows again and again (Evo2's small, upweighted subsets are the usual case).
REPEAT_WARNING = 10.0


def quotas(weights: Sequence[float], length: int) -> np.ndarray:
    """Slots of each dataset in an epoch of `length`: ``share x length`` rounded by largest remainder,
    summing to `length` exactly. Weights are positive and need not sum to 1.

    In exact arithmetic (each weight as the fraction nearest it with a denominator up to 10^12), so a
    tie between equal remainders goes to the earlier dataset and scaled weights give the same quotas,
    which float remainders (``2/3`` computed three ways) do not."""
    w = np.asarray(weights, dtype=np.float64)
    if len(w) == 0 or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise BlendError(f"mixing weights must be finite and positive, got {list(weights)}")
    if length < 0:
        raise BlendError(f"an epoch cannot have {length} samples")
    exact = [Fraction(float(x)).limit_denominator(10**12) for x in w.tolist()]
    total = sum(exact)
    raw = [x * length / total for x in exact]
    base = [int(r) for r in raw]  # floor: raw >= 0
    left = length - sum(base)
    order = sorted(range(len(raw)), key=lambda d: (-(raw[d] - base[d]), d))  # largest remainder, ties by index
    for d in order[:left]:
        base[d] += 1
    return np.array(base, dtype=np.int64)


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


def source_seeds(seed: int, n_sources: int) -> list[int]:
    """The stream seed of each of `n_sources` datasets mixed by `seed`. A mixture of one dataset is
    that dataset: its stream is drawn by `seed` itself, so training on one dataset and on a blend of
    it alone read the same windows with the same draws."""
    if n_sources == 1:
        return [seed]
    return [source_seed(seed, d) for d in range(n_sources)]


def stream_windows(
    table: Samples, seed: int, start: int, count: int, mix: int = DEFAULT_MIX
) -> tuple[np.ndarray, np.ndarray]:
    """Windows ``[start, start + count)`` of a dataset's endless stream (pass p is
    ``EpochOrder(table, seed, p, mix)``): (window ids, pass of each)."""
    n = table.n_windows
    if count and n == 0:
        raise BlendError("a dataset with no windows cannot fill its quota")
    ids, passes = [], []
    position, end = start, start + count
    while position < end:
        p, within = divmod(position, n)
        take = min(n - within, end - position)
        ids.append(epoch_order(table, seed, p, mix).range(within, within + take))
        passes.append(np.full(take, p, dtype=np.int64))
        position += take
    if not ids:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(ids), np.concatenate(passes)


def epoch_windows(
    table: Samples, seed: int, epoch: int, quota: int, mix: int = DEFAULT_MIX
) -> tuple[np.ndarray, np.ndarray]:
    """A dataset's `quota` windows in mixed epoch `epoch` (see the module docstring, 3): (window ids,
    pass of each)."""
    n = table.n_windows
    if quota <= 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if quota <= n:  # subsampled: a pass serves whole epochs, so no window twice in one
        p, j = divmod(epoch, n // quota)
        ids = epoch_order(table, seed, p, mix).range(j * quota, (j + 1) * quota)
        return ids, np.full(quota, p, dtype=np.int64)
    return stream_windows(table, seed, epoch * quota, quota, mix)


def stream_position(n: int, quota: int, epoch: int, taken: int) -> int:
    """Where a dataset of `n` windows stands in its stream (``pass x n + windows of the pass read``)
    after `taken` of its `quota` windows of `epoch` were consumed (for checkpoints and logs)."""
    if 0 < quota <= n:
        p, j = divmod(epoch, n // quota)
        return p * n + j * quota + taken
    return epoch * quota + taken


def split_virtual(ids: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Virtual window ids -> (window id across all datasets, pass of its dataset's stream)."""
    passes, window = np.divmod(ids, total)
    return window, passes


def mixed_sequence(
    tables: Sequence[Samples],
    counts: Sequence[int] | np.ndarray,
    seed: int,
    epoch: int,
    mix: int = DEFAULT_MIX,
    seeds: Sequence[int] | None = None,
) -> np.ndarray:
    """The virtual window id of every slot of a mixed epoch (see the module docstring); `seeds`: each
    dataset's stream seed (default `source_seeds`)."""
    if len(tables) != len(counts):
        raise BlendError(f"{len(counts)} quotas for {len(tables)} datasets")
    seeds = source_seeds(seed, len(tables)) if seeds is None else seeds
    sizes = np.array([t.n_windows for t in tables], dtype=np.int64)
    total = int(sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    order = interleave(counts, seed, epoch)
    sequence = np.empty(len(order), dtype=np.int64)
    for d, (table, n) in enumerate(zip(tables, counts)):
        if not n:
            continue
        ids, passes = epoch_windows(table, seeds[d], epoch, int(n), mix)
        sequence[order == d] = passes * total + offsets[d] + ids
    return sequence


def mixed_order(
    tables: Sequence[Samples],
    counts: Sequence[int] | np.ndarray,
    seed: int,
    epoch: int,
    mix: int = DEFAULT_MIX,
    seeds: Sequence[int] | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """`mixed_sequence` as a function from positions to virtual ids. One dataset read at most once
    per epoch is its own epoch order (`EpochOrder`), so a rank computes only its own positions: the
    plan of a single dataset of billions of windows never holds the whole epoch. Otherwise the
    sequence is made whole (its interleaving is)."""
    seeds = source_seeds(seed, len(tables)) if seeds is None else seeds
    if len(tables) == 1 and 0 < int(counts[0]) <= tables[0].n_windows:
        n, quota = tables[0].n_windows, int(counts[0])
        p, j = divmod(epoch, n // quota)
        order, first, shift = epoch_order(tables[0], seeds[0], p, mix), j * quota, p * n

        def ids(positions: np.ndarray) -> np.ndarray:
            return order(np.asarray(positions, dtype=np.int64) + first) + shift

        return ids
    return mixed_sequence(tables, counts, seed, epoch, mix, seeds).__getitem__


def mixed_plan(
    tables: Sequence[Samples],
    counts: Sequence[int] | np.ndarray,
    seed: int,
    epoch: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    consumed: Sequence[Consumed] = (),
    mix: int = DEFAULT_MIX,
    seeds: Sequence[int] | None = None,
) -> RankPlan:
    """Rank `dp_rank`'s batches of a mixed training epoch (from the resume position `consumed`): the
    mixed sequence cut as every training epoch is (`cut.plan_of_order`)."""
    order = mixed_order(tables, counts, seed, epoch, mix, seeds)
    return plan_of_order(order, int(np.sum(counts)), dp_rank, dp_size, micro, consumed)


def stream_positions(
    sizes: Sequence[int], counts: Sequence[int] | np.ndarray, epoch: int, taken: Sequence[int]
) -> list[int]:
    """`stream_position` of every dataset (`sizes`: their windows; `taken`: consumed in `epoch`)."""
    if not len(sizes) == len(counts) == len(taken):
        raise BlendError("one size, quota and count per dataset")
    return [stream_position(int(n), int(q), epoch, int(t)) for n, q, t in zip(sizes, counts, taken)]


def describe_shares(
    names: Sequence[str], weights: Sequence[float], counts: Sequence[int] | np.ndarray, sizes: Sequence[int]
) -> str:
    """One line for the log: each dataset's weight, share of the epoch, windows per epoch and how many
    times that reads it (windows per epoch / windows it has)."""
    length = int(sum(int(q) for q in counts))
    parts = [
        f"{name} weight {weight:g}, {q / max(length, 1):.1%}: {q} of its {n} windows ({q / max(n, 1):.2f}x)"
        for name, weight, q, n in zip(names, weights, (int(q) for q in counts), sizes)
    ]
    return f"blend of {len(parts)} datasets, {length} windows per epoch: " + "; ".join(parts)


def repeat_warnings(
    names: Sequence[str],
    paths: Sequence[str],
    weights: Sequence[float],
    counts: Sequence[int] | np.ndarray,
    sizes: Sequence[int],
    threshold: float = REPEAT_WARNING,
) -> list[str]:
    """One line per dataset read more than `threshold` times per epoch (its quota over its windows),
    naming it, its weight and share, and what to change."""
    length = int(sum(int(q) for q in counts))
    lines = []
    for name, path, weight, q, n in zip(names, paths, weights, (int(q) for q in counts), sizes):
        if n and q / n > threshold:
            lines.append(
                f"blend: {name} ({path}) is read {q / n:.1f} times per epoch (weight {weight:g}, {q / length:.1%} of "
                f"{length} windows: {q}, from its {n} windows), more than {threshold:g}x: a model may memorise it; "
                "lower its weight or samples_per_epoch, or give it more data"
            )
    return lines
