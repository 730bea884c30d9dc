"""Which shards each (rank, loader worker) reads: `load.sharding`, the one place that decides it."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.sharding import RankShards, loader_workers, shard_order, shards_of, shards_per_rank
from bionemo_wds.load.world import Worker, World

SEEDS = st.integers(0, 2**62)
EPOCHS = st.integers(0, 10_000)


@settings(max_examples=300, deadline=None)
@given(
    n_shards=st.integers(1, 200),
    size=st.integers(1, 8),
    workers=st.integers(1, 4),
    seed=SEEDS,
    epoch=EPOCHS,
    shuffle=st.booleans(),
)
def test_every_shard_read_exactly_once_over_all_ranks_and_workers(n_shards, size, workers, seed, epoch, shuffle):
    read: list[int] = []
    for rank in range(size):
        world = World(rank, size)
        mine = [s for w in range(workers) for s in shards_of(n_shards, seed, epoch, shuffle, world, Worker(w, workers))]
        # a rank's workers split exactly the rank's shards, however many workers there are
        assert sorted(mine) == sorted(shards_of(n_shards, seed, epoch, shuffle, world))
        assert len(mine) == shards_per_rank(n_shards, world)
        read += mine
    assert sorted(read) == list(range(n_shards))
    # ranks are balanced: their shares differ by at most one shard
    shares = [shards_per_rank(n_shards, World(r, size)) for r in range(size)]
    assert max(shares) - min(shares) <= 1
    # the loader's worker count (capped at the rank's shards) covers the same shards
    capped: list[int] = []
    for rank in range(size):
        world = World(rank, size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            used = loader_workers("val", n_shards, world, workers, require_data=False)
        capped += [s for w in range(used) for s in shards_of(n_shards, seed, epoch, shuffle, world, Worker(w, used))]
    assert sorted(capped) == list(range(n_shards))


@settings(max_examples=100, deadline=None)
@given(n_shards=st.integers(1, 200), seed=SEEDS, epoch=EPOCHS, shuffle=st.booleans(), noise=st.integers(0, 2**31))
def test_order_is_a_pure_function_of_seed_and_epoch(n_shards, seed, epoch, shuffle, noise):
    first = shard_order(n_shards, seed, epoch, shuffle).tolist()
    # the global random states of numpy, random and torch have no say in it
    np.random.seed(noise)
    random.seed(noise)
    torch.manual_seed(noise)
    np.random.random(noise % 7)
    assert shard_order(n_shards, seed, epoch, shuffle).tolist() == first
    assert sorted(first) == list(range(n_shards))
    if not shuffle:
        assert first == list(range(n_shards))  # file order


def test_order_changes_with_epoch_and_seed_when_shuffled():
    orders = [shard_order(12, 7, epoch, shuffle=True).tolist() for epoch in range(5)]
    assert len({tuple(o) for o in orders}) == 5, orders
    assert shard_order(12, 8, 0, shuffle=True).tolist() != orders[0]
    assert orders[0] != list(range(12))
    for n in (4, 5, 17, 200):
        assert shard_order(n, 7, 0, True).tolist() != shard_order(n, 7, 1, True).tolist(), n
    # what rank 1 of 3 reads changes with the epoch as well
    world = World(1, 3)
    assert shards_of(12, 7, 0, True, world) != shards_of(12, 7, 1, True, world)
    # without shuffle every epoch reads the same order
    assert shard_order(12, 7, 0, False).tolist() == shard_order(12, 7, 3, False).tolist()


def test_order_is_stable_across_processes_and_versions():
    """The ``shard_order`` stream of (seed=7, epoch=0): a change here changes every run's data order."""
    assert shard_order(12, 7, 0, shuffle=True).tolist() == PINNED_ORDER_7_0
    # rank 1 of 3 takes every third shard of that order; its worker 1 of 2 every second of those
    assert shards_of(12, 7, 0, True, World(1, 3), Worker(1, 2)) == PINNED_ORDER_7_0[1::3][1::2]


PINNED_ORDER_7_0 = [3, 2, 5, 0, 10, 11, 8, 6, 4, 9, 7, 1]


def test_loader_workers_caps_at_the_ranks_shards_with_a_warning():
    # 5 shards over 2 ranks: rank 0 reads 3, rank 1 reads 2
    assert loader_workers("train", 5, World(0, 2), 2, require_data=True) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when the request fits
        assert loader_workers("train", 5, World(0, 2), 3, require_data=True) == 3
    with pytest.warns(UserWarning, match=r"rank 1 reads 2 shard\(s\), so it uses 2 loader worker"):
        assert loader_workers("train", 5, World(1, 2), 4, require_data=True) == 2
    assert loader_workers("val", 5, World(1, 2), 0, require_data=False) == 0


def test_loader_workers_refuses_a_train_rank_without_shards():
    with pytest.raises(ValueError, match=r"rank 3 would get no data") as err:
        loader_workers("train", 3, World(3, 4), 2, require_data=True)
    assert "train split has 3 shard(s) for 4 ranks" in str(err.value)
    # ranks that do have a shard are fine in the same world
    assert loader_workers("train", 3, World(2, 4), 1, require_data=True) == 1


def test_loader_workers_allows_an_empty_non_train_rank():
    with pytest.warns(UserWarning, match="rank 3 reads 0 shard"):
        assert loader_workers("val", 3, World(3, 4), 2, require_data=False) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert loader_workers("test", 1, World(1, 2), 0, require_data=False) == 0


def test_rank_shards_stage_follows_the_epoch_state():
    urls = [{"url": f"shard-{i:02d}.tar"} for i in range(12)]
    epoch = EpochState(0)
    stage = RankShards(7, epoch, shuffle=True, world=World(2, 3))
    first = [u["url"] for u in stage(iter(urls))]
    assert first == [f"shard-{i:02d}.tar" for i in shards_of(12, 7, 0, True, World(2, 3))]
    epoch.epoch = 1  # the loader sets it before each pass; the stage reads it then
    second = [u["url"] for u in stage(iter(urls))]
    assert second == [f"shard-{i:02d}.tar" for i in shards_of(12, 7, 1, True, World(2, 3))]
    assert second != first
    unshuffled = RankShards(7, epoch, shuffle=False, world=World(2, 3))
    assert [u["url"] for u in unshuffled(iter(urls))] == [
        "shard-02.tar",
        "shard-05.tar",
        "shard-08.tar",
        "shard-11.tar",
    ]
