"""Homology (`bionemo_wds.homology`): the inverted-index join of shared hashes against a brute-force
pairwise intersection, the connected components and clusters, the ANI estimate, the exact canonical
k-mers against a pure-Python reference, the sketch file round trip; the join's counts and
containments against sourmash's own on the bundled genomes.

`prepare --group-by similarity:T` end to end is in `test_similarity_prepare.py`."""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np
import pytest
from conftest import KLEBSIELLA, LAMBDA, read_fasta
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.errors import BadInputError
from bionemo_wds.homology import similarity
from bionemo_wds.homology.kmers import canonical_kmers, containment
from bionemo_wds.homology.similarity import (
    ani,
    clusters,
    clusters_with,
    components,
    matches,
    matches_both_ways,
    near_identical_pairs,
    shared_hashes,
)
from bionemo_wds.homology.sketch import Sketches, SketchParams, sketch_hashes

sourmash = pytest.importorskip("sourmash")

#: Hash values the random sketches draw from: few, so sketches overlap; the largest uint64 included.
POOL = np.concatenate(
    [np.random.default_rng(7).integers(0, 2**63, size=23, dtype=np.uint64), [np.uint64(2**64 - 1)]]
).astype(np.uint64)

#: Each sequence's hashes as indices into POOL (a set: a sketch holds a hash once).
hash_sets = st.lists(st.sets(st.integers(0, len(POOL) - 1), max_size=12), max_size=9)


def sketches_of(sets: list[set[int]], params: SketchParams | None = None) -> Sketches:
    hashes = [np.sort(POOL[sorted(s)]) for s in sets]
    names = [f"s{i}" for i in range(len(sets))]
    return Sketches.build(params or SketchParams(), names, [100 * len(s) for s in sets], hashes)


def brute_pairs(a: list[set[int]], b: list[set[int]] | None, min_shared: int) -> dict[tuple[int, int], int]:
    """(i, j) -> shared hashes, every pair compared, the way the join must count."""
    if b is None:
        pairs = itertools.combinations(range(len(a)), 2)
        right = a
    else:
        pairs = itertools.product(range(len(a)), range(len(b)))
        right = b
    out = {}
    for i, j in pairs:
        n = len(a[i] & right[j])
        if n >= min_shared:
            out[(i, j)] = n
    return out


def as_dict(pairs: similarity.SharedHashes) -> dict[tuple[int, int], int]:
    got = {(int(i), int(j)): int(n) for i, j, n in zip(pairs.left, pairs.right, pairs.shared)}
    assert len(got) == len(pairs.left)  # each pair once
    return got


# ---------------------------------------------------------------------------------------------
# shared_hashes: the inverted-index join


@settings(max_examples=150, deadline=None)
@given(sets=hash_sets, min_shared=st.integers(1, 3), step=st.integers(1, 40))
def test_self_join_equals_brute_force(sets, min_shared, step):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(similarity, "PAIRS_PER_STEP", step)  # many steps of the join, summed per pair
        pairs = shared_hashes(sketches_of(sets), None, min_shared)
    got = as_dict(pairs)
    assert got == brute_pairs(sets, None, min_shared)
    assert all(i < j for i, j in got)
    assert pairs.common_hashes == 0


@settings(max_examples=150, deadline=None)
@given(a=hash_sets, b=hash_sets, min_shared=st.integers(1, 3), step=st.integers(1, 40))
def test_cross_join_equals_brute_force(a, b, min_shared, step):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(similarity, "PAIRS_PER_STEP", step)
        pairs = shared_hashes(sketches_of(a), sketches_of(b), min_shared)
    assert as_dict(pairs) == brute_pairs(a, b, min_shared)


@settings(max_examples=100, deadline=None)
@given(a=hash_sets, b=hash_sets, limit=st.integers(1, 4))
def test_hashes_held_too_often_pair_nobody_and_are_counted(a, b, limit):
    """A hash held by more than MAX_OCCURRENCE sequences on either side is left out of the count."""
    held_a = {h: sum(h in s for s in a) for s in a for h in s}
    held_b = {h: sum(h in s for s in b) for s in b for h in s}
    common = {h for h in held_a.keys() & held_b.keys() if held_a[h] > limit or held_b[h] > limit}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(similarity, "MAX_OCCURRENCE", limit)
        pairs = shared_hashes(sketches_of(a), sketches_of(b), 1)
    assert pairs.common_hashes == len(common)
    assert as_dict(pairs) == brute_pairs([s - common for s in a], [s - common for s in b], 1)


@settings(max_examples=100, deadline=None)
@given(sets=hash_sets, limit=st.integers(1, 4), step=st.integers(1, 10))
def test_a_self_join_leaves_out_hashes_held_too_often(sets, limit, step):
    held = {h: sum(h in s for s in sets) for s in sets for h in s}
    common = {h for h, n in held.items() if n > limit}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(similarity, "MAX_OCCURRENCE", limit)
        mp.setattr(similarity, "PAIRS_PER_STEP", step)
        pairs = shared_hashes(sketches_of(sets), None, 1)
    assert pairs.common_hashes == len(common)
    assert as_dict(pairs) == brute_pairs([s - common for s in sets], None, 1)


def test_empty_sets_and_empty_sketches_join_to_nothing():
    none = sketches_of([])
    empties = sketches_of([set(), set(), set()])
    some = sketches_of([{1, 2, 3}, set(), {1, 2}])
    for a, b in [(none, None), (empties, None), (none, some), (some, none), (empties, some)]:
        assert len(shared_hashes(a, b, 1).left) == 0
    assert as_dict(shared_hashes(some, None, 1)) == {(0, 2): 2}


def test_sketches_of_other_parameters_are_not_compared():
    with pytest.raises(ValueError, match="cannot be compared"):
        shared_hashes(sketches_of([{1}]), sketches_of([{1}], SketchParams(ksize=31)))


# ---------------------------------------------------------------------------------------------
# components, clusters


def bfs_components(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Each node's component's smallest node, by breadth-first search."""
    adjacent: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        adjacent[u].append(v)
        adjacent[v].append(u)
    label = [-1] * n
    for root in range(n):  # in order: the first node reached of a component is its smallest
        if label[root] >= 0:
            continue
        label[root] = root
        todo = deque([root])
        while todo:
            for nxt in adjacent[todo.popleft()]:
                if label[nxt] < 0:
                    label[nxt] = root
                    todo.append(nxt)
    return label


graphs = st.integers(1, 40).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))
)


@settings(max_examples=200, deadline=None)
@given(graph=graphs)
def test_components_equal_breadth_first_search(graph):
    n, edges = graph
    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    assert components(n, u, v).tolist() == bfs_components(n, edges)


def test_components_of_a_long_chain_given_backwards():
    """The worst order for label propagation: each edge links the next-lower node."""
    n = 5000
    u = np.arange(n - 1, 0, -1)
    assert components(n, u, u - 1).tolist() == [0] * n
    assert components(3, np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == [0, 1, 2]


@settings(max_examples=150, deadline=None)
@given(graph=graphs, tied=st.data())
def test_clusters_with_keeps_tied_rows_together(graph, tied):
    n, edges = graph
    ties = tied.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    got = clusters_with(n, u, v, np.array(ties)).tolist()
    tie_edges = [(i, j) for i in range(n) for j in range(i + 1, n) if ties[i] == ties[j]]
    assert got == bfs_components(n, edges + tie_edges)
    # string ties (sequence ids) behave as integers do
    assert clusters_with(n, u, v, np.array([f"g{t}" for t in ties])).tolist() == got


def partition(labels: list[int]) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, set()).add(i)
    return {frozenset(g) for g in groups.values()}


@settings(max_examples=100, deadline=None)
@given(sets=hash_sets, order=st.randoms(use_true_random=False), threshold=st.sampled_from([0.9, 0.95, 0.99, 1.0]))
def test_clusters_do_not_depend_on_the_order_of_the_sequences(sets, order, threshold):
    perm = list(range(len(sets)))
    order.shuffle(perm)
    plain = clusters(sketches_of(sets), threshold, 1)
    shuffled = clusters(sketches_of([sets[p] for p in perm]), threshold, 1)
    back = [0] * len(sets)
    for position, p in enumerate(perm):
        back[p] = int(shuffled[position])  # cluster of original sequence p, named in shuffled order
    assert partition(back) == partition(plain.tolist())
    # each cluster is named by its first member
    assert all(int(plain[i]) <= i and int(plain[int(plain[i])]) == int(plain[i]) for i in range(len(sets)))


def test_near_identical_pairs_use_the_smaller_sketch_and_matches_the_query():
    """Max containment: a sequence found whole in a larger one is near-identical to it; `matches`
    measures the query's containment in the target only."""
    small = set(range(4))
    large = set(range(12))
    s = sketches_of([large, small, {20, 21, 22}])
    pairs = near_identical_pairs(s, 0.99, 2)
    assert (pairs.query.tolist(), pairs.target.tolist(), pairs.containment.tolist()) == ([0], [1], [1.0])
    m = matches(sketches_of([small, large]), sketches_of([large]), 0.99, 2)
    assert (m.query.tolist(), m.target.tolist(), m.containment.tolist()) == ([0, 1], [0, 0], [1.0, 1.0])
    third = float(ani(4 / 12, s.params.ksize))  # a third of `large` is in `small`
    assert len(matches(sketches_of([large]), sketches_of([small]), third + 1e-9, 2).query) == 0
    assert len(matches(sketches_of([large]), sketches_of([small]), third, 2).query) == 1


# ---------------------------------------------------------------------------------------------
# ani


def test_ani_edge_cases():
    k = 21
    assert ani(0.0, k) == 0.0
    assert ani(1.0, k) == 1.0
    assert ani(-0.5, k) == 0.0 and ani(1.5, k) == 1.0  # containment clipped to [0, 1]
    assert ani(0.95**k, k) == pytest.approx(0.95)
    assert ani(np.array([0.0, 0.5, 1.0]), 31).tolist() == pytest.approx([0.0, 0.5 ** (1 / 31), 1.0])
    c = np.linspace(0, 1, 101)
    assert np.all(np.diff(ani(c, k)) > 0)  # more shared, more identical
    assert np.all(ani(c, 31)[1:-1] > ani(c, 21)[1:-1])  # the same containment of longer k-mers: closer
    assert ani(np.zeros(0), k).shape == (0,)


def test_ani_is_sourmash_containment_ani(klebsiella_seqs):
    seq = max(klebsiella_seqs.values(), key=len)[:60_000]
    copy = mutate(seq, 0.02, seed=3)
    a, b = minhash(seq), minhash(copy)
    contained = a.contained_by(b)
    assert ani(contained, 21) == pytest.approx(a.containment_ani(b).ani, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# canonical_kmers

COMPLEMENT = str.maketrans("ACGTacgt", "TGCAtgca")


def reference_kmers(seq: str, k: int) -> list[int]:
    """Sorted distinct min(code, code of the reverse complement) of each window of ACGT only (any case)."""
    digits = {"A": "0", "C": "1", "G": "2", "T": "3"}
    out = set()
    for i in range(len(seq) - k + 1):
        word = seq[i : i + k].upper()
        if set(word) <= set("ACGT"):
            rc = word.translate(COMPLEMENT)[::-1]
            out.add(min(int("".join(digits[b] for b in word), 4), int("".join(digits[b] for b in rc), 4)))
    return sorted(out)


dna = st.text(alphabet="ACGTacgtNnRY-", max_size=90)


@settings(max_examples=300, deadline=None)
@given(seq=dna, k=st.sampled_from([1, 2, 3, 4, 7, 15, 21, 31]))
def test_canonical_kmers_equal_the_python_reference(seq, k):
    got = canonical_kmers(seq.encode(), k)
    assert got.dtype == np.uint64
    assert got.tolist() == reference_kmers(seq, k)
    # a sequence and its reverse complement have one set; numpy input is the same as bytes
    assert canonical_kmers(seq.translate(COMPLEMENT)[::-1].encode(), k).tolist() == got.tolist()
    assert canonical_kmers(np.frombuffer(seq.encode(), np.uint8), k).tolist() == got.tolist()


def test_canonical_kmers_bad_sizes_and_containment(lambda_seq):
    for k in (0, 32):
        with pytest.raises(ValueError, match="k-mers of 1 to 31 bases"):
            canonical_kmers(b"ACGT", k)
    query = canonical_kmers(lambda_seq[:5000].encode(), 21)
    target = canonical_kmers(lambda_seq.encode(), 21)
    assert containment(query, target) == 1.0
    assert containment(target, query) == pytest.approx(len(query) / len(target))
    assert containment(np.zeros(0, np.uint64), target) == 0.0


# ---------------------------------------------------------------------------------------------
# the sketch file


@settings(max_examples=50, deadline=None)
@given(sets=hash_sets, ksize=st.sampled_from([7, 21, 31]), scaled=st.sampled_from([1, 100, 1_000_000]))
def test_sketches_round_trip_through_bytes(sets, ksize, scaled):
    s = sketches_of(sets, SketchParams(ksize, scaled))
    s.names = [f"contig {i} é" for i in range(len(sets))]
    back = Sketches.from_bytes(s.to_bytes(), "x.npz")
    assert back.params == s.params and back.names == s.names
    for got, want in [(back.lengths, s.lengths), (back.hashes, s.hashes), (back.offsets, s.offsets)]:
        assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_a_damaged_sketch_file_is_named():
    s = sketches_of([{1, 2, 3}, {4, 5}])
    data = s.to_bytes()
    flipped = bytearray(data)
    at = data.index(s.hashes.tobytes())
    flipped[at + 3] ^= 0xFF  # a byte of the hashes: the member's CRC fails
    for damaged in [data[: len(data) // 2], data[:10], bytes(flipped), b"not a sketch at all"]:
        with pytest.raises(BadInputError, match=r"^sketches/run\.npz is not a sketch file"):
            Sketches.from_bytes(damaged, "sketches/run.npz")
    inconsistent = Sketches(s.params, s.names, s.lengths, s.hashes[:-1], s.offsets)
    with pytest.raises(BadInputError, match=r"^sketches/run\.npz is damaged: its offsets do not cover its hashes"):
        Sketches.from_bytes(inconsistent.to_bytes(), "sketches/run.npz")


def test_sketches_concat_keeps_order_and_refuses_mixed_parameters():
    a, b = sketches_of([{1, 2}, set()]), sketches_of([{3}])
    joined = Sketches.concat([a, b])
    assert [joined.of(i).tolist() for i in range(3)] == [a.of(0).tolist(), [], b.of(0).tolist()]
    with pytest.raises(ValueError, match="different parameters"):
        Sketches.concat([a, sketches_of([{3}], SketchParams(scaled=10))])


# ---------------------------------------------------------------------------------------------
# agreement with sourmash on the bundled genomes


def mutate(seq: str, rate: float, seed: int) -> str:
    """`seq` with each base replaced by another one with probability `rate` (seeded)."""
    rng = np.random.default_rng(seed)
    codes = np.frombuffer(seq.upper().encode(), np.uint8)
    alphabet = np.frombuffer(b"ACGT", np.uint8)
    index = np.searchsorted(alphabet, codes)  # ACGT only in these genomes
    change = rng.random(len(codes)) < rate
    index[change] = (index[change] + rng.integers(1, 4, int(change.sum()))) % 4
    return alphabet[index].tobytes().decode()


def minhash(seq: str, ksize: int = 21, scaled: int = 100):
    mh = sourmash.MinHash(n=0, ksize=ksize, scaled=scaled)
    mh.add_sequence(seq, force=True)
    return mh


@pytest.mark.parametrize(("ksize", "scaled"), [(21, 100), (31, 50)])
def test_join_counts_and_containment_equal_sourmash(klebsiella_seqs, lambda_seq, ksize, scaled):
    contigs = sorted(klebsiella_seqs.values(), key=len)
    big, mid = contigs[-1][:120_000], contigs[-5][:80_000]
    seqs = [
        big,
        mutate(big, 0.01, seed=1),  # near-identical
        mutate(big[30_000:70_000], 0.02, seed=2),  # contained, 2% substitutions
        mid,
        big[100_000:] + mid[:20_000],  # a chimera of two
        lambda_seq,  # unrelated
    ]
    params = SketchParams(ksize, scaled)
    sk = Sketches.build(
        params, [f"s{i}" for i in range(len(seqs))], [len(x) for x in seqs], [sketch_hashes([x], params) for x in seqs]
    )
    mhs = [minhash(x, ksize, scaled) for x in seqs]
    assert [sk.of(i).tolist() for i in range(len(seqs))] == [sorted(m.hashes) for m in mhs]
    counts = as_dict(shared_hashes(sk, None, 1))
    for i, j in itertools.combinations(range(len(seqs)), 2):
        assert counts.get((i, j), 0) == mhs[i].count_common(mhs[j]), (i, j)
    assert counts[(0, 1)] > 0 and counts[(3, 4)] > 0
    assert counts.get((0, 3), 0) < similarity.MIN_SHARED  # two contigs of one assembly: a stray repeat at most
    found = matches(sk, sk, 0.5, 1)  # every pair sharing a hash, each way
    assert len(found.query) > len(seqs)
    for q, t, c in zip(found.query, found.target, found.containment):
        assert c == pytest.approx(mhs[q].contained_by(mhs[t]), rel=1e-9), (q, t)
    # the copies are near-identical at 0.95 (the piece in the larger), lambda is near nothing
    near = set(zip(near_identical_pairs(sk, 0.95).query.tolist(), near_identical_pairs(sk, 0.95).target.tolist()))
    assert {(0, 1), (0, 2), (1, 2)} <= near
    assert not any(5 in pair for pair in near)


def test_sketch_hashes_skip_non_acgt_kmers_and_span_no_two_stretches(lambda_seq):
    params = SketchParams()
    seq = lambda_seq[:20_000]
    whole = sketch_hashes([seq], params)
    assert sketch_hashes([seq.lower()], params).tolist() == whole.tolist()
    assert sketch_hashes([seq.encode()], params).tolist() == whole.tolist()
    cut = sketch_hashes([seq[:10_000], seq[10_000:]], params)
    masked = sketch_hashes([seq[:10_000] + "N" + seq[10_001:]], params)
    assert set(cut.tolist()) <= set(whole.tolist()) and set(masked.tolist()) <= set(whole.tolist())
    assert len(sketch_hashes(["ACGT", ""], params)) == 0


def test_bundled_genomes_are_not_near_identical_to_each_other():
    """Lambda and the Klebsiella assembly share no near-identical sequence: the clusters of the
    bundled inputs are the assembly's own."""
    params = SketchParams()
    seqs = {**read_fasta(KLEBSIELLA), **read_fasta(LAMBDA)}
    names = list(seqs)
    sk = Sketches.build(
        params, names, [len(s) for s in seqs.values()], [sketch_hashes([s], params) for s in seqs.values()]
    )
    labels = clusters(sk, 0.95)
    lam = names.index(next(iter(read_fasta(LAMBDA))))
    assert int(labels[lam]) == lam and (labels == lam).sum() == 1


@settings(max_examples=150, deadline=None)
@given(a=hash_sets, b=hash_sets, threshold=st.sampled_from([0.5, 0.9, 0.97, 1.0]), min_shared=st.integers(1, 3))
def test_one_join_both_ways_equals_two_matches(a, b, threshold, min_shared):
    sa, sb = sketches_of(a), sketches_of(b)
    forward, backward = matches_both_ways(sa, sb, threshold, min_shared)
    for got, want in (
        (forward, matches(sa, sb, threshold, min_shared)),
        (backward, matches(sb, sa, threshold, min_shared)),
    ):
        for column in ("query", "target", "shared", "containment", "ani"):
            assert np.array_equal(getattr(got, column), getattr(want, column)), column
