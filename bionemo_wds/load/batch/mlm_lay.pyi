"""Types of the C extension mlm_lay.c (masked-LM draws laid over a batch: `batch.mlm`, `mlm_windows`,
`mlm_tokens`). The arrays are numpy arrays or other C-contiguous buffers."""

from typing import Any

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

def lay_tokens(
    ids: Any,
    id_size: int,
    codes: Any,
    code_size: int,
    flags: Any,
    drop: int,
    lo: int,
    hi: int,
    pad: int,
    rows: int,
    width: int,
    shown: Any,
    labels: Any,
    loss_mask: Any,
    attention_mask: Any,
    /,
) -> int:
    """A tokenizer's compact ids and their codes to int64 shown ids and labels (with a loss mask: Megatron's
    labels and loss mask; else hf labels and, unless empty, the attention mask), one pass (`mlm_tokens`);
    the number predicted."""
