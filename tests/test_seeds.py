"""Named random streams (`bionemo_wds.core.seeds`): distinct, stable, and the reverse-complement coin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core.seeds import LOAD_STREAMS, flip_salt, flips, numpy_rng, python_rng, salted_flip, stream_seed

SEEDS = st.integers(-(2**63), 2**63 - 1)
PARTS = st.lists(st.integers(0, 2**32), max_size=4)


def test_stream_seed_is_stable():
    """Pinned: loaders' shuffles (and so every run's data order) are derived from these values."""
    assert stream_seed(42, "shuffle", 0, 0, 0) == 14271454591668377850
    assert stream_seed(7, "shard_order", 3) == 5706354900285377179
    assert flip_salt(7, 0) == 13309476754707697221


@settings(max_examples=200, deadline=None)
@given(seed=SEEDS, parts=PARTS)
def test_stream_seed_differs_across_stream_names(seed, parts):
    values = [stream_seed(seed, name, *parts) for name in (*LOAD_STREAMS, "other")]
    assert len(set(values)) == len(values)
    assert all(0 <= v < 2**64 for v in values)
    assert values == [stream_seed(seed, name, *parts) for name in (*LOAD_STREAMS, "other")]


@settings(max_examples=200, deadline=None)
@given(seed=SEEDS, parts=PARTS, other=PARTS)
def test_stream_seed_differs_across_parts(seed, parts, other):
    if parts != other:
        assert stream_seed(seed, "shuffle", *parts) != stream_seed(seed, "shuffle", *other)


def test_stream_seed_tells_apart_what_a_plain_sum_or_concatenation_would_not():
    base = stream_seed(1, "shuffle", 0, 1)
    assert base != stream_seed(1, "shuffle", 1, 0)  # order of parts
    assert base != stream_seed(1, "shuffle", 0, 1, 0)  # a trailing zero part
    assert base != stream_seed(0, "shuffle", 1, 1)  # seed is not a part
    assert stream_seed(1, "shuffle") != stream_seed(1, "shuffle", 0)
    assert stream_seed(1, "shuffle") != stream_seed(2, "shuffle")


def test_generators_follow_their_stream():
    a, b = python_rng(3, "shuffle", 1), python_rng(3, "shuffle", 1)
    assert [a.random() for _ in range(5)] == [b.random() for _ in range(5)]
    assert python_rng(3, "shuffle", 1).random() != python_rng(3, "shuffle", 2).random()
    order = numpy_rng(3, "shard_order", 0).permutation(50).tolist()
    assert order == numpy_rng(3, "shard_order", 0).permutation(50).tolist()
    assert order != numpy_rng(3, "shard_order", 1).permutation(50).tolist()


def test_stream_seed_takes_any_64_bit_seed():
    assert 0 <= stream_seed(2**63, "shuffle", 0) < 2**64
    assert stream_seed(2**64 - 1, "shuffle", 0) != stream_seed(2**63, "shuffle", 0)
    assert stream_seed(-1, "shuffle", 0) == stream_seed(2**64 - 1, "shuffle", 0)  # modulo 2**64, as flip_salt


KEYS = [f"NODE_{i}_length_{1000 + 37 * i}/{j}" for i in range(50) for j in range(40)]  # 2000 keys


def test_flips_edges():
    assert not any(flips(k, 0.0, 9, 3) for k in KEYS)
    assert not any(flips(k, -0.5, 9, 3) for k in KEYS)
    assert all(flips(k, 1.0, 9, 3) for k in KEYS)
    assert all(flips(k, 1.5, 9, 3) for k in KEYS)
    # the tiniest non-zero probability flips (almost) nothing, the largest below 1 (almost) everything
    assert sum(flips(k, 1e-12, 9, 3) for k in KEYS) == 0
    assert sum(flips(k, 1 - 1e-12, 9, 3) for k in KEYS) == len(KEYS)


@pytest.mark.parametrize("p", [0.05, 0.25, 0.5, 0.9])
def test_flip_rate_is_about_p(p):
    rate = np.mean([flips(k, p, 11, 0) for k in KEYS])
    # binomial(2000, p): 5 standard deviations at most
    assert abs(rate - p) < 5 * np.sqrt(p * (1 - p) / len(KEYS)), rate


def test_flips_are_a_pure_function_of_key_seed_and_epoch():
    base = [flips(k, 0.5, 11, 0) for k in KEYS]
    assert base == [flips(k, 0.5, 11, 0) for k in KEYS]
    assert base == [salted_flip(k, 0.5, flip_salt(11, 0)) for k in KEYS]
    for other in ([flips(k, 0.5, 11, 1) for k in KEYS], [flips(k, 0.5, 12, 0) for k in KEYS]):
        # a new epoch or seed draws new coins: about half of them change
        changed = np.mean([a != b for a, b in zip(base, other)])
        assert 0.4 < changed < 0.6, changed
    # nested: a window flipped at p is flipped at every larger p (one uniform per key)
    low, high = [flips(k, 0.3, 11, 0) for k in KEYS], [flips(k, 0.6, 11, 0) for k in KEYS]
    assert all(h for lo, h in zip(low, high) if lo)
