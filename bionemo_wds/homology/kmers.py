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

_CODE = np.full(256, 255, dtype=np.uint8)
for _i, _b in enumerate(b"ACGT"):
    _CODE[_b] = _i
    _CODE[ord(chr(_b).lower())] = _i


def canonical_kmers(bases: bytes | np.ndarray, ksize: int) -> np.ndarray:
    """The distinct canonical k-mer codes of `bases` (sorted uint64)."""
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
    c = np.where(bad, 0, code).astype(np.uint64)
    forward = np.zeros(n, dtype=np.uint64)
    reverse = np.zeros(n, dtype=np.uint64)
    for j in range(ksize):
        part = c[j : j + n]
        forward |= part << np.uint64(2 * (ksize - 1 - j))
        reverse |= (np.uint64(3) - part) << np.uint64(2 * j)
    return np.unique(np.minimum(forward, reverse)[valid])


def containment(query: np.ndarray, target: np.ndarray) -> float:
    """Share of the k-mers of `query` (sorted codes) found in `target` (0 for an empty query)."""
    if len(query) == 0:
        return 0.0
    return float(np.isin(query, target, assume_unique=True).sum() / len(query))
