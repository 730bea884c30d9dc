"""How alike sketched sequences are: shared hashes, containment, estimated ANI, clusters and matches.

Every comparison starts from the pairs of sequences that share at least one hash, found through an
inverted index (sort all hashes, pair the owners of equal ones) instead of comparing every pair:
sourmash compares one sketch with many (`MinHash.contained_by`), but has no all-against-all join,
and a Python loop over a million sketches would take hours; the join here is a few numpy sorts.

**Threshold semantics.** A threshold ``T`` (``--group-by similarity:T``, ``--min-identity T``) is an
*estimated average nucleotide identity* (ANI) from FracMinHash containment: the containment ``C``
of sequence A in B (the share of A's hashes found in B) estimates the share of A's k-mers in B, and
under a model of independent substitutions ``ANI = C ** (1/k)`` (Blanca et al. 2022; sourmash's
``containment_ani`` without its confidence interval). Two sequences are *near-identical* when the
ANI of the smaller in the larger (the *max containment* ANI) reaches ``T``: a plasmid found whole in
an assembly matches it, whatever the assembly's size. With k = 21, ``T = 0.95`` means containment
>= 0.34; a copy with 1% substitutions has ANI ~0.99 (containment ~0.81).

A pair must share at least `MIN_SHARED` hashes to count, so one k-mer common to two unrelated
sequences (a repeat, low complexity) links nothing; a sequence with fewer hashes than that (shorter
than about ``MIN_SHARED * scaled`` bases) cannot be judged by its sketch and is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bionemo_wds.homology.sketch import Sketches

#: Hashes two sequences must share before their containment counts.
MIN_SHARED = 2
#: A hash held by more than this many sequences on one side (a repeat, a vector) pairs nobody: its
#: pairs would grow as the square of its count. How many were left out is reported.
MAX_OCCURRENCE = 5_000
#: Pairs expanded per step of the join (bounds its memory: ~24 bytes each).
PAIRS_PER_STEP = 20_000_000


@dataclass
class SharedHashes:
    """Pairs of sequences (``left[i]`` of one set, ``right[i]`` of the other) sharing ``shared[i]`` hashes
    (at least `MIN_SHARED`), and how many hashes were left out as too common (`MAX_OCCURRENCE`)."""

    left: np.ndarray
    right: np.ndarray
    shared: np.ndarray
    common_hashes: int = 0


def ani(containment: np.ndarray | float, ksize: int) -> np.ndarray:
    """The ANI a FracMinHash containment estimates: ``C ** (1/k)`` (0 where nothing is shared)."""
    c = np.clip(np.asarray(containment, dtype=np.float64), 0.0, 1.0)
    return np.power(c, 1.0 / ksize)


def shared_hashes(a: Sketches, b: Sketches | None = None, min_shared: int = MIN_SHARED) -> SharedHashes:
    """Every pair (sequence of `a`, sequence of `b`) sharing at least `min_shared` hashes, with the
    count; with `b` None, the pairs within `a` (left < right). A sketch holds each hash once."""
    if b is not None and a.params != b.params:
        raise ValueError(f"sketches of {a.params} and {b.params} cannot be compared")
    same = b is None
    right_set = a if b is None else b
    ha, oa = _sorted_hashes(a)
    sa, ca = _runs(ha)
    if same:  # a hash held once pairs nobody; each pair of its holders once, in order (stable sort)
        ob, sb, cb = oa, sa, ca
        starts_a, counts_a = sa[ca > 1], ca[ca > 1]
        starts_b, counts_b = starts_a, counts_a
        too_common = counts_a > MAX_OCCURRENCE
        pairs_per_hash = counts_a * (counts_a - 1) // 2
    else:
        hb, ob = _sorted_hashes(right_set)
        sb, cb = _runs(hb)
        _, ia, ib = np.intersect1d(ha[sa], hb[sb], assume_unique=True, return_indices=True)
        starts_a, counts_a, starts_b, counts_b = sa[ia], ca[ia], sb[ib], cb[ib]
        too_common = (counts_a > MAX_OCCURRENCE) | (counts_b > MAX_OCCURRENCE)
        pairs_per_hash = counts_a * counts_b
    keep = ~too_common
    starts_a, counts_a, starts_b, counts_b = starts_a[keep], counts_a[keep], starts_b[keep], counts_b[keep]
    ends = np.cumsum(pairs_per_hash[keep])
    n_right = max(len(right_set), 1)
    keys: list[np.ndarray] = []
    tallies: list[np.ndarray] = []
    first, done = 0, 0
    while first < len(ends):
        # a run of hashes whose pairs fit one step (at least one hash per step)
        last = max(first + 1, int(np.searchsorted(ends, done + PAIRS_PER_STEP, side="right")))
        run = slice(first, last)
        if same:
            left, right = _expand_within(oa, starts_a[run], counts_a[run])
        else:
            left, right = _expand(oa, ob, starts_a[run], counts_a[run], starts_b[run], counts_b[run])
        key, tally = np.unique(left * n_right + right, return_counts=True)
        keys.append(key)
        tallies.append(tally)
        first, done = last, int(ends[last - 1])
    key, shared = _sum_by_key(keys, tallies)
    enough = shared >= min_shared
    key, shared = key[enough], shared[enough]
    return SharedHashes(key // n_right, key % n_right, shared, int(too_common.sum()))


def _sorted_hashes(s: Sketches) -> tuple[np.ndarray, np.ndarray]:
    """All hashes of `s`, sorted, with the sequence owning each (in sequence order within a hash)."""
    order = np.argsort(s.hashes, kind="stable")
    return s.hashes[order], s.owners()[order]


def _runs(sorted_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each distinct hash of a sorted array starts, and how many times it is there."""
    if len(sorted_hashes) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_hashes[1:] != sorted_hashes[:-1]])
    return starts, np.diff(np.r_[starts, len(sorted_hashes)])


def _expand(
    oa: np.ndarray, ob: np.ndarray, sa: np.ndarray, ca: np.ndarray, sb: np.ndarray, cb: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every (owner in a, owner in b) pair of the hashes whose owners sit at ``oa[sa:sa+ca]`` and
    ``ob[sb:sb+cb]``: each a-entry of a hash repeated once per b-entry of it."""
    # the a-entries of these hashes, each with its hash's b-range
    a_entry = np.repeat(sa, ca) + _ranks(ca)
    per_entry = np.repeat(cb, ca)
    b_first = np.repeat(sb, ca)
    left = np.repeat(oa[a_entry], per_entry)
    right = ob[np.repeat(b_first, per_entry) + _ranks(per_entry)]
    return left, right


def _expand_within(o: np.ndarray, s: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (earlier, later) of the owners of each hash, who sit at ``o[s:s+c]`` in order:
    each entry paired with the entries after it."""
    rank = _ranks(c)
    entry = np.repeat(s, c) + rank
    later = np.repeat(c, c) - 1 - rank
    left = np.repeat(o[entry], later)
    right = o[np.repeat(entry + 1, later) + _ranks(later)]
    return left, right


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for every c of `counts`, back to back."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def _sum_by_key(keys: list[np.ndarray], tallies: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys of all steps with their tallies summed."""
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.concatenate(keys)
    tally = np.concatenate(tallies).astype(np.int64)
    if len(keys) == 1 or len(key) == 0:
        return key, tally
    order = np.argsort(key, kind="stable")
    key, tally = key[order], tally[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return key[first], np.add.reduceat(tally, first)


@dataclass
class Matches:
    """Pairs (``query[i]``, ``target[i]``) whose estimated ANI reaches the threshold: ``containment`` of
    the query in the target (or, for `near_identical_pairs`, of the smaller in the larger)."""

    query: np.ndarray
    target: np.ndarray
    shared: np.ndarray
    containment: np.ndarray
    ani: np.ndarray


def matches(query: Sketches, target: Sketches, min_identity: float, min_shared: int = MIN_SHARED) -> Matches:
    """Every (query, target) pair where the query's containment in the target estimates an ANI of at
    least `min_identity` (a query found whole in a longer target matches it)."""
    pairs = shared_hashes(query, target, min_shared)
    containment = pairs.shared / np.maximum(query.sizes[pairs.left], 1)
    return _above(pairs, containment, query.params.ksize, min_identity)


def matches_both_ways(
    a: Sketches, b: Sketches, min_identity: float, min_shared: int = MIN_SHARED
) -> tuple[Matches, Matches]:
    """``matches(a, b)`` and ``matches(b, a)`` from one join: the hashes a pair shares do not depend
    on the direction, only the containment's denominator does (each result in the order of its own
    call: by query, then target)."""
    pairs = shared_hashes(a, b, min_shared)
    forward = _above(pairs, pairs.shared / np.maximum(a.sizes[pairs.left], 1), a.params.ksize, min_identity)
    order = np.lexsort((pairs.left, pairs.right))
    swapped = SharedHashes(pairs.right[order], pairs.left[order], pairs.shared[order], pairs.common_hashes)
    containment = swapped.shared / np.maximum(b.sizes[swapped.left], 1)
    return forward, _above(swapped, containment, b.params.ksize, min_identity)


def near_identical_pairs(s: Sketches, min_identity: float, min_shared: int = MIN_SHARED) -> Matches:
    """Pairs within `s` (query < target) whose max containment ANI reaches `min_identity`."""
    pairs = shared_hashes(s, None, min_shared)
    smaller = np.minimum(s.sizes[pairs.left], s.sizes[pairs.right])
    containment = pairs.shared / np.maximum(smaller, 1)
    return _above(pairs, containment, s.params.ksize, min_identity)


def _above(pairs: SharedHashes, containment: np.ndarray, ksize: int, min_identity: float) -> Matches:
    estimate = ani(containment, ksize)
    keep = estimate >= min_identity
    return Matches(pairs.left[keep], pairs.right[keep], pairs.shared[keep], containment[keep], estimate[keep])


def clusters(s: Sketches, min_identity: float, min_shared: int = MIN_SHARED) -> np.ndarray:
    """Single-linkage clusters of near-identical sequences: the cluster of each sequence, named by
    its first member (the smallest index), so the result depends only on the sketches and their
    order. Sequences linked through a chain of near-identical pairs share a cluster."""
    pairs = near_identical_pairs(s, min_identity, min_shared)
    return components(len(s), pairs.query, pairs.target)


def clusters_with(n: int, u: np.ndarray, v: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """`components` of the edges (u, v) plus every node tied to the first node of its `tied` value
    (the pieces of one sequence, the members of a group a source fixed)."""
    _, first = np.unique(tied, return_index=True)
    _, which = np.unique(tied, return_inverse=True)
    anchor = first[which].astype(np.int64)
    return components(
        n,
        np.concatenate([np.asarray(u, np.int64), np.arange(n, dtype=np.int64)]),
        np.concatenate([np.asarray(v, np.int64), anchor]),
    )


def components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected components of the graph of `n` nodes and edges (u, v): each node's smallest member.
    Minimum-label propagation with pointer jumping, in numpy (no graph library needed; rounds grow
    with the log of the longest chain)."""
    label = np.arange(n, dtype=np.int64)
    if len(u) == 0:
        return label
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    while True:
        low = np.minimum(label[u], label[v])
        before = label.copy()
        np.minimum.at(label, u, low)
        np.minimum.at(label, v, low)
        np.minimum.at(label, before, label)  # a root takes its members' lower label
        while True:  # pointer jumping: every node to its root's label
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped
        if np.array_equal(label, before):
            return label
