"""Which shards a rank reads in an epoch, and which epoch it is.

Shard order is a pure function of (seed, epoch): every rank computes the same permutation and
takes every ``world``-th shard, then webdataset's worker splitter hands every ``workers``-th of
those to each loader worker. The epoch is carried by an `EpochState` the loader sets in the main
process before its workers start, so workers never guess it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import numpy as np
import webdataset as wds

from bionemo_wds.load.pipeline import EpochState


class EpochShardOrder:
    """webdataset ``nodesplitter``: the seeded per-epoch shard order, cut to this rank's share."""

    def __init__(self, seed: int, epoch: EpochState, shuffle: bool, rank: int = 0, world_size: int = 1):
        self.seed, self.epoch, self.shuffle = seed, epoch, shuffle
        self.rank, self.world_size = rank, world_size

    def order(self, n_shards: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(n_shards)
        return np.random.default_rng([self.seed, self.epoch.epoch, 0x5A4D]).permutation(n_shards)

    def __call__(self, src: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        shards = list(src)
        ordered = [shards[i] for i in self.order(len(shards))]
        yield from ordered[self.rank :: self.world_size]


def shards_for_rank(n_shards: int, rank: int, world_size: int) -> int:
    """How many shards a rank gets from `EpochShardOrder` (the same for every epoch)."""
    return len(range(rank, n_shards, world_size))


class EpochLoader(wds.WebLoader):
    """WebLoader whose every pass (``iter``) is one epoch: it sets the shared `EpochState` first.

    The epoch comes from `epoch_source` when that returns a number (the data module passes the
    trainer's current epoch, so Lightning's extra ``iter()`` calls and resumed runs do not shift
    it); otherwise passes are counted in the `EpochState`, which every loader of the split shares.
    `before_pass` runs right before the pass's workers start.
    """

    def __init__(self, *args, epoch_state: EpochState, epoch_source: Callable[[], int | None] | None = None,
                 before_pass: Callable[[], None] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.epoch_state = epoch_state
        self.epoch_source = epoch_source
        self.before_pass = before_pass

    def __iter__(self):
        epoch = self.epoch_source() if self.epoch_source is not None else None
        epoch = self.epoch_state.next_epoch if epoch is None else epoch
        self.epoch_state.epoch = epoch
        self.epoch_state.next_epoch = epoch + 1
        return self._pass()

    def _pass(self):
        # a generator, so before_pass runs when iteration starts, right before the workers fork
        if self.before_pass is not None:
            self.before_pass()
        yield from super().__iter__()
