"""Distinct values of integer arrays, by sorting.

Written here rather than calling `numpy.unique` plainly because NumPy 2.4's `unique` without
`return_*` arguments takes a hash-table path for integers that is many times slower than a sort
on arrays of millions (catalog rows, k-mer codes); the sort gives the same sorted values.
"""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of `values` (a sort and one comparison)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
