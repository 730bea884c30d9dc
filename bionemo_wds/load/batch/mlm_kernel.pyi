"""Types of the C extension mlm_kernel.c (the masked-LM draws, `batch.mlm`; their laying: mlm_lay.pyi). The
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

def vector_path(on: bool, /) -> bool:
    """Draw with the AVX2 pass where the CPU has it (True) or the portable pass; the previous setting."""
