"""Types of the C extension packed_kernel.c (packed rows of bytes to Megatron's model inputs,
`packed_native`). The arrays are numpy arrays or other C-contiguous buffers."""

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
