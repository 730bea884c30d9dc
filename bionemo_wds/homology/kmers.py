"""The exact set of a sequence's canonical k-mers, as sorted uint64 codes (numpy).

Exact containment (the share of a query's k-mers present in a stored sequence) needs every k-mer,
not one in `scaled`: sourmash keeps every hash with ``scaled=1`` but builds it in a tree set per
sequence, ~40x slower here than these vectorised 2-bit codes. A k-mer is coded 2 bits per base
(A=0, C=1, G=2, T=3; k <= 31 fits 62 bits) and stored as the smaller of its code and its reverse
complement's, so a sequence and its reverse complement have the same set. A k-mer holding any other
byte (N, IUPAC codes, a gap) is skipped; lower case counts as upper case.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.core.distinct import distinct

_CODE = np.full(256, 255, dtype=np.uint8)
for _i, _b in enumerate(b"ACGT"):
    _CODE[_b] = _i
    _CODE[ord(chr(_b).lower())] = _i


def kmer_codes(bases: bytes | np.ndarray, ksize: int) -> np.ndarray:
    """The canonical code of every k-mer of `bases` without a base other than ACGT, in sequence order
    (repeats kept): uint64."""
    if not 1 <= ksize <= 31:
        raise ValueError(f"k-mers of 1 to 31 bases, not {ksize}")
    raw = np.frombuffer(bases, dtype=np.uint8) if isinstance(bases, bytes | bytearray | memoryview) else bases
    n = len(raw) - ksize + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    code = _CODE[raw]
    bad = code == 255
    # a k-mer is valid when no bad base lies in it: a running count of bad bases
    bad_before = np.concatenate(([0], np.cumsum(bad, dtype=np.int64)))
    valid = bad_before[ksize:] - bad_before[:-ksize] == 0
    forward, reverse = _codes(np.where(bad, 0, code).astype(np.uint64), ksize)
    return np.minimum(forward[:n], reverse[:n])[valid]


def _codes(c: np.ndarray, ksize: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and reverse-complement codes of the k-mers starting at each position (the first
    ``len(c) - ksize + 1`` are whole), built by doubling: codes of 2^j-mers join into k-mers in
    log2(k) steps rather than k shifts over the whole array."""
    two = np.uint64(2)
    fwd = {1: c}
    rev = {1: np.uint64(3) - c}
    size = 1
    while size * 2 <= ksize:
        f, r = fwd[size], rev[size]
        fwd[size * 2] = (f[:-size] << (two * np.uint64(size))) | f[size:]
        rev[size * 2] = r[:-size] | (r[size:] << (two * np.uint64(size)))
        size *= 2
    parts = [p for p in sorted(fwd, reverse=True) if ksize & p]  # k's binary digits, largest block first
    forward, rev_all = fwd[parts[0]], rev[parts[0]]
    length = parts[0]
    for part in parts[1:]:
        f, r = fwd[part][length:], rev[part][length:]
        m = min(len(forward), len(f))
        forward = (forward[:m] << (two * np.uint64(part))) | f[:m]
        rev_all = rev_all[:m] | (r[:m] << (two * np.uint64(length)))
        length += part
    return forward, rev_all


def canonical_kmers(bases: bytes | np.ndarray, ksize: int) -> np.ndarray:
    """The distinct canonical k-mer codes of `bases` (sorted uint64)."""
    return distinct(kmer_codes(bases, ksize))


def containment(query: np.ndarray, target: np.ndarray) -> float:
    """Share of the k-mers of `query` (sorted codes) found in `target` (0 for an empty query)."""
    if len(query) == 0:
        return 0.0
    return float(np.isin(query, target, assume_unique=True).sum() / len(query))
