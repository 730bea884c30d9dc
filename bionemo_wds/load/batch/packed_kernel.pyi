"""Types of the C extension packed_kernel.c (packed rows of bytes: their documents laid out, their
expansion to Megatron's model inputs; `packed_native`). The arrays are numpy arrays or other
C-contiguous buffers."""

from typing import Any

def packed_inputs(
    raw: Any,
    sizes: Any,
    prefix: Any,
    rows: int,
    seq_length: int,
    width: int,
    real: bool,
    tokens: Any,
    labels: Any,
    loss_mask: Any,
    position_ids: Any,
    /,
) -> None:
    """Packed rows' tokens, labels, loss mask and position ids written whole, one pass (`packed_native`)."""

def lay_out(
    tokens: Any,
    rows: Any,
    lengths: Any,
    prefix: Any,
    flips: Any,
    tags: Any,
    pieces: Any,
    first_piece: Any,
    complement: bytes,
    doc_tokens: Any,
    doc_prefix: Any,
    doc_rc: Any,
    row_fields: Any,
    /,
) -> int:
    """A packed batch's documents laid out in its uint8 token matrix and document columns; the columns'
    width, or -(d + 1) where document d does not fit its row (`packed_native.native_lay_out`)."""
