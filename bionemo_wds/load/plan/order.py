"""A training epoch's order: the window at any position, from a seeded record order. Pure.

The records are put in a seeded order of (seed, epoch) (``record_order`` stream), and the windows
in that order are mixed within consecutive blocks of `mix` windows (``window_mix`` stream): the
epoch's sequence, the same for every data-parallel size. Both orders are computed permutations
(`core.permutation.SeededPermutation`, as prepare's window order): `EpochOrder` gives the window at
any position of the epoch from the record order alone (one integer per record), so a rank computes
its own positions only, never an array of every window of the epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bionemo_wds.core.permutation import SeededPermutation
from bionemo_wds.load.plan.types import CHUNK, DEFAULT_MIX, RecordTable


class EpochOrder:
    """A training epoch's window ids by position (step 1 above), computed for any positions alone.

    Records come in the order of a seeded permutation (materialised: one integer per record, which
    the prefix sums of their window counts need anyway); position p lies in mixing block
    ``p // mix``, whose positions are shuffled by a permutation of its own (the block number tweaks
    one `SeededPermutation` of `mix`; the last, shorter block has its own). Memory: O(records);
    time: O(positions asked for).
    """

    def __init__(self, table: RecordTable, seed: int, epoch: int, mix: int = DEFAULT_MIX):
        self.n = table.n_windows
        self.mix = max(1, mix)
        self.records = SeededPermutation(len(table), seed, "record_order", epoch).all()
        counts = table.windows[self.records]
        self.ends = np.cumsum(counts)  # windows up to each record of the order
        # window id of a slot = slot + shift of its record (its first id minus the slots before it)
        self.shift = table.first[self.records] - (self.ends - counts)
        self.slots = BlockMix(self.n, self.mix, seed, epoch)

    def __len__(self) -> int:
        return self.n

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The window ids at `positions` of the epoch."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        for lo in range(0, len(positions), CHUNK):  # temporaries stay in the CPU cache
            out[lo : lo + CHUNK] = self._ids(positions[lo : lo + CHUNK])
        return out

    def range(self, lo: int, hi: int) -> np.ndarray:
        """The window ids at positions ``[lo, hi)``."""
        out = np.empty(max(0, hi - lo), dtype=np.int64)
        for start in range(lo, hi, CHUNK):
            out[start - lo : start - lo + CHUNK] = self._ids(np.arange(start, min(start + CHUNK, hi), dtype=np.int64))
        return out

    def _ids(self, positions: np.ndarray) -> np.ndarray:
        slot = self.slots(positions)
        if len(slot) == 0:
            return slot
        # which record of the order holds each slot: among the records the chunk's slots span
        low, high = int(slot.min()), int(slot.max()) + 1
        k0 = int(np.searchsorted(self.ends, low, side="right"))
        k1 = int(np.searchsorted(self.ends, high - 1, side="right")) + 1
        if high - low <= 4 * len(slot):  # a contiguous stretch (a rank's run): a table of the stretch
            ends = np.minimum(self.ends[k0:k1], high)
            spans = np.diff(ends, prepend=low)
            k = np.repeat(np.arange(k0, k1), spans)[slot - low]
        else:
            k = np.searchsorted(self.ends[k0:k1], slot, side="right") + k0
        return slot + self.shift[k]


class BlockMix:
    """Positions of an epoch -> slots: consecutive blocks of `mix` positions, each shuffled by a
    permutation of its own (the block number tweaks one `SeededPermutation` of `mix`; the last,
    shorter block has its own). The second step of every epoch order."""

    def __init__(self, n: int, mix: int, seed: int, epoch: int):
        self.mix = max(1, mix)
        self.full = n // self.mix * self.mix  # positions in whole blocks
        self.block = SeededPermutation(self.mix, seed, "window_mix", epoch)
        self.tail = SeededPermutation(n - self.full, seed, "window_mix_tail", epoch)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        slot = positions.copy()
        if self.mix > 1:
            whole = positions < self.full
            inside = positions[whole]
            block = inside // self.mix
            offset = inside - block * self.mix  # (np.divmod of int64 arrays is several times slower)
            slot[whole] = block * self.mix + self.block(offset, tweak=block)
            slot[~whole] = self.full + self.tail(positions[~whole] - self.full)
        return slot


class UnitOrder:
    """A training epoch's sample ids by position for a table of `n` samples numbered so that
    consecutive ids read the same stored bytes (load-time windows and packed samples of a sequence
    layout): units of `unit` consecutive ids come in a seeded order (a computed permutation, no
    array: the last, shorter unit stays last), then positions are mixed within blocks of `mix`
    (`BlockMix`). Memory O(1), time O(positions asked for), whatever `n`."""

    def __init__(self, n: int, unit: int, seed: int, epoch: int, mix: int = DEFAULT_MIX):
        self.n, self.unit = n, max(1, unit)
        self.whole = n // self.unit  # units of exactly `unit` ids
        self.units = SeededPermutation(self.whole, seed, "unit_order", epoch)
        self.slots = BlockMix(n, mix, seed, epoch)

    def __len__(self) -> int:
        return self.n

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The sample ids at `positions` of the epoch."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(len(positions), dtype=np.int64)
        for lo in range(0, len(positions), CHUNK):
            slot = self.slots(positions[lo : lo + CHUNK])
            unit = slot // self.unit
            inside = unit < self.whole
            ids = slot.copy()  # the last, shorter unit: in place
            ids[inside] = self.units(unit[inside]) * self.unit + (slot[inside] - unit[inside] * self.unit)
            out[lo : lo + CHUNK] = ids
        return out

    def range(self, lo: int, hi: int) -> np.ndarray:
        """The sample ids at positions ``[lo, hi)``."""
        return self(np.arange(lo, max(lo, hi), dtype=np.int64))


def epoch_order(table: Any, seed: int, epoch: int, mix: int = DEFAULT_MIX) -> Any:
    """The epoch order of any table a plan deals from: a `RecordTable`'s (`EpochOrder`), or the one a
    load-time sample table gives (its ``order``)."""
    if isinstance(table, RecordTable):
        return EpochOrder(table, seed, epoch, mix)
    return table.order(seed, epoch, mix)


def epoch_sequence(table: RecordTable, seed: int, epoch: int, mix: int = DEFAULT_MIX) -> np.ndarray:
    """The whole training epoch's window ids (`EpochOrder` of every position): small tables and tests."""
    return epoch_order(table, seed, epoch, mix).range(0, table.n_windows)
