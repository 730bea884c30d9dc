"""Window arithmetic: which slices of each sequence become samples.

Pure functions over numpy arrays, no I/O, so the counts can be checked against the formula by
property tests. The count rules (Eden's, and ``tail="end"``) are `core.windowing`'s, which the
loader's windows cut at load follow too.

``tail="piece"`` (internal: the sequence layout, ``prepare --layout sequences``) cuts every base
once, with the stride equal to the window: piece k of a sequence of length ``L`` is bases
``[k * W, min((k + 1) * W, L))`` (the last one shorter, not moved back to end at ``L``), so a
sequence has ``ceil(L / W)`` pieces (one when ``L <= W``) and no base is stored twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bionemo_wds.core.permutation import SeededPermutation
from bionemo_wds.core.tokenizer import N_SPECIALS_PER_SAMPLE
from bionemo_wds.core.windowing import TAIL_MODES, tail_window_counts
from bionemo_wds.errors import BadInputError, OptionError

#: The tail mode of the sequence layout's pieces (not a `--tail` choice: the loader cuts windows).
PIECE = "piece"
_ALL_TAILS = (*TAIL_MODES, PIECE)


def window_length(seq_length: int, max_tag_bytes: int) -> int:
    """Bases per window so that BOS + tag + SEP + bases + EOS fills `seq_length` exactly."""
    bases = seq_length - N_SPECIALS_PER_SAMPLE - max_tag_bytes
    if bases < 1:
        raise BadInputError(
            f"--seq-length {seq_length} leaves no room for bases after {N_SPECIALS_PER_SAMPLE} "
            f"special tokens and the longest control tag ({max_tag_bytes} bytes)"
        )
    return bases


def check_stride(stride: int, window: int, seq_length: int, max_tag_bytes: int) -> None:
    """Refuse strides that would skip bases between windows or make no progress."""
    if stride < 1:
        raise BadInputError(f"--stride must be at least 1, got {stride}")
    if stride > window:
        raise BadInputError(
            f"--stride {stride} is larger than the window of {window} bases "
            f"(--seq-length {seq_length} minus {N_SPECIALS_PER_SAMPLE} specials minus the longest "
            f"tag, {max_tag_bytes} bytes): bases between windows would be lost; use --stride <= {window}"
        )


def window_counts(lengths: np.ndarray, window: int, stride: int, tail: str = "end") -> np.ndarray:
    """Number of windows cut from each sequence length."""
    if tail not in _ALL_TAILS:
        raise OptionError(f"tail must be one of {TAIL_MODES}, got {tail!r}")
    lengths = np.asarray(lengths, dtype=np.int64)
    if tail == PIECE:  # every base once: ceil(L / stride) pieces, at least one
        return np.maximum(1, -(-lengths // stride))
    return tail_window_counts(lengths, window, stride, tail)


@dataclass(frozen=True)
class WindowTable:
    """Every window of a set of sequences, as parallel arrays (one row per window)."""

    seq_index: np.ndarray  # int64: row in the catalog
    window_index: np.ndarray  # int64: window number within its sequence
    start: np.ndarray  # int64: 0-based offset in the sequence
    length: np.ndarray  # int64: bases in the window (< window only for short sequences)

    def __len__(self) -> int:
        return int(self.seq_index.shape[0])

    def take(self, rows: np.ndarray) -> WindowTable:
        """The windows at `rows`, in that order."""
        return WindowTable(self.seq_index[rows], self.window_index[rows], self.start[rows], self.length[rows])


def window_table(
    seq_indices: np.ndarray, lengths: np.ndarray, window: int, stride: int, tail: str = "end"
) -> WindowTable:
    """All windows of the sequences `seq_indices` (with lengths `lengths`), in sequence order."""
    seq_indices = np.asarray(seq_indices, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = window_counts(lengths, window, stride, tail)
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    first_row = np.repeat(np.cumsum(counts) - counts, counts)
    window_index = np.arange(total, dtype=np.int64) - first_row
    start, length = _cut(window_index, lengths[rows], window, stride, tail)
    return WindowTable(seq_indices[rows], window_index, start, length)


def _cut(number: np.ndarray, seq_len: np.ndarray, window: int, stride: int, tail: str) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of window `number` of sequences of `seq_len` bases."""
    if tail == PIECE:  # piece k: bases [k * stride, min((k + 1) * stride, L)), stride = window
        start = number * stride
        return start, np.minimum(seq_len - start, window)
    # The tail window of `tail="end"` is the one grid step that would run past the end:
    # clamping its start to L - W aligns it to the sequence end.
    start = np.minimum(number * stride, np.maximum(seq_len - window, 0))
    return start, np.minimum(seq_len, window)


@dataclass(frozen=True)
class IdentityOrder:
    """The order that keeps ids where they are (``range(n)`` itself), with the part of
    `SeededPermutation`'s interface a plan uses: the sequence layout stores pieces in id order."""

    n: int

    def __len__(self) -> int:
        return self.n

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        return np.asarray(positions, dtype=np.int64)

    def inverse(self, elements: np.ndarray) -> np.ndarray:
        return np.asarray(elements, dtype=np.int64)

    def range(self, lo: int, hi: int) -> np.ndarray:
        """The ids at positions ``[lo, hi)``: those numbers."""
        return np.arange(lo, max(lo, hi), dtype=np.int64)

    def all(self) -> np.ndarray:
        return self.range(0, self.n)


@dataclass(frozen=True)
class OrderedWindows:
    """A split's windows in their global (shard) order, any range of it computed alone.

    Window ids number the split's windows in sequence order (the order of `window_table`: the
    split's rows in catalog order, each row's windows in order); `order` maps a position of the
    global order to a window id (`permutation.SeededPermutation`), so shard k, positions
    ``[k * per_shard, (k + 1) * per_shard)``, needs the per-row window counts and a few integers,
    never an array of every window. `fixed` (a source that fixed its windows, Eden window
    databases) replaces the grid: window id i is row i of it. `tail` ``"piece"`` (the sequence
    layout) cuts pieces instead of windows (`window_counts`), usually with an `IdentityOrder`
    over rows already put in a seeded order, so each row's pieces stay consecutive.
    """

    rows: np.ndarray  # int64: the split's catalog rows
    lengths: np.ndarray  # int64: their lengths
    first_id: np.ndarray  # int64: window id of each row's first window, plus the total (len rows + 1)
    window: int
    stride: int
    order: SeededPermutation | IdentityOrder
    per_shard: int
    #: int64 per split row: window numbers its sequence has in earlier rows (pieces), or None
    number_offset: np.ndarray | None = None
    fixed: WindowTable | None = None
    tail: str = "end"

    @classmethod
    def grid(
        cls,
        rows: np.ndarray,
        lengths: np.ndarray,
        window: int,
        stride: int,
        tail: str,
        order_of: Callable[[int], SeededPermutation | IdentityOrder],
        per_shard: int,
        number_offset: np.ndarray | None = None,
    ) -> OrderedWindows:
        """The windows `window_table` cuts from `rows`, in the order `order_of(n_windows)` gives."""
        counts = window_counts(lengths, window, stride, tail)
        first_id = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        rows, lengths = np.asarray(rows, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
        order = order_of(int(first_id[-1]))
        return cls(rows, lengths, first_id, window, stride, order, per_shard, number_offset, tail=tail)

    @classmethod
    def of_table(
        cls, table: WindowTable, order_of: Callable[[int], SeededPermutation | IdentityOrder], per_shard: int
    ) -> OrderedWindows:
        """Windows a source fixed (`table`), in the order `order_of(len(table))` gives."""
        empty = np.empty(0, dtype=np.int64)
        return cls(empty, empty, np.zeros(1, np.int64), 0, 0, order_of(len(table)), per_shard, fixed=table)

    def __len__(self) -> int:
        return len(self.order)

    @property
    def n_shards(self) -> int:
        return -(-len(self) // self.per_shard)

    @property
    def n_tokens(self) -> int:
        """Bases in all windows (without computing them)."""
        if self.fixed is not None:
            return int(self.fixed.length.sum())
        if self.tail == PIECE:  # every base once
            return int(self.lengths.sum())
        return int((np.diff(self.first_id) * np.minimum(self.lengths, self.window)).sum())

    def by_id(self, ids: np.ndarray) -> WindowTable:
        """The windows with these ids (in the order given)."""
        if self.fixed is not None:
            return self.fixed.take(ids)
        row = np.searchsorted(self.first_id, ids, side="right") - 1
        number = ids - self.first_id[row]
        start, length = _cut(number, self.lengths[row], self.window, self.stride, self.tail)  # as `window_table`
        if self.number_offset is not None:
            number = number + self.number_offset[row]
        return WindowTable(self.rows[row], number, start, length)

    def at(self, lo: int, hi: int) -> WindowTable:
        """The windows at positions ``[lo, hi)`` of the global order."""
        return self.by_id(self.order.range(lo, hi))

    def shard(self, k: int) -> WindowTable:
        """The windows of shard `k`, in order."""
        return self.at(k * self.per_shard, min((k + 1) * self.per_shard, len(self)))
