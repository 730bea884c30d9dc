"""The computed permutation (`permutation.SeededPermutation`) and prepare's ordered windows
(`prepare.windows.OrderedWindows`): property tests against materialised references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core.permutation import SeededPermutation
from bionemo_wds.prepare.windows import OrderedWindows, WindowTable, window_table


@given(n=st.integers(0, 3000), seed=st.integers(0, 2**63), part=st.integers(0, 5))
@settings(max_examples=150, deadline=None)
def test_a_permutation_is_a_bijection_and_its_inverse_undoes_it(n, seed, part):
    perm = SeededPermutation(n, seed, "test", part)
    order = perm.all()
    assert sorted(order.tolist()) == list(range(n))
    assert np.array_equal(perm.inverse(order), np.arange(n))
    assert np.array_equal(perm(np.arange(n)[::-1]), order[::-1])  # any positions, in any order


@given(n=st.integers(1, 10**15), seed=st.integers(0, 2**63), data=st.data())
@settings(max_examples=100, deadline=None)
def test_any_element_is_computed_alone_at_any_size(n, seed, data):
    perm = SeededPermutation(n, seed, "test")
    positions = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)), dtype=np.int64)
    elements = perm(positions)
    assert ((elements >= 0) & (elements < n)).all()
    assert np.array_equal(perm.inverse(elements), positions)
    assert np.array_equal(perm(positions[:1]), elements[:1])  # the same element alone or among others


def test_the_order_depends_on_seed_and_parts_only():
    a = SeededPermutation(10_000, 7, "window_order", 0).all()
    assert np.array_equal(a, SeededPermutation(10_000, 7, "window_order", 0).all())
    assert not np.array_equal(a, SeededPermutation(10_000, 8, "window_order", 0).all())
    assert not np.array_equal(a, SeededPermutation(10_000, 7, "window_order", 1).all())
    assert not np.array_equal(a, SeededPermutation(10_000, 7, "other", 0).all())


def test_the_order_looks_shuffled():
    """Neighbours are not kept together and every region of the order draws from everywhere."""
    n = 100_000
    order = SeededPermutation(n, 3, "test").all()
    assert np.abs(np.diff(order)).mean() > n / 4  # a uniform shuffle: about n / 3
    assert abs(np.corrcoef(np.arange(n), order)[0, 1]) < 0.02
    first_tenth = order[: n // 10]
    counts = np.bincount(first_tenth * 10 // n, minlength=10)
    assert counts.min() > 0.8 * n / 100  # each tenth of the ids is represented about equally


def test_out_of_range_positions_are_refused():
    perm = SeededPermutation(10, 1, "test")
    with pytest.raises(IndexError, match=r"positions outside \[0, 10\)"):
        perm(np.array([10]))
    with pytest.raises(IndexError, match=r"elements outside \[0, 10\)"):
        perm.inverse(np.array([-1]))


def _tables_equal(a: WindowTable, b: WindowTable) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in WindowTable.__dataclass_fields__)


@given(
    lengths=st.lists(st.integers(1, 5000), min_size=1, max_size=40),
    window=st.integers(1, 600),
    stride_share=st.floats(0.05, 1.0),
    tail=st.sampled_from(["end", "drop"]),
    per_shard=st.integers(1, 200),
    seed=st.integers(0, 1000),
)
@pytest.mark.slow
@settings(max_examples=150, deadline=None)
def test_shards_computed_alone_are_the_full_order_cut(lengths, window, stride_share, tail, per_shard, seed):
    stride = max(1, int(window * stride_share))
    lengths = np.array(lengths, dtype=np.int64)
    rows = np.arange(3, 3 + len(lengths), dtype=np.int64)  # catalog rows need not start at 0

    def order_of(n: int) -> SeededPermutation:
        return SeededPermutation(n, seed, "window_order", 0)

    ordered = OrderedWindows.grid(rows, lengths, window, stride, tail, order_of, per_shard)
    full = window_table(rows, lengths, window, stride, tail).take(order_of(len(ordered)).all())
    assert len(ordered) == len(full)
    assert ordered.n_tokens == int(full.length.sum())
    shards = [ordered.shard(k) for k in range(ordered.n_shards)]
    assert sum(len(s) for s in shards) == len(full)
    for k, shard in enumerate(shards):
        assert _tables_equal(shard, full.take(np.arange(k * per_shard, k * per_shard + len(shard))))


@given(
    n=st.integers(1, 2000), seed=st.integers(0, 2**32), tweaks=st.lists(st.integers(0, 2**40), min_size=2, max_size=4)
)
@settings(max_examples=60, deadline=None)
def test_each_tweak_selects_a_bijection_of_its_own(n, seed, tweaks):
    perm = SeededPermutation(n, seed, "test")
    orders = []
    for tweak in tweaks:
        t = np.full(n, tweak, dtype=np.int64)
        order = perm(np.arange(n), tweak=t)
        assert sorted(order.tolist()) == list(range(n))
        assert np.array_equal(perm.inverse(order, tweak=t), np.arange(n))
        orders.append(order)
    if n > 20 and len(set(tweaks)) > 1:
        assert len({o.tobytes() for o in orders}) == len(set(tweaks))
