"""A decoded record's windows as rows: what the reader hands the batch builder, one per record.

`BlockRows` keeps the per-window columns as Python lists (read once per record, not per window)
and what every window's random draws need, computed once for the whole record: the window keys,
and the reverse-complement coins of a pass (`flips`).
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

from bionemo_wds.core.seeds import key_crcs, salted_flips
from bionemo_wds.format import RecordColumns, WindowBlock, window_key


def as_list(column: list[int] | np.ndarray) -> list[int]:
    """A record column as a list (`RecordColumns` has lists already; `WindowBlock` int64 arrays)."""
    return column if isinstance(column, list) else column.tolist()


class BlockRows:
    """A decoded record with the per-window columns as Python lists (read once per record, not per
    window), and what every window's random draws need, computed once for the whole record: the
    window keys, and the reverse-complement coins of a pass (`flips`)."""

    __slots__ = ("_coins", "_crcs", "_keys", "offsets", "seq_id", "start", "tag", "tokens", "window")

    def __init__(self, block: WindowBlock | RecordColumns):
        self.tokens = block.tokens
        self.offsets: list[int] = [0, *accumulate(as_list(block.lengths))]
        self.seq_id: list[str] = block.seq_id
        self.start: list[int] = as_list(block.start)
        self.window: list[int] = as_list(block.window)
        self.tag = [t.encode("ascii") for t in block.tag]
        self._keys: list[str] | None = None
        self._crcs: np.ndarray | None = None
        self._coins: dict[tuple[float, int], list[bool]] = {}

    def __len__(self) -> int:
        return len(self.seq_id)

    @property
    def keys(self) -> list[str]:
        """Each window's key (``<seq_id>/<window>``), formatted once per record."""
        if self._keys is None:
            self._keys = [window_key(s, w) for s, w in zip(self.seq_id, self.window)]
        return self._keys

    def bases(self, row: int) -> np.ndarray:
        """The bases of window `row` as stored (forward strand), a view into the record."""
        return self.tokens[self.offsets[row] : self.offsets[row + 1]]

    def flips(self, p: float, salt: int) -> list[bool]:
        """Each window's reverse-complement coin with probability `p` in the pass of `salt`
        (`seeds.flip_salt`): `seeds.salted_flip` of its key, for all windows at once."""
        coins = self._coins.get((p, salt))
        if coins is None:
            if self._crcs is None:
                self._crcs = key_crcs(self.keys)
            coins = salted_flips(self._crcs, p, salt).tolist()
            if len(self._coins) > 2:  # a record lives within a pass or two (and a mix's streams)
                self._coins.clear()
            self._coins[(p, salt)] = coins
        return coins


class FillerRows(BlockRows):
    """The one row of every filler window: no bases, no tag."""

    def __init__(self) -> None:  # no record behind it
        super().__init__(FILLER_BLOCK)


FILLER_BLOCK = WindowBlock(
    tokens=np.empty(0, dtype=np.uint8),
    lengths=np.zeros(1, dtype=np.int64),
    seq_id=[""],
    start=np.zeros(1, dtype=np.int64),
    window=np.zeros(1, dtype=np.int64),
    tag=[""],
)
FILLER_ROWS = FillerRows()
