"""Types of the C extension mlm_kernel.c (the masked-LM draws and their laying, `batch.mlm`). The
arrays are numpy arrays or other C-contiguous buffers."""

from typing import Any

def draw(
    out: Any,
    out_size: int,
    ids: Any,
    id_size: int,
    candidates: Any,
    salts: Any,
    rows: int,
    width: int,
    bound: int,
    span: int,
    special_table: Any,
    random_ids: Any,
    mask_id: int,
    bert: bool,
    mask_share: float,
    random_share: float,
    specials: bool,
    /,
) -> None:
    """`mlm.mask_tokens`'s codes of a batch written into `out` (rows x width, signed, `out_size` bytes each)."""

def lay(
    ids: Any,
    labels: Any,
    codes: Any,
    code_size: int,
    starts: Any,
    rows: int,
    seq_length: int,
    width: int,
    loss_mask: Any,
    /,
) -> int:
    """A batch's codes laid over its int64 ids and labels in place (`mlm.lay_on_cpu`); the number predicted."""
