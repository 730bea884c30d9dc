"""Packed rows of bytes by the C kernel ``packed_kernel.c``: a batch's documents laid out in its token
matrix and document columns (`native_lay_out`, for `packed_layout.lay_out`: one call a batch, not a
Python step a document and a slice copy a piece), and the usual packed batch's expansion on a CPU
(`native_packed_inputs`, for `packed.packed_inputs_cpu`: the Megatron format, no soft-masked base in
the batch) in one pass over each document's columns instead of a numpy pass per output and its
temporaries; the same bytes and tensors, cell for cell. Where the extension is not built (no C
compiler at install) both say so (None) and Python and numpy run (the figures are in docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE
from bionemo_wds.load.batch.to_torch import megatron_inputs

try:
    import bionemo_wds.load.batch.packed_kernel as packed_kernel
except ImportError:  # built by `pip install -e .` where a C compiler is found (setup.py: optional)
    packed_kernel = None  # type: ignore[assignment]


def native_packed_inputs(
    raw: np.ndarray, sizes: np.ndarray, prefix: np.ndarray, mask_degenerate: bool
) -> dict[str, Any] | None:
    """``tokens``, ``labels``, ``loss_mask``, ``position_ids``, ``seq_lens``, ``cu_seqlens`` of packed
    rows of bytes (`raw`, uint8 rows x seq_length; each document's tokens `sizes` and tokens before its
    first base `prefix`, rows x documents) with no soft-masked base to fold or weigh, the labels trained
    by `labels.TRAINED_TABLES[mask_degenerate]`'s rule; None where the kernel is not built."""
    if packed_kernel is None:
        return None
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    n, seq_length = raw.shape
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    prefix = np.ascontiguousarray(prefix, dtype=np.int64)
    tokens, labels, positions = (np.empty((n, seq_length), dtype=np.int64) for _ in range(3))
    loss_mask = np.empty((n, seq_length), dtype=np.float32)
    packed_kernel.packed_inputs(
        raw, sizes, prefix, n, seq_length, sizes.shape[1], mask_degenerate, tokens, labels, loss_mask, positions
    )
    return megatron_inputs(tokens, labels, loss_mask, torch.from_numpy(positions), sizes)


class Laid(NamedTuple):
    """A packed batch laid out (`packed_layout.lay_out`'s matrices): its uint8 tokens, the document
    columns (rows x width: tokens, tokens before the first base, reverse-complemented), and per row
    its bases, its first document and the one past its last (-1 and 0 for a row without documents)."""

    tokens: np.ndarray
    doc_tokens: np.ndarray
    doc_prefix: np.ndarray
    doc_rc: np.ndarray
    bases_of: list[int]
    first: list[int]
    past: list[int]


def native_lay_out(
    n: int,
    seq_length: int,
    row: np.ndarray,
    length: np.ndarray,
    prefix: list[int],
    flip: np.ndarray,
    tags: list[bytes],
    pieces: list[np.ndarray],
    first_piece: np.ndarray,
) -> Laid | int | None:
    """`packed_layout.lay_out`'s matrices by the C kernel (`packed_kernel.lay_out`: one call a batch);
    the number of the first document that does not fit its row, where one does not; None where the
    kernel is not built."""
    if packed_kernel is None:
        return None
    k = len(row)
    tokens = np.empty((n, seq_length), dtype=np.uint8)
    cells = n * max(k, 1)
    doc_tokens, doc_prefix = np.empty(cells, dtype=np.int32), np.empty(cells, dtype=np.int32)
    doc_rc = np.empty(cells, dtype=np.bool_)
    fields = np.empty(3 * n, dtype=np.int64)
    width = packed_kernel.lay_out(
        tokens,
        np.ascontiguousarray(row, dtype=np.int64),
        np.ascontiguousarray(length, dtype=np.int64),
        np.array(prefix, dtype=np.int64),
        np.ascontiguousarray(flip, dtype=np.bool_).view(np.uint8),
        tags,
        pieces,
        np.ascontiguousarray(first_piece, dtype=np.int64),
        COMPLEMENT_TABLE,
        doc_tokens,
        doc_prefix,
        doc_rc.view(np.uint8),
        fields,
    )
    if width < 0:
        return -width - 1
    used, shape, per_row = n * width, (n, width), fields.tolist()
    columns = (doc_tokens[:used].reshape(shape), doc_prefix[:used].reshape(shape), doc_rc[:used].reshape(shape))
    return Laid(tokens, *columns, per_row[0::3], per_row[1::3], per_row[2::3])
