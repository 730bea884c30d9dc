"""Weighted mixing (`bionemo_wds.load.plan.mixing`): pure properties of quotas, interleaving, streams and plans."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bionemo_wds.load.plan import Consumed, RecordTable, epoch_sequence, remaining_sequence, train_plan
from bionemo_wds.load.plan.mixing import (
    epoch_windows,
    interleave,
    mixed_plan,
    mixed_sequence,
    quotas,
    run_bound,
    source_seeds,
    split_virtual,
    stream_position,
    stream_positions,
    stream_windows,
)

seeds = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 1000)
#: mix=1 (record order only), a block smaller than most tables, and one larger than all of them
mixes = st.sampled_from([1, 5, 1024])
#: positive weights from Evo2's smallest share to far larger ones (they need not sum to 1)
weight_lists = st.lists(st.floats(1e-4, 1e3), min_size=1, max_size=6)


@st.composite
def tables(draw, max_records: int = 12) -> RecordTable:
    """1..3 shards of 1..`max_records` records of 1..8 windows."""
    counts = draw(st.lists(st.lists(st.integers(1, 8), min_size=1, max_size=max_records), min_size=1, max_size=3))
    return RecordTable.from_counts(counts)


@st.composite
def blends(draw) -> tuple[list[RecordTable], np.ndarray]:
    """1..4 tables and their quotas of an epoch of 0..400 slots (so datasets are both subsampled and repeated)."""
    tabs = draw(st.lists(tables(), min_size=1, max_size=4))
    weights = draw(st.lists(st.floats(0.01, 1.0), min_size=len(tabs), max_size=len(tabs)))
    return tabs, quotas(weights, draw(st.integers(0, 400)))


def longest_run(order: np.ndarray) -> int:
    if len(order) == 0:
        return 0
    change = np.flatnonzero(np.diff(order)) + 1
    return int(np.diff(np.concatenate([[0], change, [len(order)]])).max())


def offsets_of(tabs: list[RecordTable]) -> tuple[np.ndarray, int]:
    sizes = np.array([t.n_windows for t in tabs], dtype=np.int64)
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64), int(sizes.sum())


# --- quotas --------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(weight_lists, st.integers(0, 2000))
def test_quotas_sum_to_the_length_and_round_each_share_by_less_than_one(weights, length):
    q = quotas(weights, length)
    assert q.dtype == np.int64 and len(q) == len(weights)
    assert int(q.sum()) == length and np.all(q >= 0)
    exact = [Fraction(w) for w in weights]  # the floats' exact values
    total = sum(exact)
    for quota, w in zip(q.tolist(), exact):
        assert abs(quota - w / total * length) < 1


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(0, 8), st.integers(0, 2000))
def test_quotas_ties_go_to_the_earlier_dataset(data, power, length):
    """Integer weights summing to a power of two: every share is exact in floating point, so a tie
    of remainders is a real one."""
    total = 2**power
    cuts = (
        sorted(data.draw(st.lists(st.integers(1, total - 1), max_size=5, unique=True), label="cuts")) if power else []
    )
    weights = np.diff([0, *cuts, total]).tolist()
    q = quotas(weights, length).tolist()
    floors = [w * length // total for w in weights]
    remainders = [Fraction(w * length, total) - f for w, f in zip(weights, floors)]
    for a in range(len(weights)):
        for b in range(a + 1, len(weights)):
            up_a, up_b = q[a] - floors[a], q[b] - floors[b]
            if remainders[a] >= remainders[b]:  # a larger remainder is rounded up first; a tie: the earlier
                assert up_a >= up_b, (weights, length, q)
            else:
                assert up_b >= up_a, (weights, length, q)


def test_quotas_ties_concrete():
    assert quotas([1, 1, 1], 4).tolist() == [2, 1, 1]
    assert quotas([1, 1, 1], 5).tolist() == [2, 2, 1]
    assert quotas([1, 3], 2).tolist() == [1, 1]  # remainders 0.5 and 0.5
    assert quotas([3, 1], 2).tolist() == [2, 0]
    assert quotas([0.235, 0.0001], 0).tolist() == [0, 0]


def test_quotas_exact_tie_with_integer_weights_goes_to_the_earlier_dataset():
    assert quotas([1, 4, 12, 13], 110).tolist() == [4, 15, 44, 47]


@settings(max_examples=200, deadline=None)
@given(weight_lists, st.integers(0, 2000), st.integers(-20, 20))
def test_quotas_do_not_change_when_every_weight_is_scaled_by_a_power_of_two(weights, length, exponent):
    scaled = [math.ldexp(w, exponent) for w in weights]  # exact: shares are bit for bit the same
    assert np.array_equal(quotas(weights, length), quotas(scaled, length))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=6), st.integers(0, 2000), st.integers(1, 1000))
def test_quotas_do_not_change_when_integer_weights_are_multiplied(weights, length, factor):
    assert np.array_equal(quotas(weights, length), quotas([w * factor for w in weights], length))


def test_quotas_do_not_change_when_weights_are_given_as_tenths():
    assert quotas([0.4, 0.2, 1.7, 0.1], 108).tolist() == quotas([4, 2, 17, 1], 108).tolist()


@pytest.mark.parametrize(
    ("weights", "length"),
    [([], 10), ([0.0, 1.0], 10), ([1.0, -0.5], 10), ([float("nan"), 1.0], 10), ([float("inf"), 1.0], 10), ([1.0], -1)],
)
def test_quotas_refuse_bad_weights_and_lengths(weights, length):
    with pytest.raises(ValueError, match=r"mixing weights|cannot have"):
        quotas(weights, length)


# --- interleaving --------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(weight_lists, st.integers(0, 2000), seeds, epochs)
def test_interleave_holds_every_quota_spread_evenly(weights, length, seed, epoch):
    counts = quotas(weights, length)
    order = interleave(counts, seed, epoch)
    assert order.dtype == np.int64 and len(order) == length
    assert np.array_equal(np.bincount(order, minlength=len(counts)), counts)
    assert np.array_equal(order, interleave(counts, seed, epoch))
    # slot k-1 of the merge sits at some point t of [0, 1): each dataset has within 1 of t*q_d slots up
    # to it, so k is within D (datasets) of t*L and dataset d's count within 1 + D*q_d/L of k*q_d/L
    if length:
        k = np.arange(1, length + 1)
        d_count = len(counts)
        for d, q in enumerate(counts.tolist()):
            prefix = np.cumsum(order == d)
            assert np.all(np.abs(prefix - k * q / length) < 1 + d_count * q / length + 1e-9)
    assert longest_run(order) <= run_bound(counts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=6), seeds, epochs)
def test_interleave_of_any_counts_zero_included(counts, seed, epoch):
    order = interleave(counts, seed, epoch)
    assert np.array_equal(np.bincount(order, minlength=len(counts)), counts)
    assert longest_run(order) <= run_bound(counts)


def test_interleave_depends_on_seed_and_epoch():
    counts = quotas([0.5, 0.3, 0.2], 1000)
    base = interleave(counts, 7, 0)
    assert not np.array_equal(base, interleave(counts, 7, 1))
    assert not np.array_equal(base, interleave(counts, 8, 0))
    assert interleave([], 7, 0).tolist() == [] and interleave([0, 0], 7, 0).tolist() == []


def test_run_bound_concrete():
    assert run_bound([]) == 0 and run_bound([0, 0]) == 0
    assert run_bound([5]) == 5 and run_bound([0, 5, 0]) == 5  # one dataset read: the whole epoch
    assert run_bound([10, 5, 5]) == 3 and run_bound([10, 3]) == 5 and run_bound([2, 2]) == 2
    assert longest_run(interleave([5, 0], 1, 0)) == 5


# --- a dataset's stream of passes ----------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tables(), seeds, st.integers(1, 60), st.integers(1, 8), mixes)
def test_stream_epochs_back_to_back_are_the_passes_back_to_back(table, seed, q, n_epochs, mix):
    n = table.n_windows
    parts = [stream_windows(table, seed, e * q, q, mix) for e in range(n_epochs)]
    ids = np.concatenate([p[0] for p in parts])
    passes = np.concatenate([p[1] for p in parts])
    n_passes = -(-n_epochs * q // n)
    expected = np.concatenate([epoch_sequence(table, seed, p, mix) for p in range(n_passes)])[: n_epochs * q]
    assert np.array_equal(ids, expected)
    assert np.array_equal(passes, np.arange(n_epochs * q) // n)
    # any start, not only a multiple of the quota
    start = q * n_epochs // 3
    ids_s, passes_s = stream_windows(table, seed, start, q, mix)
    full = np.concatenate([epoch_sequence(table, seed, p, mix) for p in range((start + q) // n + 1)])
    assert np.array_equal(ids_s, full[start : start + q])
    assert np.array_equal(passes_s, np.arange(start, start + q) // n)


@settings(max_examples=150, deadline=None)
@given(tables(), seeds, st.data(), mixes)
def test_a_subsampled_dataset_reads_new_windows_until_its_pass_ends(table, seed, data, mix):
    """q <= n: a pass serves n // q whole epochs, each the next q windows of it; a new pass (a new
    order) starts with a new epoch, so no epoch reads a window twice."""
    n = table.n_windows
    q = data.draw(st.integers(1, n), label="quota")
    e = data.draw(st.integers(0, 3 * n), label="epoch")
    per_pass = n // q
    this, this_pass = epoch_windows(table, seed, e, q, mix)
    assert len(np.unique(this)) == q and np.all(this_pass == e // per_pass)
    first = e - e % per_pass  # the pass's first epoch: together its epochs read distinct windows
    read = np.concatenate([epoch_windows(table, seed, f, q, mix)[0] for f in range(first, first + per_pass)])
    assert len(np.unique(read)) == len(read) == per_pass * q
    assert np.array_equal(read, epoch_sequence(table, seed, e // per_pass, mix)[: per_pass * q])


def test_a_subsampled_epoch_never_straddles_two_passes():
    """10 windows, quota 7: the raw stream's epoch 1 would read the old pass's tail and the new pass's
    head (window 0 twice); a subsampled dataset's epoch 1 is pass 1's first 7 windows instead."""
    table = RecordTable.from_counts([[1] * 10])
    straddling, passes = stream_windows(table, 0, 7, 7, mix=1)
    assert passes.tolist() == [0, 0, 0, 1, 1, 1, 1] and len(set(straddling.tolist())) < 7
    ids, passes = epoch_windows(table, 0, 1, 7, mix=1)
    assert passes.tolist() == [1] * 7 and len(set(ids.tolist())) == 7
    assert np.array_equal(ids, epoch_sequence(table, 0, 1, 1)[:7])


@settings(max_examples=150, deadline=None)
@given(tables(max_records=4), seeds, st.data(), mixes)
def test_a_repeated_dataset_reads_every_window_once_per_pass(table, seed, data, mix):
    n = table.n_windows
    q = data.draw(st.integers(n + 1, 5 * n + 3), label="quota")
    e = data.draw(st.integers(0, 20), label="epoch")
    ids, passes = stream_windows(table, seed, e * q, q, mix)
    pairs = set(zip(ids.tolist(), passes.tolist()))
    assert len(pairs) == q  # no window twice in one pass
    for p in range(int(passes.min()) + 1, int(passes.max())):  # passes wholly inside the epoch: all
        assert np.array_equal(np.sort(ids[passes == p]), np.arange(n))
    times = Counter(ids.tolist())
    assert set(times) <= set(range(n))
    assert all(q // n - 1 <= times[w] <= -(-q // n) + 1 for w in range(n))
    if e * q % n == 0:  # starting at a pass's start: as even as can be
        assert all(t in (q // n, -(-q // n)) for t in times.values())


def test_passes_of_a_stream_are_in_different_orders():
    table = RecordTable.from_counts([[4] * 50])  # 200 windows
    ids, passes = stream_windows(table, 3, 0, 600, mix=64)
    orders = [ids[passes == p] for p in range(3)]
    assert all(np.array_equal(np.sort(o), np.arange(200)) for o in orders)
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])


def test_stream_of_an_empty_dataset():
    empty = RecordTable.from_counts([[]])
    ids, passes = stream_windows(empty, 0, 0, 0)
    assert ids.dtype == passes.dtype == np.int64 and len(ids) == len(passes) == 0
    with pytest.raises(ValueError, match="no windows"):
        stream_windows(empty, 0, 0, 1)


# --- the mixed sequence --------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(blends(), seeds, epochs, mixes)
def test_mixed_sequence_decodes_to_each_datasets_stream_in_interleave_order(blend, seed, epoch, mix):
    tabs, counts = blend
    seq = mixed_sequence(tabs, counts, seed, epoch, mix)
    assert seq.dtype == np.int64 and len(seq) == int(counts.sum())
    assert np.array_equal(seq, mixed_sequence(tabs, counts, seed, epoch, mix))
    assert len(np.unique(seq)) == len(seq)  # a (window, pass) at most once in an epoch
    offsets, total = offsets_of(tabs)
    window, passes = split_virtual(seq, total)
    assert np.all((window >= 0) & (window < total) & (passes >= 0))
    source = np.searchsorted(offsets, window, side="right") - 1
    assert np.array_equal(source, interleave(counts, seed, epoch))
    assert np.array_equal(np.bincount(source, minlength=len(tabs)), counts)
    for d, (table, q) in enumerate(zip(tabs, counts.tolist())):
        mine = source == d
        assert np.all(window[mine] - offsets[d] < table.n_windows)
        ids, ps = epoch_windows(table, source_seeds(seed, len(tabs))[d], epoch, q, mix)  # one: the seed itself
        assert np.array_equal(window[mine] - offsets[d], ids)
        assert np.array_equal(passes[mine], ps)
        n = table.n_windows
        expected = [epoch // (n // q)] * q if 0 < q <= n else (np.arange(epoch * q, (epoch + 1) * q) // n).tolist()
        assert passes[mine].tolist() == expected


def test_mixed_sequence_concrete():
    tabs = [RecordTable.from_counts([[3, 2]]), RecordTable.from_counts([[4]])]  # 5 + 4 windows
    counts = quotas([0.6, 0.4], 20)  # 12 and 8: both repeated
    seq = mixed_sequence(tabs, counts, 5, 2)
    window, passes = split_virtual(seq, 9)
    assert np.array_equal(seq, passes * 9 + window)
    first = window < 5
    assert np.count_nonzero(first) == 12 and passes[first].tolist() == [p // 5 for p in range(24, 36)]
    assert passes[~first].tolist() == [p // 4 for p in range(16, 24)]
    assert not np.array_equal(seq, mixed_sequence(tabs, counts, 5, 3))
    assert not np.array_equal(seq, mixed_sequence(tabs, counts, 6, 2))
    with pytest.raises(ValueError, match="no windows"):
        mixed_sequence([tabs[0], RecordTable.from_counts([[]])], counts, 5, 2)


# --- mixed plans: equal batches, exact and elastic resume --------------------------------------


def rank_plans(tabs, counts, seed, epoch, dp, micro, consumed=(), mix=5):
    return [mixed_plan(tabs, counts, seed, epoch, r, dp, micro, consumed, mix) for r in range(dp)]


def flat(plans, first=0, last=None) -> np.ndarray:
    parts = [p.batches[first:last].reshape(-1) for p in plans]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(blends(), seeds, epochs, st.integers(1, 4), st.integers(1, 5), st.data())
def test_mixed_plan_cuts_the_sequence_and_resumes_exactly(blend, seed, epoch, dp, micro, data):
    tabs, counts = blend
    seq = mixed_sequence(tabs, counts, seed, epoch, 5)
    plans = rank_plans(tabs, counts, seed, epoch, dp, micro)
    steps = len(seq) // (dp * micro)
    for p in plans:
        assert p.batches.shape == (steps, micro) and p.total_batches == steps and p.first_batch == 0
        assert p.left_out == len(seq) - steps * dp * micro
    # rank r's run is the r-th contiguous slice; the tail is left out
    assert np.array_equal(np.concatenate([flat(plans), seq[len(seq) - plans[0].left_out :]]), seq)
    k = data.draw(st.integers(0, steps), label="consumed batches")
    resumed = rank_plans(tabs, counts, seed, epoch, dp, micro, [Consumed(dp, micro, k)])
    for a, b in zip(plans, resumed):
        assert np.array_equal(b.batches, a.batches[k:])
        assert b.first_batch == k and b.total_batches == steps and b.left_out == a.left_out


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(blends(), seeds, epochs, st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.integers(1, 5), st.data())
def test_elastic_mixed_resume_reads_exactly_the_unconsumed_windows(blend, seed, epoch, dp_a, m_a, dp_b, m_b, data):
    tabs, counts = blend
    seq = mixed_sequence(tabs, counts, seed, epoch, 5)
    old = rank_plans(tabs, counts, seed, epoch, dp_a, m_a)
    k = data.draw(st.integers(0, len(old[0])), label="consumed batches")
    segments = [Consumed(dp_a, m_a, k)]
    taken = flat(old, 0, k)
    new = rank_plans(tabs, counts, seed, epoch, dp_b, m_b, segments)
    fresh = flat(new)
    rest = remaining_sequence(seq, segments)
    assert np.array_equal(np.concatenate([fresh, rest[len(rest) - new[0].left_out :]]), rest)
    assert Counter(taken.tolist()) + Counter(rest.tolist()) == Counter(seq.tolist())
    assert len(np.unique(np.concatenate([taken, fresh]))) == len(taken) + len(fresh)
    assert all(len(p) == len(new[0]) and p.first_batch == k for p in new)
    assert new[0].left_out < dp_b * m_b


# --- stream positions ----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(blends(), seeds, epochs, st.data())
def test_stream_positions_point_at_each_datasets_next_window(blend, seed, epoch, data):
    tabs, counts = blend
    seq = mixed_sequence(tabs, counts, seed, epoch, 5)
    k = data.draw(st.integers(0, len(seq)), label="slots consumed")
    offsets, total = offsets_of(tabs)
    window, passes = split_virtual(seq, total)
    source = np.searchsorted(offsets, window, side="right") - 1
    taken = np.bincount(source[:k], minlength=len(tabs)).tolist()
    sizes = [t.n_windows for t in tabs]
    positions = stream_positions(sizes, counts, epoch, taken)
    assert positions == [stream_position(n, int(q), epoch, t) for n, q, t in zip(sizes, counts, taken)]
    for d, (table, pos) in enumerate(zip(tabs, positions)):
        ss = source_seeds(seed, len(tabs))[d]
        if taken[d]:  # the windows consumed are the stream's just before the position
            ids, ps = stream_windows(table, ss, pos - taken[d], taken[d], 5)
            mine = source[:k] == d
            assert np.array_equal(window[:k][mine] - offsets[d], ids) and np.array_equal(passes[:k][mine], ps)
        if taken[d] < counts[d]:  # and the next one of the epoch is the stream's at the position
            ids, ps = stream_windows(table, ss, pos, 1, 5)
            nxt = int(np.flatnonzero(source[k:] == d)[0]) + k
            assert window[nxt] - offsets[d] == ids[0] and passes[nxt] == ps[0]
    # a whole epoch consumed stands where the next epoch starts, or (a subsampled dataset whose pass
    # has no room for another epoch) before it: the pass's last n % q windows wait for a later pass
    done = stream_positions(sizes, counts, epoch, counts)
    start = stream_positions(sizes, counts, epoch + 1, [0] * len(counts))
    for n, q, a, b in zip(sizes, counts.tolist(), done, start):
        assert a == b or (q <= n and b - a == n % q and b % n == 0)


@settings(max_examples=60, deadline=None)
@given(tables(), seeds, epochs, mixes, st.data())
def test_a_mixture_of_one_dataset_is_that_datasets_own_epoch(table, seed, epoch, mix, data):
    """One dataset read once per epoch: its mixed plan is the dataset's own train plan (its seed,
    its epoch order), laziness included, with the epoch as the pass of every id."""
    assume(table.n_windows > 0)
    dp = data.draw(st.integers(1, 3), label="dp")
    micro = data.draw(st.integers(1, 4), label="micro")
    assume(table.n_windows >= dp * micro)
    n = table.n_windows
    for rank in range(dp):
        mixed = mixed_plan([table], np.array([n]), seed, epoch, rank, dp, micro, mix=mix)
        own = train_plan(table, seed, epoch, rank, dp, micro, mix=mix)
        window, passes = split_virtual(mixed.batches, n)
        assert np.array_equal(window, own.batches) and np.all(passes == epoch)
        assert np.array_equal(
            mixed.batches.ravel(),
            mixed_sequence([table], [n], seed, epoch, mix)[
                np.arange(rank * len(own) * micro, (rank + 1) * len(own) * micro)
            ],
        )
