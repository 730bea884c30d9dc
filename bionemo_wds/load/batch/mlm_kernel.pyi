"""Types of the C extension mlm_kernel.c (the masked-LM draws and their laying, `batch.mlm`). The
arrays are numpy arrays or other C-contiguous buffers."""

from typing import Any

def draw(
    out: Any,
    out_size: int,
    ids: Any,
    id_size: int,
    candidates: Any,
    lengths: Any,
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
    pad: int,
    /,
) -> None:
    """`mlm.mask_tokens`'s codes of a batch written into `out` (rows x width, signed, `out_size` bytes each);
    the cells that may be chosen: `candidates` (bytes, rows x width) or `lengths` (int64, the cells before
    each row's), the other empty (both empty: every cell); with `specials`, a row's trailing `pad` ids
    are skipped without drawing."""

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
    unmasked: Any,
    /,
) -> int:
    """A batch's codes laid over its int64 ids and labels in place (`mlm.lay_on_cpu`); the number predicted."""

def lay_windows(
    ids: Any,
    labels: Any,
    label_bases: Any,
    codes: Any,
    code_size: int,
    dropped: Any,
    first: int,
    lengths: Any,
    rows: int,
    seq_length: int,
    width: int,
    loss_mask: Any,
    /,
) -> int:
    """Window rows' hf labels (with a loss mask: Megatron's labels and loss mask) written whole, their codes
    laid over int64 ids (`mlm_windows`); the number predicted."""

def vector_path(on: bool, /) -> bool:
    """Draw with the AVX2 pass where the CPU has it (True) or the portable pass; the previous setting."""
