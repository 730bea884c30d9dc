"""Types of the C extension bpe_native.c (the exact BPE encoder behind `exact_bpe.ExactBpe`). The
arrays are numpy arrays or other C-contiguous buffers: uint8 text, int64 everything else."""

from typing import Any

def build(char_ids: Any, lefts: Any, rights: Any, new_ids: Any, /) -> Any:
    """The merge table (a capsule) of one-character ids per byte and merges in rank order."""

def encode(table: Any, text: Any, bounds: Any, ids: Any, starts: Any, widths: Any, counts: Any, /) -> int:
    """Every document's ids, first bases and widths written out; their number, or -1 when a byte has no token."""
