"""Which shards each (rank, loader worker) reads in an epoch: decided here and nowhere else.

Shard order is a pure function of (seed, epoch) (the ``shard_order`` stream; kept in file order
when not shuffled). Rank ``r`` of ``R`` takes every ``R``-th shard of that order, starting at
``r``; worker ``w`` of ``W`` then takes every ``W``-th of the rank's shards. Whole shards go to one
reader, so a rank uses at most as many workers as it has shards (`loader_workers`).

`RankShards` is the webdataset stage that applies this inside the loader; the epoch it reads is
set in the main process before workers start (see `epochs.EpochLoader`), so workers never guess.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.world import Worker, World
from bionemo_wds.seeds import numpy_rng


def shard_order(n_shards: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order in which an epoch visits the shards of a split (the same on every rank)."""
    if not shuffle:
        return np.arange(n_shards)
    return numpy_rng(seed, "shard_order", epoch).permutation(n_shards)


def shards_of(
    n_shards: int, seed: int, epoch: int, shuffle: bool, world: World, worker: Worker | None = None
) -> list[int]:
    """Shard numbers this (rank, worker) reads in `epoch`, in reading order (worker 0 of 1 by default)."""
    worker = worker or Worker()
    mine = shard_order(n_shards, seed, epoch, shuffle)[world.rank :: world.size]
    return mine[worker.id :: worker.count].tolist()


def rank_batches(
    shard_samples: Sequence[int], seed: int, epoch: int, shuffle: bool, world: World, workers: int, batch_size: int
) -> int:
    """Batches a rank yields when it reads every window of its shards once: each loader worker
    (or the main process, with `workers` 0) batches its own shards, its last batch possibly short."""
    count = max(workers, 1)
    total = 0
    for w in range(count):
        mine = shards_of(len(shard_samples), seed, epoch, shuffle, world, Worker(w, count))
        total += -(-sum(shard_samples[i] for i in mine) // batch_size)
    return total


def shards_per_rank(n_shards: int, world: World) -> int:
    """How many shards a rank reads in every epoch."""
    return len(range(world.rank, n_shards, world.size))


def loader_workers(split: str, n_shards: int, world: World, requested: int, require_data: bool) -> int:
    """Loader workers a rank can use: `requested`, capped at its shards (with a warning).

    A rank with no shard is refused when `require_data` (training): it would wait for the other
    ranks at the first gradient all-reduce forever.
    """
    share = shards_per_rank(n_shards, world)
    if share == 0 and require_data:
        raise ValueError(
            f"the {split} split has {n_shards} shard(s) for {world.size} ranks, so rank {world.rank} "
            f"would get no data; prepare with a smaller --samples-per-shard (at least {world.size} shards)"
        )
    if requested > share:
        warnings.warn(
            f"{split}: rank {world.rank} reads {share} shard(s), so it uses {share} loader worker(s) "
            f"instead of num_workers={requested} (each worker reads whole shards)",
            stacklevel=2,
        )
        return share
    return requested


class RankShards:
    """webdataset stage: shard URL dicts in, this (rank, worker)'s shards for the current epoch out."""

    def __init__(self, seed: int, epoch: EpochState, shuffle: bool, world: World):
        self.seed, self.epoch, self.shuffle, self.world = seed, epoch, shuffle, world

    def __call__(self, src: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        shards = list(src)
        for i in shards_of(len(shards), self.seed, self.epoch.epoch, self.shuffle, self.world, Worker.detect()):
            yield shards[i]
