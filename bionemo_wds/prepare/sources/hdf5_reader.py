"""Reading HDF5 rows: the `Source` and `BaseReader` of the `hdf5` source (`Hdf5Reader` says what a row costs)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from bionemo_wds.errors import BadInputError

#: Ragged rows a block read takes at most.
RAGGED_MAX_ROWS = 1 << 16
#: Bytes of ids a reader reads ahead at most while rows are asked for in order (`scan`).
READ_AHEAD_BYTES = 16 << 20
#: A reader reads ahead while each row asked for lies less than this many rows after its last block.
FORWARD_GAP_ROWS = 64
#: HDF5's cache of decompressed chunks per reader: rows sharing a chunk are decompressed once.
READER_CHUNK_CACHE = 32 << 20

INSTALL_HINT = "pip install 'bionemo-wds[h5]'"


def h5py_module() -> Any:
    """The h5py module, or a `BadInputError` saying how to install it."""
    try:
        import h5py  # type: ignore[import-untyped]
    except ImportError as exc:
        raise BadInputError(f"--source hdf5 needs the h5py package: {INSTALL_HINT}") from exc
    return h5py


@dataclass
class Hdf5Source:
    """Rows of one HDF5 dataset: where each row's bases lie (after a leading BOS) and how many there are."""

    path: str  # as the user gave it
    key: str
    layout: str  # "fixed" or "ragged"
    lead: np.ndarray  # int8 per dataset row: 1 when it starts with BOS (dropped)
    lengths: np.ndarray  # int64 per dataset row: bases (specials dropped)
    kind: str = "hdf5"

    def reader(self) -> Hdf5Reader:
        return Hdf5Reader(self)

    def describe(self, seq: int) -> str:
        after = ", after its leading BOS," if self.lead[seq] else ""
        return f"row {seq} of {self.key!r} in {self.path}{after}"

    def file_of(self, seq: int) -> str:
        return self.path


class Hdf5Reader:
    """`BaseReader` of an `Hdf5Source`: opens the file on its first read (in the process that reads).

    Reads per window must stay cheap, so a window is never an h5py call of its own: the current row
    is kept as bytes, and the windows of one long row (`scan`'s chunks, a writer's consecutive
    windows) slice it without touching the file. A new row costs:

    - a fixed-width dataset stored contiguously and unfiltered (h5py's default without chunks or
      compression): one positioned read of the row's bases at the dataset's offset in the file,
      about a microsecond, checked at open against h5py's own read;
    - otherwise an h5py call (tens of microseconds for fixed rows, 100-300 for ragged ones, whose
      elements h5py converts one by one). Rows come in blocks: one row when the rows asked for jump
      around (the writers' shuffled windows), and a read-ahead that doubles while they go forward
      (`scan` walks every row in order: one call per block instead of per row, about 15x faster
      for ragged rows; rows asked for in order with gaps, as a writer reading a shard's windows
      sorted would, also qualify), up to `READ_AHEAD_BYTES`. HDF5's chunk cache
      (`READER_CHUNK_CACHE`) keeps decompressed chunks, so rows sharing a chunk are decompressed once.

    Memory: one block, one row, that cache.
    """

    def __init__(self, source: Hdf5Source) -> None:
        self.source = source
        self.file: Any = None
        self.data: Any = None
        self.rows = 0
        self.fd = -1  # the file, for positioned reads of a contiguous fixed-width dataset (-1: none)
        self.offset = 0  # of the dataset's first id in the file
        self.block: list[np.ndarray] = []  # raw ids of rows block_lo, block_lo + 1, ...
        self.block_lo = 0
        self.ahead = 1  # rows the next block read takes
        self.row = -1
        self.bases = b""  # bases of `row`, as bytes

    def _open(self) -> None:
        self.file = h5py_module().File(self.source.path, "r", rdcc_nbytes=READER_CHUNK_CACHE)
        self.data = self.file[self.source.key]
        self.rows = int(self.data.shape[0])
        if self.source.layout != "fixed" or self.data.chunks or self.data.external:
            return
        offset = self.data.id.get_offset()  # None unless stored contiguously (and allocated)
        if offset is None:
            return
        self.fd, self.offset = os.open(self.source.path, os.O_RDONLY), int(offset)
        last = self.rows - 1
        if not all(np.array_equal(self._pread(row, 0, self.data.shape[1]), self.data[row]) for row in (0, last)):
            os.close(self.fd)  # not where HDF5 says it is: read through h5py
            self.fd = -1

    def _pread(self, row: int, lo: int, hi: int) -> np.ndarray:
        """Ids ``[lo, hi)`` of fixed-width `row`, read straight from the file."""
        size = self.data.dtype.itemsize
        at = self.offset + (row * int(self.data.shape[1]) + lo) * size
        return np.frombuffer(os.pread(self.fd, (hi - lo) * size, at), dtype=self.data.dtype)

    def _read_block(self, row: int) -> None:
        gap = row - (self.block_lo + len(self.block))
        forward = 0 <= gap < max(FORWARD_GAP_ROWS, self.ahead)  # a walk in row order, maybe skipping a few
        self.ahead = min(2 * self.ahead, RAGGED_MAX_ROWS) if forward else 1
        hi = min(self.rows, row + self.ahead)
        self.block = list(np.asarray(self.data[row:hi]) if self.source.layout == "fixed" else self.data[row:hi])
        self.block_lo = row
        nbytes = sum(ids.nbytes for ids in self.block)
        self.ahead = max(1, min(self.ahead, len(self.block) * READ_AHEAD_BYTES // max(1, nbytes)))

    def _load(self, row: int) -> None:
        if self.data is None:
            self._open()
        lo = int(self.source.lead[row])
        hi = lo + int(self.source.lengths[row])
        if self.fd >= 0:
            ids = self._pread(row, lo, hi)
        else:
            if not 0 <= row - self.block_lo < len(self.block):
                self._read_block(row)
            ids = self.block[row - self.block_lo][lo:hi]
        # the catalog checked every id to lie in 0-255, so the cast keeps each value
        self.bases = ids.astype(np.uint8, copy=False).tobytes()
        self.row = row

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        if seq != self.row:
            self._load(seq)
        span = self.bases[start:end]
        return span if table is None else span.translate(table)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        if self.file is not None:
            self.file.close()
        self.file = self.data = None
        self.fd, self.block, self.block_lo, self.ahead = -1, [], 0, 1
        self.row, self.bases = -1, b""
