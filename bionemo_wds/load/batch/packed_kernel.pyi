"""Types of the C extension packed_kernel.c (packed rows of bytes: their documents placed, their
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

def place(
    flat: Any,
    doc_at: Any,
    prefix: Any,
    sizes: Any,
    flips: Any,
    tags: Any,
    pieces: Any,
    first_piece: Any,
    complement: bytes,
    /,
) -> None:
    """A packed batch's documents written into its uint8 token matrix (`packed_native.native_place`)."""
