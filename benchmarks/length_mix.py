"""How well an epoch order mixes: each global batch's length mix beside the corpus's, files per block.

Pure functions over arrays of per-sample facts (the length of the sequence a window came from, the
file it came from), in the order a rank reads them:

- `length_edges` cuts the corpus's windows into length buckets (deciles of the sequence length of
  every window, so each bucket holds about a tenth of the windows);
- `global_batches` lays the ranks' streams side by side into global batches (step ``t`` takes each
  rank's ``t``-th micro-batch, whole steps only, as data-parallel training does);
- `batch_distances` is, per global batch, the total variation distance between its histogram over
  the buckets and the corpus's (half the sum of the absolute differences of the shares: 0 when the
  batch holds each bucket in the corpus's proportion, 1 when it holds only buckets the corpus lacks);
- `distinct_per_block` counts the distinct files in each block of consecutive samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Length buckets: deciles of the corpus's windows.
BUCKETS = 10


def length_edges(lengths: np.ndarray, buckets: int = BUCKETS) -> np.ndarray:
    """Inner bucket edges of the sample lengths `lengths` (their quantiles; repeated edges once)."""
    inner = np.quantile(np.asarray(lengths, dtype=np.float64), np.arange(1, buckets) / buckets)
    return np.unique(inner)


def bucket_of(lengths: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The bucket of each length: 0 below the first edge, ``len(edges)`` at or above the last."""
    return np.searchsorted(edges, np.asarray(lengths), side="right")


def shares(buckets: np.ndarray, n_buckets: int) -> np.ndarray:
    """The share of the samples in each bucket (last axis: one histogram per row)."""
    buckets = np.atleast_2d(buckets)
    counts = np.stack([np.bincount(row, minlength=n_buckets) for row in buckets])
    return counts / buckets.shape[1]


def global_batches(streams: Sequence[np.ndarray], micro_batch: int) -> np.ndarray:
    """(steps, ranks * micro_batch): step t holds each rank's t-th micro-batch of its stream."""
    steps = min(len(s) // micro_batch for s in streams) if streams else 0
    return np.concatenate([np.asarray(s)[: steps * micro_batch].reshape(steps, micro_batch) for s in streams], axis=1)


def batch_distances(batches: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """Total variation distance of each batch's bucket histogram (`batches`: bucket per sample, one row
    per batch) from the corpus's bucket shares `corpus`."""
    if not len(batches):
        return np.zeros(0)
    return 0.5 * np.abs(shares(batches, len(corpus)) - corpus).sum(axis=1)


def distinct_per_block(values: np.ndarray, size: int = 1000) -> np.ndarray:
    """Distinct values in each whole block of `size` consecutive entries of `values`."""
    k = len(values) // size
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    blocks = np.sort(np.asarray(values)[: k * size].reshape(k, size), axis=1)
    return 1 + np.count_nonzero(np.diff(blocks, axis=1), axis=1)


def order_metrics(
    streams_length: Sequence[np.ndarray],
    streams_file: Sequence[np.ndarray],
    edges: np.ndarray,
    corpus: np.ndarray,
    micro_batch: int,
    block: int = 1000,
) -> dict[str, float]:
    """An order's figures: the length-mix distance of its global batches (mean, 95th percentile) and
    the distinct files per `block` consecutive samples of a rank (mean and min over every rank's blocks)."""
    batches = global_batches([bucket_of(s, edges) for s in streams_length], micro_batch)
    distance = batch_distances(batches, corpus)
    files = np.concatenate([distinct_per_block(s, block) for s in streams_file])
    return {
        "batches": float(len(batches)),
        "distance_mean": float(distance.mean()) if len(distance) else float("nan"),
        "distance_p95": float(np.percentile(distance, 95)) if len(distance) else float("nan"),
        "files_per_block_mean": float(files.mean()) if len(files) else float("nan"),
        "files_per_block_min": float(files.min()) if len(files) else float("nan"),
    }
