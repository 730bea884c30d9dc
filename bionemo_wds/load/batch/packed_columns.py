"""The column arithmetic of packed rows, from a few numbers per document: where each document's
tokens, bases and tag lie (`base_columns`, `clear_tag_labels`), the position ids that restart in
every document (`document_positions`), and the boundaries variable-length attention takes
(`boundaries`). Shared by the packed expansion (`packed`), the token rows of a tokenizer
(`token_inputs`) and the masks drawn on a device (`mlm_device`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: The value `cu_seqlens` is padded with after a sample's last document.
CU_SEQLENS_PAD = -1


def boundaries(doc_tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """``seq_lens`` and ``cu_seqlens`` (padded with `CU_SEQLENS_PAD`) of the documents' token counts
    (on a CPU in numpy: a handful of tensor ops on these small arrays cost more than the sums)."""
    if doc_tokens.device.type == "cpu":
        lens = doc_tokens.numpy().astype(np.int32)
        cu_np = np.zeros((lens.shape[0], lens.shape[1] + 1), dtype=np.int32)
        np.cumsum(lens, axis=1, out=cu_np[:, 1:])
        cu_np[:, 1:][lens == 0] = CU_SEQLENS_PAD
        return {"seq_lens": torch.from_numpy(lens), "cu_seqlens": torch.from_numpy(cu_np)}
    seq_lens = doc_tokens.int()
    ends = torch.cumsum(seq_lens, dim=1, dtype=torch.int32)
    cu = torch.cat([torch.zeros_like(ends[:, :1]), ends], dim=1)
    present = torch.cat([torch.ones_like(seq_lens[:, :1], dtype=torch.bool), seq_lens > 0], dim=1)
    return {"seq_lens": seq_lens, "cu_seqlens": torch.where(present, cu, torch.full_like(cu, CU_SEQLENS_PAD))}


def clear_tag_labels(loss_mask: np.ndarray, sizes: np.ndarray, prefix: np.ndarray) -> None:
    """Zero `loss_mask` (rows x columns, in place) where the label is a control tag's byte: the
    columns from each tagged document's BOS to the one before its SEP (a tag is letters too)."""
    count = np.maximum(prefix - 2, 0) * (sizes > 0)
    if not count.any():
        return
    n, seq_length = loss_mask.shape
    first = np.cumsum(sizes, axis=1) - sizes + np.arange(0, n * seq_length, seq_length, dtype=np.int64)[:, None]
    first, count = first.ravel(), count.ravel()
    within = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    loss_mask.reshape(-1)[np.repeat(first, count) + within] = 0


#: Counting numbers 0, 1, 2, ... (read-only; grown when a longer run is asked for), cut by `counting`.
_COUNTING: list[np.ndarray] = [np.arange(0, dtype=np.int64)]


def counting(length: int) -> np.ndarray:
    """A read-only int64 run 0, 1, ... of at least `length` numbers (made once, sliced for every run)."""
    if len(_COUNTING[0]) < length:
        run = np.arange(length, dtype=np.int64)
        run.flags.writeable = False
        _COUNTING[0] = run
    return _COUNTING[0]


def document_positions(sizes: np.ndarray, seq_length: int) -> np.ndarray:
    """Position ids (int64, rows x `seq_length`) of packed rows whose documents take `sizes` tokens:
    0, 1, ... in each document and in the padding after a row's last one, each run a slice of one
    counting array, joined by one `np.concatenate` (a memory copy per run: a batch holds a few
    dozen runs; cheaper than expanding each column's start with `np.repeat` and subtracting it)."""
    sizes = np.asarray(sizes).astype(np.int64)
    n = len(sizes)
    if not n:
        return np.empty((0, seq_length), dtype=np.int64)
    runs = np.concatenate([sizes, seq_length - sizes.sum(axis=1, keepdims=True)], axis=1).ravel().tolist()
    run = counting(seq_length)
    return np.concatenate([run[:r] for r in runs if r]).reshape(n, seq_length)


def base_columns(
    sizes: np.ndarray, prefix: np.ndarray, seq_length: int, dtype: Any = bool, shift: int = 0
) -> np.ndarray:
    """Where each row of a packed token matrix holds a base (rows x `seq_length`, 1 where it does, 0
    elsewhere, in `dtype`), from its documents' tokens (`sizes`) and the tokens before their first
    base (`prefix`): every column set, then the few that are not cleared (each document's BOS, tag
    and SEP, its EOS, the padding after a row's last document), so the cost is one pass over the
    matrix, not one per run. ``shift=1``: whether the next column holds a base (the last column
    never: what a label's loss mask is)."""
    sizes, prefix = np.asarray(sizes).astype(np.int64), np.asarray(prefix).astype(np.int64)
    n = len(sizes)
    ends = np.cumsum(sizes, axis=1)
    out = np.ones((n, seq_length), dtype=dtype)
    flat = out.reshape(-1)
    present = sizes > 0
    row_at = np.arange(0, n * seq_length, seq_length, dtype=np.int64)[:, None]
    first = (ends - sizes + row_at)[present]
    head = prefix[present]
    before = np.cumsum(head) - head
    cleared = np.repeat(first - before, head) + np.arange(int(head.sum()), dtype=np.int64)  # BOS, tag, SEP
    # and EOS; shifted, a row's first column clears the last of the row before (cleared anyway)
    flat[np.concatenate([cleared, (ends - 1 + row_at)[present]]) - shift] = 0
    for i, used in enumerate(ends[:, -1].tolist()):  # per row: the padding (and the last `shift` columns)
        out[i, max(used - shift, 0) :] = 0
    return out
