"""Load-time sample tables of a sequence layout (`load.plan.samples`) and their epoch order (`UnitOrder`).

Pure arithmetic over sequence lengths, so every property is checked over random lengths, windows,
strides, tail rules, offsets, seeds and passes: the fixed grid against prepare's own window table,
the random grid's count, bounds and per-pass draws, packing's exact cover of every base, and the
computed epoch order being a permutation.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bionemo_wds.errors import OptionError
from bionemo_wds.load import spans
from bionemo_wds.load.plan.order import UnitOrder, epoch_order
from bionemo_wds.load.plan.samples import (
    PACK_BLOCK,
    UNIT,
    PackedSamples,
    SequenceTable,
    WindowSamples,
    pack_documents,
    packed_bound,
)
from bionemo_wds.load.plan.types import DEFAULT_MIX
from bionemo_wds.prepare import options
from bionemo_wds.prepare.windows import window_counts, window_table

FAST = settings(max_examples=150, deadline=None)


def seq_table(lengths: list[int], tag_bytes: list[int] | None = None, piece: int = 100) -> SequenceTable:
    lengths_a = np.asarray(lengths, dtype=np.int64)
    tags = np.zeros(len(lengths_a), np.int64) if tag_bytes is None else np.asarray(tag_bytes, dtype=np.int64)
    return SequenceTable(lengths_a, tags, piece)


def every_document(table: WindowSamples | PackedSamples, pass_: int):
    """The documents of every sample id of `table` in pass `pass_`."""
    ids = np.arange(table.n_windows, dtype=np.int64)
    return table.documents(ids, np.full(len(ids), pass_, dtype=np.int64))


def cover(lengths: list[int], docs) -> list[np.ndarray]:
    """How many documents hold each base of each sequence."""
    counts = [np.zeros(n, dtype=np.int64) for n in lengths]
    for s, a, n in zip(docs.seq.tolist(), docs.start.tolist(), docs.length.tolist()):
        counts[s][a : a + n] += 1
    return counts


def by_sequence(docs, n_seqs: int) -> list[list[tuple[int, int]]]:
    """(start, length) of each sequence's windows, in id order."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(n_seqs)]
    for s, a, n in zip(docs.seq.tolist(), docs.start.tolist(), docs.length.tolist()):
        out[s].append((a, n))
    return out


# --- WindowSamples ---------------------------------------------------------------------------------

lengths_st = st.lists(st.integers(1, 1500), min_size=1, max_size=25)
geometry = st.integers(1, 300).flatmap(lambda w: st.tuples(st.just(w), st.integers(1, w)))
tails = st.sampled_from(["end", "drop"])
seeds = st.integers(0, 2**63 - 1)
passes = st.integers(0, 10_000)


@FAST
@given(lengths=lengths_st, wg=geometry, tail=tails, seed=seeds, pass_=passes)
def test_fixed_windows_are_prepares(lengths, wg, tail, seed, pass_):
    """Fixed offsets: the windows `prepare` cuts (`window_table`), in the same order, in any pass."""
    window, stride = wg
    table = WindowSamples(seq_table(lengths), window, stride, tail, "fixed", seed)
    ref = window_table(np.arange(len(lengths)), np.asarray(lengths), window, stride, tail)
    assert table.counts.tolist() == window_counts(np.asarray(lengths), window, stride, tail).tolist()
    assert table.n_windows == len(ref)
    docs = every_document(table, pass_)
    assert docs.sample.tolist() == list(range(len(ref)))
    assert docs.seq.tolist() == ref.seq_index.tolist()
    assert docs.start.tolist() == ref.start.tolist()
    assert docs.length.tolist() == ref.length.tolist()


@FAST
@given(lengths=lengths_st, wg=geometry, tail=tails, seed=seeds, pass_=passes)
def test_random_windows(lengths, wg, tail, seed, pass_):
    """Random offsets: prepare's count per sequence in every pass; every window inside its sequence,
    full length unless the sequence is shorter; windows of a sequence distinct, on a grid of `stride`
    shifted by an offset below the sequence's room; with tail "end" the sequence's last base covered."""
    window, stride = wg
    table = WindowSamples(seq_table(lengths), window, stride, tail, "random", seed)
    expected = window_counts(np.asarray(lengths), window, stride, tail)
    for p in (pass_, pass_ + 1):
        docs = every_document(table, p)
        per_seq = by_sequence(docs, len(lengths))
        assert [len(w) for w in per_seq] == expected.tolist()
        for s, (n, wins) in enumerate(zip(lengths, per_seq)):
            starts = [a for a, _ in wins]
            assert all(0 <= a and a + m <= n for a, m in wins)
            assert all(m == min(n, window) for _, m in wins)
            assert len(set(starts)) == len(starts)
            if n <= window:
                assert wins == [(0, n)]
                continue
            offset = starts[0]
            assert 0 <= offset < table.room[s]
            regular = starts[:-1] if tail == "end" and (n - window) % stride else starts
            assert regular == [offset + k * stride for k in range(len(regular))]
            if tail == "end":
                assert max(a + m for a, m in wins) == n


@FAST
@given(lengths=lengths_st, wg=geometry, tail=tails, seed=seeds, pass_=passes)
def test_random_offsets_are_per_pass_draws(lengths, wg, tail, seed, pass_):
    """The same (seed, pass) gives the same windows (another table object: nothing cached); a
    sequence with room for more than one offset does not keep its offset over 32 passes (a false
    failure needs 31 equal draws of at least two values: below 1e-9)."""
    window, stride = wg
    table = WindowSamples(seq_table(lengths), window, stride, tail, "random", seed)
    again = WindowSamples(seq_table(lengths), window, stride, tail, "random", seed)
    a, b = every_document(table, pass_), every_document(again, pass_)
    assert a.start.tolist() == b.start.tolist() and a.seq.tolist() == b.seq.tolist()
    firsts = np.stack([every_document(table, p).start[table.first[:-1]] for p in range(pass_, pass_ + 32)])
    for s in np.flatnonzero(table.room > 1).tolist():
        assert len(set(firsts[:, s].tolist())) > 1, f"sequence {s} (room {table.room[s]}) kept its offset"
    for s in np.flatnonzero(table.room == 1).tolist():
        assert set(firsts[:, s].tolist()) == {0}


def test_random_offsets_depend_on_seed():
    lengths = [5500] * 20  # room for 501 offsets each
    a = every_document(WindowSamples(seq_table(lengths), 1000, 1000, "drop", "random", 1), 0)
    b = every_document(WindowSamples(seq_table(lengths), 1000, 1000, "drop", "random", 2), 0)
    assert a.start.tolist() != b.start.tolist()


@FAST
@given(lengths=lengths_st, window=st.integers(1, 300), tail=tails, offsets=st.sampled_from(["fixed", "random"]))
def test_stride_equal_window_covers(lengths, window, tail, offsets):
    """stride == window. "drop": windows of a sequence never overlap (every base at most once); with
    fixed offsets exactly its first ``count * window`` bases are covered (the rest, fewer than a
    window, is dropped). "end": with fixed offsets every base is covered, once except the overlap of
    the end window with the grid's last one (bases ``[L - W, (count - 1) W)`` twice, when W does not
    divide L); with random offsets the bases before the offset are not covered, no base more than
    twice, and the end is."""
    table = WindowSamples(seq_table(lengths), window, window, tail, offsets, 7)
    counts = cover(lengths, every_document(table, 3))
    for n, c, k in zip(lengths, counts, table.counts.tolist()):
        if n <= window:
            assert (c == 1).all()
            continue
        if tail == "drop":
            assert c.max() == 1
            assert int(c.sum()) == k * window
            if offsets == "fixed":
                assert (c[: k * window] == 1).all() and (c[k * window :] == 0).all()
        elif offsets == "fixed":
            twice = np.zeros(n, dtype=bool)
            if n % window:
                twice[n - window : (k - 1) * window] = True
            assert (c == np.where(twice, 2, 1)).all()
        else:
            first = int(np.flatnonzero(c)[0])
            assert (c[:first] == 0).all() and (c[first:] >= 1).all() and c.max() <= 2
            assert c[-1] == 1


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 2_000_000_000), min_size=1, max_size=4),
    window=st.integers(1 << 16, 1 << 21),
    stride_part=st.floats(0.5, 1.0),
    tail=tails,
    seed=seeds,
    pass_=passes,
)
def test_long_windows(lengths, window, stride_part, tail, seed, pass_):
    """Windows up to 2 M bases over sequences up to 2 Gbp: the fixed grid is prepare's, and random
    offsets keep the count and stay inside the sequence (no overflow in the offset draws)."""
    stride = max(1, int(window * stride_part))
    fixed = WindowSamples(seq_table(lengths), window, stride, tail, "fixed", seed)
    ref = window_table(np.arange(len(lengths)), np.asarray(lengths), window, stride, tail)
    docs = every_document(fixed, pass_)
    assert docs.start.tolist() == ref.start.tolist() and docs.length.tolist() == ref.length.tolist()
    shifted = every_document(WindowSamples(seq_table(lengths), window, stride, tail, "random", seed), pass_)
    assert shifted.seq.tolist() == docs.seq.tolist() and shifted.length.tolist() == docs.length.tolist()
    ends = np.asarray(lengths)[shifted.seq]
    assert (shifted.start >= 0).all() and (shifted.start + shifted.length <= ends).all()


def test_window_options_refused():
    seqs = seq_table([100])
    with pytest.raises(OptionError, match="stride"):
        WindowSamples(seqs, 10, 11)
    with pytest.raises(OptionError, match="stride"):
        WindowSamples(seqs, 10, 0)
    with pytest.raises(OptionError, match="tail"):
        WindowSamples(seqs, 10, 5, tail="pad")
    with pytest.raises(OptionError, match="window_offset"):
        WindowSamples(seqs, 10, 5, offsets="jitter")


@settings(max_examples=300, deadline=None)
@given(seq_length=st.integers(4, 1 << 21), max_tag=st.integers(0, 40))
def test_default_stride_is_prepares(seq_length, max_tag):
    """Without a stride the load-time windows take prepare's default (`default_stride`, capped at the window)."""
    window = seq_length - 3 - max_tag
    assume(window >= 1)
    params = SimpleNamespace(seq_length=seq_length, max_tag_bytes=max_tag, tail="end")
    table = spans.Cutting(seq_length=seq_length).table("data/x", params, seq_table([window + 5]), 0)  # type: ignore[arg-type]
    assert isinstance(table, WindowSamples)
    assert table.window == window
    assert table.stride == options.PrepareOptions(seq_length=seq_length).effective_stride(window)


# --- PackedSamples ---------------------------------------------------------------------------------


@st.composite
def catalogs(draw):
    """Lengths (many short sequences, some long ones), seq_length, and headers: 3 + tag bytes with
    control tags, 2 without."""
    seq_length = draw(st.integers(16, 600))
    short = st.integers(1, max(1, seq_length // 4))
    lengths = draw(st.lists(st.one_of(short, short, st.integers(1, 4 * seq_length)), min_size=1, max_size=40))
    if draw(st.booleans()):
        tags = draw(st.lists(st.integers(0, 4), min_size=len(lengths), max_size=len(lengths)))
        headers = [3 + t for t in tags]
    else:
        tags, headers = [0] * len(lengths), [2] * len(lengths)
    return lengths, tags, np.asarray(headers, dtype=np.int64), seq_length


def packed_table(lengths, tags, headers, seq_length, offsets, seed) -> PackedSamples:
    return PackedSamples(seq_table(lengths, tags), seq_length, headers, offsets, seed)


def sample_tokens(docs, headers: np.ndarray, n: int) -> np.ndarray:
    """Tokens each of `n` samples holds (bases plus each document's header)."""
    return np.bincount(docs.sample, weights=docs.length + headers[docs.seq], minlength=n).astype(np.int64)


@settings(max_examples=120, deadline=None)
@given(cat=catalogs(), offsets=st.sampled_from(["fixed", "random"]), seed=seeds, pass_=passes)
def test_packing_covers_every_base_once(cat, offsets, seed, pass_):
    """Every pass: every base of every sequence in exactly one document; no sample over seq_length;
    whole samples exactly full; a packed sample other than the pass's last wastes at most one header's
    room; the pass's packing fits the pass-independent count, the rest being empty samples."""
    lengths, tags, headers, seq_length = cat
    table = packed_table(lengths, tags, headers, seq_length, offsets, seed)
    n = table.n_windows
    for p in (pass_, pass_ + 1, pass_ + 2):
        assert table.n_windows == n
        docs = every_document(table, p)
        assert all((c == 1).all() for c in cover(lengths, docs))
        assert (docs.length > 0).all()
        assert (np.diff(docs.sample) >= 0).all()
        tokens = sample_tokens(docs, headers, n)
        assert (tokens <= seq_length).all()
        assert (tokens[: table.n_full] == seq_length).all()
        whole = docs.sample < table.n_full
        assert (np.bincount(docs.sample[whole], minlength=table.n_full) == 1).all()
        bins = table.packing(p).n_bins
        assert bins <= table.n_packed
        packed = tokens[table.n_full :]
        assert (packed[:bins] > 0).all() and (packed[bins:] == 0).all()
        assert (seq_length - packed[: max(0, bins - 1)] <= int(headers.max())).all()


@settings(max_examples=120, deadline=None)
@given(cat=catalogs(), offsets=st.sampled_from(["fixed", "random"]), seed=seeds, pass_=passes)
def test_packing_is_a_function_of_seed_and_pass(cat, offsets, seed, pass_):
    """The same (seed, pass) gives the same documents: from another table object, and from this one
    after its cache of packings moved on to other passes. Whole samples: fixed offsets start at
    multiples of the sample's bases; random ones at the pass's offset of the sequence, at most its rest."""
    lengths, tags, headers, seq_length = cat
    table = packed_table(lengths, tags, headers, seq_length, offsets, seed)
    first = every_document(table, pass_)
    for p in (pass_ + 1, pass_ + 2, pass_ + 3):
        table.packing(p)
    for other in (table, packed_table(lengths, tags, headers, seq_length, offsets, seed)):
        again = every_document(other, pass_)
        for col in ("sample", "seq", "start", "length"):
            assert getattr(again, col).tolist() == getattr(first, col).tolist()
    whole = first.sample < table.n_full
    seq, start = first.seq[whole], first.start[whole]
    k = first.sample[whole] - table.first[seq]
    offset = start - k * table.full_length[seq]
    if offsets == "fixed":
        assert (offset == 0).all()
    else:
        assert ((offset >= 0) & (offset <= table.rest[seq])).all()


def pack_sets(table: PackedSamples, pass_: int) -> set[frozenset[tuple[int, int]]]:
    """Which documents (sequence, start) share each packed sample of a pass."""
    docs = every_document(table, pass_)
    out: dict[int, set[tuple[int, int]]] = {}
    for i, s, a in zip(docs.sample.tolist(), docs.seq.tolist(), docs.start.tolist()):
        if i >= table.n_full:
            out.setdefault(i, set()).add((s, a))
    return {frozenset(v) for v in out.values()}


def metagenome(n: int, seed: int = 0) -> list[int]:
    """Contig lengths as the issue's catalog: log-normal, median 3 kb, sigma 1, at least 200 bp."""
    lengths = np.random.default_rng(seed).lognormal(np.log(3000), 1.0, n).astype(np.int64)
    return lengths[lengths >= 200].tolist()


@pytest.mark.parametrize("offsets", ["fixed", "random"])
@pytest.mark.parametrize("tag", [0, 8])
def test_metagenome_packing_pads_under_one_percent(offsets, tag):
    """Padding share of every token slot of a pass (full, packed and empty samples) at 8192 tokens.

    The bound: a packed sample other than the last closes with fewer than one header (h = 3 + tag) of
    room, and `packed_bound` leaves at most ``2 + 2 h K / (S - 2 h)`` empty samples for K packed
    ones, so padding is below ``3 h / (S - 2 h) + 2 / K``: 0.2% + 0.2% for h = 11, S = 8192 and the
    ~1400 packed samples of these 4000 contigs (about 0.15% is measured); 1% holds with room to spare."""
    lengths = metagenome(4000)
    seq_length = 8192
    headers = np.full(len(lengths), 3 + tag, dtype=np.int64)
    table = packed_table(lengths, [tag] * len(lengths), headers, seq_length, offsets, 11)
    assert table.n_packed > 1000
    for p in range(3):
        docs = every_document(table, p)
        assert all((c == 1).all() for c in cover(lengths, docs))
        real = int((docs.length + headers[docs.seq]).sum())
        padding = 1 - real / (table.n_windows * seq_length)
        assert 0 <= padding < 0.01, f"pass {p}: {padding:.4%} padding"


def test_packing_changes_between_passes():
    """Which documents share a sample changes every pass (and with the seed); each pass's samples
    take documents from at most two blocks of `PACK_BLOCK` in storage order, besides the last, shorter
    block (with fixed
    offsets the documents are the sequences' rests, one per sequence, so storage order is sequence order)."""
    lengths = metagenome(3000, seed=1)
    headers = np.full(len(lengths), 3, dtype=np.int64)
    table = packed_table(lengths, [0] * len(lengths), headers, 8192, "fixed", 5)
    sets = [pack_sets(table, p) for p in range(3)]
    other_seed = pack_sets(packed_table(lengths, [0] * len(lengths), headers, 8192, "fixed", 6), 0)
    for a, b in ((0, 1), (1, 2), (0, 2)):
        shared = len(sets[a] & sets[b])
        assert shared < len(sets[a]) // 10, f"passes {a} and {b} share {shared} of {len(sets[a])} samples"
    assert len(sets[0] & other_seed) < len(sets[0]) // 10
    rank = {s: i for i, s in enumerate(np.flatnonzero(table.rest > 0).tolist())}  # storage rank of each rest
    last = (len(rank) - 1) // PACK_BLOCK  # the last block may be shorter than a sample's documents
    for group in sets[0]:
        blocks = {rank[s] // PACK_BLOCK for s, _ in group} - {last}
        assert len(blocks) <= 2


def test_packed_refuses_headers_that_leave_no_room():
    with pytest.raises(OptionError, match="seq_length 10"):
        PackedSamples(seq_table([5]), 10, np.array([5], dtype=np.int64))
    with pytest.raises(OptionError, match="window_offset"):
        PackedSamples(seq_table([5]), 100, np.array([3], dtype=np.int64), offsets="jitter")


# --- pack_documents --------------------------------------------------------------------------------

PACK_CASES = [
    # (headers, lengths, seq_length, expected (bin_doc, bin_offset)), worked by hand
    ([], [], 10, ([], [])),
    ([2, 2], [3, 3], 10, ([0], [0])),  # 5 + 5 tokens: exactly full
    ([2, 2, 2], [3, 3, 3], 10, ([0, 2], [0, 0])),  # full after two: the third opens a sample
    ([2, 2], [5, 6], 10, ([0, 1], [0, 1])),  # 7 used, room 3 = header + 1: one base of doc 1 placed, 5 next
    ([3, 3], [3, 4], 10, ([0, 1], [0, 1])),  # room 4 = header + 1: cut after one base
    ([3, 3], [5, 4], 10, ([0, 1], [0, 0])),  # room 2 < header + 1: closed (2 padding), doc 1 whole next
    ([2, 2], [7, 4], 10, ([0, 1], [0, 0])),  # room 1: closed
    ([5, 2], [3, 1], 10, ([0, 1], [0, 0])),  # room 2 < doc 1's header + 1 (its own header counts)
    ([5, 2], [2, 2], 10, ([0, 1], [0, 1])),  # room 3 = doc 1's header + 1: cut after one base
    ([2], [25], 10, ([0, 0, 0, 0], [0, 8, 16, 24])),  # one long document: 8 bases per sample, then 1
    ([2, 2, 2], [1, 14, 1], 10, ([0, 1, 1], [0, 5, 13])),  # 3 used; doc 1: 5 here, 8 next, 1 + doc 2 last
]


@pytest.mark.parametrize("headers, lengths, seq_length, expected", PACK_CASES)
def test_pack_documents_by_hand(headers, lengths, seq_length, expected):
    bin_doc, bin_offset = pack_documents(
        np.asarray(headers, dtype=np.int64), np.asarray(lengths, dtype=np.int64), seq_length
    )
    assert (bin_doc.tolist(), bin_offset.tolist()) == expected


def unpack(bin_doc: np.ndarray, bin_offset: np.ndarray, lengths: list[int]) -> list[list[tuple[int, int, int]]]:
    """(document, first base, bases) of each sample from the packing's sample starts."""
    starts = [*zip(bin_doc.tolist(), bin_offset.tolist()), (len(lengths), 0)]
    out = []
    for (d0, o0), (d1, o1) in itertools.pairwise(starts):
        pieces = []
        for d in range(d0, min(d1, len(lengths) - 1) + 1):
            lo = o0 if d == d0 else 0
            hi = o1 if d == d1 else lengths[d]
            if hi > lo:
                pieces.append((d, lo, hi - lo))
        out.append(pieces)
    return out


@settings(max_examples=300, deadline=None)
@given(
    docs=st.lists(st.tuples(st.integers(2, 8), st.integers(1, 120)), max_size=40),
    seq_length=st.integers(17, 200),
)
def test_pack_documents_properties(docs, seq_length):
    """Any documents in any order: each base placed once, in order; no sample over seq_length; a
    sample closes with less room than the next document's header plus one base; the count within
    `packed_bound`."""
    headers = np.asarray([h for h, _ in docs], dtype=np.int64)
    lengths = [n for _, n in docs]
    bin_doc, bin_offset = pack_documents(headers, np.asarray(lengths, dtype=np.int64), seq_length)
    samples = unpack(bin_doc, bin_offset, lengths)
    placed = [piece for sample in samples for piece in sample]
    expected_next = {d: 0 for d in range(len(lengths))}
    for d, lo, n in placed:
        assert lo == expected_next[d]
        expected_next[d] = lo + n
    assert [expected_next[d] for d in range(len(lengths))] == lengths
    tokens = [sum(n + int(headers[d]) for d, _, n in sample) for sample in samples]
    assert all(0 < t <= seq_length for t in tokens)
    for nxt, t in zip(samples[1:], tokens):
        d, lo, _ = nxt[0]
        if lo == 0:  # the next document did not start here: no room for its header and a base
            assert seq_length - t < int(headers[d]) + 1
        else:  # cut: this sample is full
            assert t == seq_length
    total = int(headers.sum()) + sum(lengths)
    assert len(samples) <= packed_bound(total, seq_length, int(headers.max(initial=0)))


def test_packed_bound():
    assert packed_bound(0, 100, 3) == 0
    assert packed_bound(1, 100, 3) == 2
    assert packed_bound(94, 100, 3) == 2
    assert packed_bound(95, 100, 3) == 3


# --- UnitOrder -------------------------------------------------------------------------------------

orders = st.tuples(st.integers(0, 3000), st.integers(1, 40), st.integers(1, 300), seeds, st.integers(0, 1000))


@FAST
@given(args=orders)
def test_unit_order_is_a_permutation(args):
    n, unit, mix, seed, epoch = args
    order = UnitOrder(n, unit, seed, epoch, mix)
    ids = order.range(0, n)
    assert len(order) == n
    assert sorted(ids.tolist()) == list(range(n))
    again = UnitOrder(n, unit, seed, epoch, mix)
    assert again(np.arange(n)).tolist() == ids.tolist()
    lo, hi = n // 3, min(n, 2 * n // 3 + 1)
    assert order.range(lo, hi).tolist() == ids[lo:hi].tolist()
    positions = np.arange(n)[::-3][::-1].copy()
    assert order(positions).tolist() == ids[positions].tolist()


@FAST
@given(
    n=st.integers(400, 3000), unit=st.integers(1, 20), mix=st.integers(1, 300), seed=seeds, epoch=st.integers(0, 1000)
)
def test_unit_order_changes_with_epoch(n, unit, mix, seed, epoch):
    """At least 20 units: two epochs' (or seeds') orders agree only by a negligible chance."""
    assume(n // unit >= 20)
    a = UnitOrder(n, unit, seed, epoch, mix).range(0, n)
    b = UnitOrder(n, unit, seed, epoch + 1, mix).range(0, n)
    c = UnitOrder(n, unit, seed + 1, epoch, mix).range(0, n)
    assert a.tolist() != b.tolist() and a.tolist() != c.tolist()


@FAST
@given(n=st.integers(0, 3000), unit=st.integers(1, 20), blocks=st.integers(1, 20), seed=seeds, epoch=st.integers(0, 50))
def test_units_stay_within_a_mixing_block(n, unit, blocks, seed, epoch):
    """When `mix` is a multiple of `unit` (the defaults: `DEFAULT_MIX` = 1024 and `UNIT` = 16), the
    ids at the positions of one mixing block are whole units: a unit's ids (``u*unit ..``, the last
    unit possibly shorter) all lie in the same block of `mix` positions. Without mixing (mix = 1)
    each unit's ids come consecutively, in order."""
    mix = unit * blocks
    ids = UnitOrder(n, unit, seed, epoch, mix).range(0, n)
    block_of = np.empty(n, dtype=np.int64)
    block_of[ids] = np.arange(n) // mix
    units = np.arange(n) // unit
    for u in np.unique(units).tolist():
        assert len(set(block_of[units == u].tolist())) == 1
    plain = UnitOrder(n, unit, seed, epoch, 1).range(0, n)
    for lo in range(0, n, unit):
        run = plain[lo : lo + unit]
        assert run[0] % unit == 0 and run.tolist() == list(range(run[0], run[0] + len(run)))


def test_epoch_order_of_load_time_tables():
    """`epoch_order` of a load-time table is its `UnitOrder` of `UNIT` ids, mixed in `DEFAULT_MIX` blocks."""
    assert DEFAULT_MIX % UNIT == 0
    windows = WindowSamples(seq_table([5000, 30, 12000]), 100, 90)
    packed = PackedSamples(seq_table(metagenome(300)), 8192, np.full(len(metagenome(300)), 3, dtype=np.int64))
    for table in (windows, packed):
        order = epoch_order(table, 3, 2)
        assert isinstance(order, UnitOrder) and len(order) == table.n_windows
        ref = UnitOrder(table.n_windows, UNIT, 3, 2, DEFAULT_MIX)
        assert order.range(0, table.n_windows).tolist() == ref.range(0, table.n_windows).tolist()
