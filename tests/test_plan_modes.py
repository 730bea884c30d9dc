"""The epoch modes (`bionemo_wds.load.plan.modes`): one registry, pure plans that agree with their arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bionemo_wds.errors import OptionError
from bionemo_wds.load.dataset_options import check_options
from bionemo_wds.load.plan import (
    EPOCH_MODES,
    FILLER,
    Consumed,
    EpochSpec,
    RankPlan,
    RecordTable,
    epoch_length,
    epoch_mode,
    rank_plan,
    training_modes,
)
from bionemo_wds.load.plan.mixing import quotas, source_seeds, split_virtual


@st.composite
def specs(draw, size: int | None = None) -> EpochSpec:
    """1..3 datasets of 1..3 shards of records of 1..6 windows, quotas of an epoch of 1..300 samples."""
    tables = [
        RecordTable.from_counts(
            draw(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=8), min_size=1, max_size=3))
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    weights = draw(st.lists(st.floats(0.05, 1.0), min_size=len(tables), max_size=len(tables)))
    length = draw(st.integers(1, 300))
    seed = draw(st.integers(0, 2**31 - 1))
    dp = size or draw(st.integers(1, 3))
    micro = draw(st.integers(1, 5))
    counts = tuple(int(q) for q in quotas(weights, length))
    assume(sum(counts) >= dp * micro)
    return EpochSpec(
        tuple(tables), counts, tuple(source_seeds(seed, len(tables))), seed, 0, dp, micro, mix=7, batches_per_epoch=5
    )


def at_rank(spec: EpochSpec, rank: int) -> EpochSpec:
    return EpochSpec(
        spec.tables, spec.quotas, spec.seeds, spec.seed, rank, spec.size, spec.micro, spec.mix, spec.batches_per_epoch
    )


def test_the_registry_holds_the_three_modes_and_training_takes_two():
    assert set(EPOCH_MODES) >= {"exact", "resampled", "eval"}
    assert training_modes()[:2] == ["exact", "resampled"] and "eval" not in training_modes()
    with pytest.raises(OptionError, match="epoch must be one of exact, resampled, got 'sometimes'"):
        rank_plan("sometimes", EpochSpec((RecordTable.from_counts([[4]]),), (4,), (0,), 0), 0)


@settings(max_examples=80, deadline=None)
@given(specs(), st.integers(0, 5), st.sampled_from(["exact", "resampled", "eval"]))
def test_every_mode_gives_every_rank_the_length_its_arithmetic_says(spec, epoch, name):
    lengths = {epoch_length(name, at_rank(spec, r)) for r in range(spec.size)}
    plans = [rank_plan(name, at_rank(spec, r), epoch) for r in range(spec.size)]
    assert len(lengths) == 1 and {len(p) for p in plans} == lengths  # the same number on every rank
    assert all(p.total_batches == len(p) and p.batches.shape[1:] == (spec.micro,) for p in plans)


@settings(max_examples=80, deadline=None)
@given(specs(), st.integers(0, 5))
def test_an_exact_epoch_reads_each_sample_of_its_sequence_at_most_once_over_all_ranks(spec, epoch):
    plans = [rank_plan("exact", at_rank(spec, r), epoch) for r in range(spec.size)]
    ids = np.concatenate([p.batches.ravel() for p in plans])
    assert len(np.unique(ids)) == len(ids) and FILLER not in ids
    assert len(ids) + plans[0].left_out == spec.samples
    windows, _ = split_virtual(ids, spec.windows)
    sources = np.searchsorted(np.cumsum([t.n_windows for t in spec.tables]), windows, side="right")
    assert np.all(np.bincount(sources, minlength=len(spec.quotas)) <= np.array(spec.quotas))


@settings(max_examples=60, deadline=None)
@given(specs(), st.integers(0, 4), st.data())
def test_an_exact_epoch_resumed_on_the_same_layout_is_the_rest_of_the_plan(spec, epoch, data):
    whole = [rank_plan("exact", at_rank(spec, r), epoch) for r in range(spec.size)]
    done = data.draw(st.integers(0, len(whole[0])), label="batches consumed")
    consumed = [Consumed(spec.size, spec.micro, done)]
    for r in range(spec.size):
        rest = rank_plan("exact", at_rank(spec, r), epoch, consumed)
        assert np.array_equal(rest.batches, whole[r].batches[done:]) and rest.first_batch == done
        assert epoch_length("exact", at_rank(spec, r), consumed) == len(whole[r])


@settings(max_examples=60, deadline=None)
@given(specs(), st.integers(0, 3))
def test_evaluation_reads_every_window_of_every_dataset_once_over_all_ranks(spec, epoch):
    ids = np.concatenate([rank_plan("eval", at_rank(spec, r), epoch).batches.ravel() for r in range(spec.size)])
    assert sorted(ids[ids != FILLER].tolist()) == list(range(spec.windows))


@settings(max_examples=40, deadline=None)
@given(specs(size=1), st.integers(0, 6))
def test_a_resampled_pseudo_epoch_draws_by_its_own_number(spec, pseudo):
    plan = rank_plan("resampled", spec, pseudo)
    _, passes = split_virtual(plan.batches, spec.windows)
    assert len(plan) == spec.batches_per_epoch and np.all(passes == pseudo)


def test_a_registered_mode_is_planned_and_accepted_as_an_option():
    def every_other(spec: EpochSpec, epoch: int, consumed) -> RankPlan:
        ids = np.arange(spec.rank, spec.windows, spec.size, dtype=np.int64)[::2]
        n = len(ids) // spec.micro
        return RankPlan(ids[: n * spec.micro].reshape(n, spec.micro), total_batches=n)

    spec = EpochSpec((RecordTable.from_counts([[5, 5]]),), (10,), (1,), 1, 0, 1, 2)
    with pytest.raises(OptionError, match="every_other"):
        check_options(2, None, "every_other", None, None, None, None)
    epoch_mode("every_other", lambda spec, consumed: spec.windows // 2 // spec.micro)(every_other)
    try:
        check_options(2, None, "every_other", None, None, None, None)  # the option takes it now
        assert rank_plan("every_other", spec, 0).batches.tolist() == [[0, 2], [4, 6]]
        assert epoch_length("every_other", spec) == 2
    finally:
        del EPOCH_MODES["every_other"]
