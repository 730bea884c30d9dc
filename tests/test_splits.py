"""Split math: disjoint, complete, seeded, and stratified by length."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.errors import BadInputError
from bionemo_wds.prepare.splits import length_buckets, split_from_lists, stratified_split

ratios_st = st.tuples(*[st.floats(0, 10) for _ in range(3)]).filter(lambda r: sum(r) > 0.01)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300_000), min_size=3, max_size=200),
    ratios=ratios_st,
    seed=st.integers(0, 2**32 - 1),
)
def test_every_sequence_in_exactly_one_wanted_split(lengths, ratios, seed):
    lengths = np.array(lengths)
    assignment = stratified_split(lengths, ratios, seed)
    assert assignment.shape == lengths.shape
    wanted = {i for i, r in enumerate(ratios) if r / sum(ratios) > 0}
    assert set(assignment.tolist()) <= wanted
    assert set(assignment.tolist()) == wanted, "every split with a positive ratio gets a sequence"
    assert (stratified_split(lengths, ratios, seed) == assignment).all(), "seeded"


@settings(max_examples=100, deadline=None)
@given(n=st.integers(300, 2000), seed=st.integers(0, 1000))
def test_base_shares_close_to_ratios_per_bucket(n, seed):
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(np.log(200), np.log(50_000), n)).astype(np.int64)
    ratios = np.array([0.8, 0.1, 0.1])
    assignment = stratified_split(lengths, ratios, seed)
    buckets = length_buckets(lengths)
    for b in np.unique(buckets):
        in_b = buckets == b
        total = lengths[in_b].sum()
        for split in range(3):
            got = lengths[in_b & (assignment == split)].sum() / total
            # greedy by deficit: off by at most one sequence's share of the bucket
            assert abs(got - ratios[split]) <= lengths[in_b].max() / total + 1e-9


def test_seed_changes_assignment():
    lengths = np.full(100, 5000)
    assert (stratified_split(lengths, [0.8, 0.1, 0.1], 1) != stratified_split(lengths, [0.8, 0.1, 0.1], 2)).any()


def test_fewer_sequences_than_splits():
    with pytest.raises(BadInputError, match="2 sequence"):
        stratified_split(np.array([100, 200]), [0.8, 0.1, 0.1], 0)
    assert stratified_split(np.array([100]), [1, 0, 0], 0).tolist() == [0]


def test_split_lists():
    names = ["a", "b", "c", "d"]
    got = split_from_lists(names, {"train": ["a", "c"], "test": ["d"]})
    assert got.tolist() == [0, -1, 0, 2]
    with pytest.raises(BadInputError, match="'z'"):
        split_from_lists(names, {"train": ["z"]})
    with pytest.raises(BadInputError, match="both train and val"):
        split_from_lists(names, {"train": ["a"], "val": ["a"]})
