"""The epoch plan (`bionemo_wds.load.plan`): pure properties over random record tables."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bionemo_wds.load.plan import (
    DEFAULT_MIX,
    FILLER,
    UNIT_BATCHES,
    Consumed,
    EpochOrder,
    RecordTable,
    epoch_sequence,
    eval_plan,
    remaining_sequence,
    resampled_plan,
    train_batches,
    train_plan,
    worker_units,
)


@st.composite
def tables(draw) -> RecordTable:
    """1..300 shards of 1..20 records of 1..16 windows. Small tables are drawn record by record (so
    hypothesis shrinks them); large ones from a drawn numpy seed."""
    if draw(st.booleans()):
        counts = draw(
            st.lists(st.lists(st.integers(1, 16), min_size=1, max_size=20), min_size=1, max_size=8),
        )
        return RecordTable.from_counts(counts)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_shards = draw(st.integers(1, 300))
    per_shard = rng.integers(1, 21, size=n_shards)
    windows = rng.integers(1, 17, size=int(per_shard.sum())).astype(np.int64)
    return RecordTable(np.repeat(np.arange(n_shards, dtype=np.int64), per_shard), windows)


seeds = st.integers(0, 2**31 - 1)
epochs = st.integers(0, 1000)
dp_sizes = st.integers(1, 8)
micros = st.integers(1, 8)
#: mix=1 (record order only), block sizes smaller than most tables, and the default
mixes = st.sampled_from([1, 5, 64, DEFAULT_MIX])


def all_ranks(table, seed, epoch, dp, micro, consumed=(), mix=DEFAULT_MIX):
    return [train_plan(table, seed, epoch, r, dp, micro, consumed, mix=mix) for r in range(dp)]


def ids_of(plans, first=0, last=None) -> np.ndarray:
    """Window ids of batches [first:last] of every rank, concatenated."""
    parts = [p.batches[first:last].reshape(-1) for p in plans]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


# --- the record table and the epoch sequence ---------------------------------------------------


def test_record_table_numbers_windows_record_major():
    table = RecordTable.from_counts([[3, 1], [2]])
    assert table.shard.tolist() == [0, 0, 1] and table.windows.tolist() == [3, 1, 2]
    assert table.first.tolist() == [0, 3, 4, 6] and table.n_windows == 6 and len(table) == 3
    record, row = table.locate(np.array([0, 2, 3, 4, 5]))
    assert record.tolist() == [0, 0, 1, 2, 2] and row.tolist() == [0, 2, 0, 0, 1]
    with pytest.raises(ValueError, match="different lengths"):
        RecordTable(np.zeros(2, np.int64), np.ones(3, np.int64))


@settings(max_examples=150, deadline=None)
@given(tables(), seeds, epochs, mixes)
def test_epoch_sequence_is_a_permutation_of_every_window(table, seed, epoch, mix):
    seq = epoch_sequence(table, seed, epoch, mix)
    assert seq.dtype == np.int64
    assert np.array_equal(np.sort(seq), np.arange(table.n_windows))
    if mix == 1:  # records in a seeded order, each record's windows consecutive and in order
        record, row = table.locate(seq)
        assert sorted(record[row == 0].tolist()) == list(range(len(table)))
        last = row[:-1] == table.windows[record[:-1]] - 1
        assert np.all(np.where(last, row[1:] == 0, (record[1:] == record[:-1]) & (row[1:] == row[:-1] + 1)))


# --- training: every window at most once, equal batches ------------------------------------------


@settings(max_examples=200, deadline=None)
@given(tables(), seeds, epochs, dp_sizes, micros, mixes)
def test_train_plan_reads_every_window_at_most_once_in_equal_batches(table, seed, epoch, dp, micro, mix):
    plans = all_ranks(table, seed, epoch, dp, micro, mix=mix)
    n = table.n_windows
    steps = n // (micro * dp)
    for p in plans:
        assert p.batches.dtype == np.int64
        assert p.batches.shape == (steps, micro)  # every rank the same number of batches
        assert p.first_batch == 0 and p.total_batches == steps == len(p)
        assert p.left_out == plans[0].left_out
    ids = ids_of(plans)
    assert len(np.unique(ids)) == len(ids)  # no window twice, over all ranks
    assert ids.min(initial=0) >= 0 and ids.max(initial=0) < max(n, 1)  # no filler, no stray id
    left_out = plans[0].left_out
    assert left_out == n - sum(len(p) * micro for p in plans)
    assert 0 <= left_out < micro * dp


@settings(max_examples=100, deadline=None)
@given(tables(), seeds, epochs, dp_sizes, micros)
def test_train_plan_is_a_function_of_seed_and_epoch(table, seed, epoch, dp, micro):
    first = all_ranks(table, seed, epoch, dp, micro)
    again = all_ranks(table, seed, epoch, dp, micro)
    for a, b in zip(first, again):
        assert np.array_equal(a.batches, b.batches) and a.left_out == b.left_out


def test_epochs_and_seeds_give_different_plans():
    table = RecordTable.from_counts([[8] * 10 for _ in range(50)])  # 4,000 windows
    base = [p.batches for p in all_ranks(table, 11, 0, 4, 8)]
    for seed, epoch in ((11, 1), (12, 0)):
        other = [p.batches for p in all_ranks(table, seed, epoch, 4, 8)]
        assert all(a.shape == b.shape for a, b in zip(base, other))
        assert not all(np.array_equal(a, b) for a, b in zip(base, other))
        # not merely rotated between ranks: rank 0's first batch is a different set of windows
        assert set(base[0][0].tolist()) != set(other[0][0].tolist())
    # the order really is mixed: neither the stored order nor whole records in a row
    seq = epoch_sequence(table, 11, 0)
    assert not np.array_equal(seq, np.arange(table.n_windows))
    record, _ = table.locate(seq[:DEFAULT_MIX])
    assert np.count_nonzero(np.diff(record)) > DEFAULT_MIX // 2


def test_invalid_rank_layout_is_refused():
    table = RecordTable.from_counts([[4, 4]])
    with pytest.raises(ValueError, match="rank 2 is not within a size of 2"):
        train_plan(table, 0, 0, 2, 2, 1)
    with pytest.raises(ValueError, match="micro_batch_size must be at least 1"):
        eval_plan(10, 0, 1, 0)


# --- resuming ------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tables(), seeds, epochs, dp_sizes, micros, mixes, st.data())
def test_resume_with_the_same_layout_continues_the_uninterrupted_plan(table, seed, epoch, dp, micro, mix, data):
    full = all_ranks(table, seed, epoch, dp, micro, mix=mix)
    steps = len(full[0])
    s = data.draw(st.integers(0, steps), label="consumed batches")
    resumed = all_ranks(table, seed, epoch, dp, micro, [Consumed(dp, micro, s)], mix=mix)
    for a, b in zip(full, resumed):
        assert np.array_equal(b.batches, a.batches[s:])
        assert b.first_batch == s and b.total_batches == steps
        assert b.left_out == a.left_out


@settings(max_examples=200, deadline=None)
@given(tables(), seeds, epochs, dp_sizes, micros, dp_sizes, micros, mixes, st.data())
def test_elastic_resume_reads_no_window_twice_and_loses_none(table, seed, epoch, dp_a, m_a, dp_b, m_b, mix, data):
    old = all_ranks(table, seed, epoch, dp_a, m_a, mix=mix)
    s = data.draw(st.integers(0, len(old[0])), label="consumed batches")
    consumed = ids_of(old, 0, s)  # the first s batches of every old rank
    new = all_ranks(table, seed, epoch, dp_b, m_b, [Consumed(dp_a, m_a, s)], mix=mix)
    fresh = ids_of(new)
    both = np.concatenate([consumed, fresh])
    assert len(np.unique(both)) == len(both)
    n_new = len(new[0])
    assert all(len(p) == n_new and p.left_out == new[0].left_out for p in new)
    assert all(p.first_batch == s and p.total_batches == s + n_new for p in new)
    assert len(consumed) + len(fresh) + new[0].left_out == table.n_windows
    assert new[0].left_out < m_b * dp_b


@settings(max_examples=100, deadline=None)
@given(tables(), seeds, epochs, st.lists(st.tuples(dp_sizes, micros, st.floats(0, 1)), min_size=1, max_size=4))
def test_a_chain_of_resumes_with_changing_layouts_reads_no_window_twice(table, seed, epoch, layouts):
    """An epoch restarted several times, each time with another data-parallel size and micro batch."""
    segments: list[Consumed] = []
    taken = []
    for dp, micro, fraction in layouts:
        plans = all_ranks(table, seed, epoch, dp, micro, segments)
        s = int(fraction * len(plans[0]))
        taken.append(ids_of(plans, 0, s))
        segments.append(Consumed(dp, micro, s))
    last = all_ranks(table, seed, epoch, 3, 2, segments)
    every = np.concatenate([*taken, ids_of(last)])
    assert len(np.unique(every)) == len(every)
    assert len(every) + last[0].left_out == table.n_windows
    assert last[0].first_batch == sum(seg.batches for seg in segments)
    # the loader's length comes from arithmetic alone: it must agree with the plan
    assert train_batches(table.n_windows, 3, 2, segments) == last[0].total_batches
    # remaining_sequence is exactly what was not taken
    rest = remaining_sequence(epoch_sequence(table, seed, epoch), segments)
    assert sorted(rest.tolist()) == sorted(set(range(table.n_windows)) - set(np.concatenate(taken).tolist()))


def test_a_resume_position_past_the_epoch_is_refused():
    table = RecordTable.from_counts([[4] * 5])  # 20 windows: 2 batches per rank at dp 2, micro 5
    train_plan(table, 0, 0, 0, 2, 5, [Consumed(2, 5, 2)])
    with pytest.raises(ValueError, match="3 batches were consumed"):
        train_plan(table, 0, 0, 0, 2, 5, [Consumed(2, 5, 3)])
    with pytest.raises(ValueError, match="invalid resume segment"):
        train_plan(table, 0, 0, 0, 2, 5, [Consumed(0, 5, 1)])


# --- evaluation ----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3000), dp_sizes, micros)
def test_eval_plan_reads_every_window_exactly_once_in_equal_batches(n, dp, micro):
    plans = [eval_plan(n, r, dp, micro) for r in range(dp)]
    n_batches = len(plans[0])
    assert n_batches == -(-n // (micro * dp))  # the fewest batches that hold every window
    real = []
    for p in plans:
        assert p.batches.shape == (n_batches, micro) and p.total_batches == n_batches
        flat = p.batches.reshape(-1)
        mine = flat[flat != FILLER]
        assert np.all(flat[: len(mine)] == mine)  # filler only pads the end of a rank
        real.append(mine)
    ids = np.concatenate(real)
    assert np.array_equal(ids, np.arange(n))  # every window once, in stored order over the ranks


@pytest.mark.parametrize(("n", "dp", "micro"), [(1, 2, 1), (1, 8, 1), (3, 8, 4), (5, 6, 1), (7, 8, 8)])
def test_eval_with_fewer_windows_than_ranks(n, dp, micro):
    plans = [eval_plan(n, r, dp, micro) for r in range(dp)]
    assert all(len(p) == 1 for p in plans)
    ids = np.concatenate([p.batches.reshape(-1) for p in plans])
    assert sorted(ids[ids != FILLER].tolist()) == list(range(n))
    assert np.count_nonzero(ids == FILLER) == dp * micro - n


# --- resampled epochs ----------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(tables(), seeds, st.integers(0, 20), dp_sizes, micros, st.integers(1, 60))
def test_resampled_plan_has_the_pseudo_epoch_on_every_rank(table, seed, pseudo, dp, micro, per_epoch):
    steps = table.n_windows // (micro * dp)
    assume(steps > 0)
    plans = [resampled_plan(table, seed, pseudo, r, dp, micro, per_epoch) for r in range(dp)]
    again = [resampled_plan(table, seed, pseudo, r, dp, micro, per_epoch) for r in range(dp)]
    for p, q in zip(plans, again):
        assert p.batches.shape == (per_epoch, micro) and p.total_batches == per_epoch
        assert np.array_equal(p.batches, q.batches)
    # the pseudo-epoch is the stream of exact epochs back to back, cut at pseudo * per_epoch
    for r, p in enumerate(plans):
        start = pseudo * per_epoch
        exact = {
            e: train_plan(table, seed, e, r, dp, micro).batches
            for e in range(start // steps, 2 + (start + per_epoch) // steps)
        }
        stream = [exact[(start + i) // steps][(start + i) % steps] for i in range(per_epoch)]
        assert np.array_equal(p.batches, np.stack(stream))
    # within one pseudo-epoch that fits in an exact epoch, no window twice over ranks
    if per_epoch <= steps and (pseudo * per_epoch) % steps + per_epoch <= steps:
        ids = ids_of(plans)
        assert len(np.unique(ids)) == len(ids)


def test_resampled_plan_of_too_few_windows_is_refused():
    with pytest.raises(ValueError, match="cannot fill one global batch"):
        resampled_plan(RecordTable.from_counts([[3]]), 0, 0, 0, 2, 2, 5)


# --- loader workers ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 300), st.integers(1, 4), st.sampled_from([1, 3, UNIT_BATCHES]))
def test_worker_units_deal_every_batch_to_exactly_one_worker(n_batches, workers, unit):
    dealt = [worker_units(n_batches, w, workers, unit) for w in range(workers)]
    every = [b for part in dealt for b in part]
    assert sorted(every) == list(range(n_batches))  # the union, and disjoint
    for w, part in enumerate(dealt):
        assert part == sorted(set(part))  # strictly increasing
        assert all((b // unit) % workers == w for b in part)  # whole units, dealt round robin
    assert worker_units(n_batches, 0, 0, unit) == list(range(n_batches))  # the main process: all


# --- scale ---------------------------------------------------------------------------------------


def test_planning_100k_shards_is_fast_and_small():
    """100,000 shards x 4 records x 4 windows: one rank's plan in under a second and 200 MB."""
    started = time.perf_counter()
    n_shards = 100_000
    table = RecordTable(np.repeat(np.arange(n_shards, dtype=np.int64), 4), np.full(4 * n_shards, 4, np.int64))
    train_plan(table, 0, 0, 0, 8, 8)  # warm-up: imports, numpy's first allocations
    for consumed in ([], [Consumed(4, 8, 10_000)]):
        t0 = time.perf_counter()
        plan = train_plan(table, 1, 3, 5, 8, 8, consumed)
        seconds = time.perf_counter() - t0
        assert len(plan) == (1_600_000 - 10_000 * 32 * bool(consumed)) // 64
        assert seconds < 1.0, f"planning took {seconds:.2f} s"
        del plan
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            plan = train_plan(table, 1, 3, 5, 8, 8, consumed)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        assert peak < 200e6, f"planning took {peak / 1e6:.0f} MB"
        del plan
    assert time.perf_counter() - started < 5.0


# --- the computed epoch order ---------------------------------------------------------------------


def reference_remaining(sequence: np.ndarray, consumed) -> np.ndarray:
    """What remains of an epoch after resume segments, by slicing the materialised sequence (the
    definition `remaining_runs` computes as runs of positions)."""
    for seg in consumed:
        per_rank = len(sequence) // (seg.micro * seg.dp_size) * seg.micro
        runs = [sequence[r * per_rank : (r + 1) * per_rank] for r in range(seg.dp_size)]
        taken = seg.batches * seg.micro
        sequence = np.concatenate([*(run[taken:] for run in runs), sequence[seg.dp_size * per_rank :]])
    return sequence


@given(table=tables(), seed=st.integers(0, 2**32), epoch=st.integers(0, 50), mix=st.sampled_from([1, 7, 64, 1024]))
@settings(max_examples=60, deadline=None)
def test_the_epoch_order_is_records_in_a_seeded_order_mixed_within_blocks(table, seed, epoch, mix):
    """Built the long way: every record's windows in the record order, then each block of `mix`
    positions shuffled by its own permutation (the last, shorter block by another)."""
    order = EpochOrder(table, seed, epoch, mix)
    first = table.first
    by_records = np.concatenate([np.arange(first[r], first[r + 1]) for r in order.records])
    assert sorted(order.records.tolist()) == list(range(len(table)))
    expected = by_records.copy()
    n, full = table.n_windows, table.n_windows // mix * mix
    if mix > 1:
        for b in range(full // mix):
            shuffle = order.slots.block(np.arange(mix), tweak=np.full(mix, b))
            expected[b * mix : (b + 1) * mix] = by_records[b * mix + shuffle]
        expected[full:] = by_records[full + order.slots.tail.all()]
    assert np.array_equal(epoch_sequence(table, seed, epoch, mix), expected)
    positions = np.arange(n)[::-3]
    assert np.array_equal(order(positions), expected[positions])  # any positions alone
    scattered = np.random.default_rng(seed).choice(n, size=min(n, 40), replace=False)  # not one stretch
    assert np.array_equal(order(scattered), expected[scattered])


@given(table=tables(), seed=st.integers(0, 99), data=st.data())
@settings(max_examples=60, deadline=None)
def test_a_rank_computes_exactly_its_part_of_the_materialised_epoch(table, seed, data):
    segments = []
    for _ in range(data.draw(st.integers(0, 3))):
        dp, micro = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
        left = len(reference_remaining(epoch_sequence(table, seed, 2), segments))
        segments.append(Consumed(dp, micro, data.draw(st.integers(0, left // (dp * micro)))))
    dp, micro = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 5))
    rest = reference_remaining(epoch_sequence(table, seed, 2), segments)
    assert np.array_equal(remaining_sequence(epoch_sequence(table, seed, 2), segments), rest)
    per_rank = len(rest) // (dp * micro) * micro
    for rank in range(dp):
        plan = train_plan(table, seed, 2, rank, dp, micro, segments)
        assert np.array_equal(plan.batches.reshape(-1), rest[rank * per_rank : (rank + 1) * per_rank])
        assert plan.left_out == len(rest) - dp * per_rank


def test_a_rank_plan_never_holds_the_epoch():
    """16M windows in 1M records, 64 ranks: one rank's plan allocates for the records and its own
    windows, far less than the 128 MB an array of the epoch's window ids would take."""
    n_records = 1_000_000
    table = RecordTable(np.repeat(np.arange(n_records // 100, dtype=np.int64), 100), np.full(n_records, 16, np.int64))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        plan = train_plan(table, 1, 0, 3, 64, 8)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert plan.batches.size == 16 * n_records // 64
    assert peak < 16 * n_records * 8 / 2, f"planning one rank took {peak / 1e6:.0f} MB"
