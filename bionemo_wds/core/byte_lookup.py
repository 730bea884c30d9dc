"""Byte-table passes over uint8 arrays: every byte through a 256-byte table, in place
(`translate_in_place`, `translate_rows`), into another array (`translate_bytes`; a run of pieces,
forwards or written backwards as a reverse strand is: `pieces_into`), and whether an array holds a
byte outside a set (`holds_other_than`).

The reverse complement of a batch's flipped rows, a tokenizer's codes and ids of bases, and the check
that bases are only A/C/G/T are such passes. The C extension ``byte_tables.c`` makes each one pass (a
table into another array 32 bytes a step on AVX2); where it is not built (no C compiler at install) a
reversed copy and `bytes.translate` do the same, with the copies around them (the figures are in
docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

try:
    import bionemo_wds.core.byte_tables as byte_tables
except ImportError:  # built by `pip install -e .` where a C compiler is found (setup.py: optional)
    byte_tables = None  # type: ignore[assignment]


def translate_in_place(array: np.ndarray, table: bytes) -> None:
    """Every byte b of the uint8 `array` (any shape) becomes ``table[b]``, in place."""
    if byte_tables is not None and array.flags.c_contiguous and array.flags.writeable:
        byte_tables.apply(array, table)
    else:
        array[...] = np.frombuffer(array.tobytes().translate(table), dtype=np.uint8).reshape(array.shape)


def translate_rows(matrix: np.ndarray, rows: Sequence[int], table: bytes) -> None:
    """`translate_in_place` of rows `rows` of the uint8 `matrix` (without the extension: the rows
    gathered into one `bytes.translate` call, which costs less than a call per row)."""
    if len(rows) == len(matrix):  # every row: one pass over the whole matrix
        translate_in_place(matrix, table)
        return
    if byte_tables is not None and matrix.flags.c_contiguous and matrix.flags.writeable:
        for i in rows:
            byte_tables.apply(matrix[i], table)
        return
    picked = np.asarray(rows, dtype=np.intp)
    done = np.frombuffer(matrix[picked].tobytes().translate(table), dtype=np.uint8)
    matrix[picked] = done.reshape(len(rows), *matrix.shape[1:])


def translate_bytes(array: np.ndarray, table: bytes) -> np.ndarray:
    """``table[array]`` as a new uint8 array of the same shape (one pass in C, 32 bytes a step on AVX2;
    without the extension, one `bytes.translate`)."""
    if byte_tables is not None:
        out = np.empty(array.shape, dtype=np.uint8)
        byte_tables.translate_into(out, np.ascontiguousarray(array, dtype=np.uint8), table)
        return out
    return np.frombuffer(array.tobytes().translate(table), dtype=np.uint8).reshape(array.shape)


def pieces_into(out: np.ndarray, pieces: Sequence[np.ndarray], table: bytes, backward: bool) -> bool:
    """Write `pieces` (uint8 arrays, in order) through `table` one after another from the start of
    `out` (contiguous, writable), each in one C pass; `backward`: the whole run reversed (the last piece
    first, each read backwards: a reverse strand). False where the extension is not built (nothing is
    written)."""
    if byte_tables is None:
        return False
    write = byte_tables.reverse_into if backward else byte_tables.translate_into
    pos = 0
    for piece in reversed(pieces) if backward else pieces:
        write(out[pos : pos + len(piece)], piece, table)
        pos += len(piece)
    return True


def holds_other_than(array: np.ndarray, kept: bytes) -> bool:
    """Whether the uint8 `array` holds a byte that is not in `kept` (one pass, at memory speed)."""
    if byte_tables is not None and array.flags.c_contiguous and len(kept) <= MAX_KEPT:
        return byte_tables.any_outside(array, kept)
    return len(array.tobytes().translate(None, kept)) > 0


#: The most kept bytes `byte_tables.any_outside` compares with.
MAX_KEPT = 32
