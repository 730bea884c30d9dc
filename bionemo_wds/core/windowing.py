"""The window rules both sides follow: how many windows a sequence gives, and the default stride. Pure.

`prepare` cuts windows with them at prepare time (`prepare.windows`), the loader at load time from a
sequence layout (`load.plan.samples.WindowSamples`): one copy of each rule, so a dataset cut either
way has the same windows. Eden's count for a sequence of length ``L``, window ``W`` and stride ``S``
is ``1 + (L - W) // S`` for ``L >= W`` (dropping up to ``S - 1`` tail bases) and one short window for
``L < W``; ``tail="end"`` (our default) adds one window aligned to the sequence's end whenever the
regular grid leaves tail bases, so no base is lost.
"""

from __future__ import annotations

import numpy as np

#: The tail rules: a last window aligned to the end (``"end"``), or Eden's (``"drop"``).
TAIL_MODES = ("end", "drop")
#: Default stride as a fraction of seq_length: Eden's 7992 / 8192 (exactly 999 / 1024).
STRIDE_PER_TOKEN = (999, 1024)


def tail_window_counts(lengths: np.ndarray, window: int, stride: int, tail: str) -> np.ndarray:
    """Windows of each sequence length under a tail rule of `TAIL_MODES` (int64; checked by the caller)."""
    excess = np.maximum(np.asarray(lengths, dtype=np.int64) - window, 0)
    counts = 1 + excess // stride
    if tail == "end":
        counts += (excess % stride) > 0
    return counts


def default_stride(seq_length: int) -> int:
    """The stride when none is given: ``seq_length * 999 // 1024`` (7992 at 8192, as Eden), at least 1.

    The same overlap ratio as Eden at any window size, rather than Eden's 200 tokens: a fixed 200
    would repeat a fifth of every 1024-token window (and leave nothing below 201 tokens), while no
    overlap at all would change the default 8192 runs' windows. Both sides cap it at the window,
    which a long control tag can make shorter."""
    num, den = STRIDE_PER_TOKEN
    return max(1, seq_length * num // den)
