"""Window arithmetic against Eden's formula, over random lengths, windows, strides, tail modes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.errors import BadInputError
from bionemo_wds.prepare.windows import check_stride, window_counts, window_length, window_table


def eden_count(length: int, window: int, stride: int, tail: str) -> int:
    """The formula written out for one sequence, independently of the vectorised code."""
    if length <= window:
        return 1
    n = 1 + (length - window) // stride
    if tail == "end" and (length - window) % stride:
        n += 1
    return n


geometry = st.integers(1, 400).flatmap(lambda w: st.tuples(st.just(w), st.integers(1, w)))


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5000), min_size=1, max_size=30), wg=geometry, tail=st.sampled_from(["end", "drop"])
)
def test_counts_match_formula(lengths, wg, tail):
    window, stride = wg
    counts = window_counts(np.array(lengths), window, stride, tail)
    assert counts.tolist() == [eden_count(n, window, stride, tail) for n in lengths]


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 3000), min_size=1, max_size=20), wg=geometry, tail=st.sampled_from(["end", "drop"])
)
def test_table_geometry(lengths, wg, tail):
    window, stride = wg
    lengths = np.array(lengths)
    ids = np.arange(len(lengths)) * 7 + 3  # catalog rows need not be 0..n-1
    table = window_table(ids, lengths, window, stride, tail)
    assert len(table) == window_counts(lengths, window, stride, tail).sum()
    for k, seq in enumerate(ids):
        rows = np.flatnonzero(table.seq_index == seq)
        starts, lens = table.start[rows], table.length[rows]
        L = lengths[k]
        assert table.window_index[rows].tolist() == list(range(len(rows)))
        assert (starts >= 0).all() and (starts + lens <= L).all()
        assert (lens == min(L, window)).all()
        assert (np.diff(starts) > 0).all() and (np.diff(starts) <= stride).all()
        covered = np.zeros(L, bool)
        for s, n in zip(starts, lens):
            covered[s : s + n] = True
        if tail == "end":
            assert covered.all(), "tail=end loses no base"
        else:
            assert starts.tolist() == [i * stride for i in range(len(rows))]
            assert (~covered).sum() <= stride - 1


def test_window_leaves_room_for_specials_and_tag():
    assert window_length(8192, 0) == 8189
    assert window_length(8192, 40) == 8149
    with pytest.raises(BadInputError, match="no room"):
        window_length(3, 0)


def test_stride_checks():
    check_stride(8189, 8189, 8192, 0)
    with pytest.raises(BadInputError, match="larger than the window"):
        check_stride(8190, 8189, 8192, 0)
    with pytest.raises(BadInputError, match="at least 1"):
        check_stride(0, 8189, 8192, 0)
