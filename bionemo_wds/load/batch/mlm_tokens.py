"""Masked-LM batches of a tokenizer's rows in one pass: the CPU's path for masked-LM batches with
``tokenizer=`` other than bytes (`options.SampleOptions.model_inputs`), in either batch format, packed
or not.

The general path lays the compact ids out as an unmasked ``hf`` batch (`token_inputs`: the ids widened
to int64, the trained tokens found, the labels made by a whole-batch ``where``, the attention mask by a
comparison and a cast) and then lays the masks over it (`mlm.apply_masks`: every id and label read and
written again, and Megatron's labels copied once more). Here `mlm_lay.lay_tokens` reads each compact
id (1 or 2 bytes for most vocabularies) and its draw once and writes the ids the model sees, the labels
and the loss or attention mask in the same pass. The batch is the same, key for key and cell for cell
(the tests compare the two paths); where this path does not apply (a minimum share of real bases to
check, a vocabulary whose ordinary ids are not one range or hold its padding id, tensors on an
accelerator, no C extension),
`masked_token_inputs` says so with None and the general path runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.mlm_native import native_lay_tokens, native_lays_tokens
from bionemo_wds.load.batch.mlm_windows import as_numpy
from bionemo_wds.load.batch.model_inputs import position_ids
from bionemo_wds.load.batch.packed import varlen_keys
from bionemo_wds.load.batch.packed_columns import document_positions
from bionemo_wds.load.batch.to_torch import megatron_inputs
from bionemo_wds.load.batch.token_inputs import token_passthrough
from bionemo_wds.load.tokenize.base import FLAG_DEGENERATE, FLAG_SOFT_MASKED, Tokenizer


def dropped_flags(soft_mask_weight: float | None, rules: LabelRules) -> int:
    """The `tokenize.base.token_flags` bits that leave a token out of a masked-LM loss: soft-masked with
    ``soft_mask_weight=0``, degenerate with ``mask_degenerate_bases`` (`token_inputs`' weights, which
    masked-LM reads as predicted or not)."""
    soft = FLAG_SOFT_MASKED if soft_mask_weight == 0 else 0
    return soft | (FLAG_DEGENERATE if rules.mask_degenerate_bases else 0)


def masked_token_inputs(
    batch: dict[str, Any],
    tokenizer: Tokenizer,
    soft_mask_weight: float | None,
    rules: LabelRules,
    codes: Any,
    megatron: bool = False,
) -> dict[str, Any] | None:
    """The masked-LM model inputs of a compact token batch (`tokens.tokenized_batch`) given its ``mlm``
    codes (the same cells as its ids; None: not a masked-LM batch): ``hf``: ``input_ids`` with the masks
    laid over, ``labels`` (-100 but where predicted), ``position_ids`` and ``attention_mask`` (unpacked)
    or the varlen keys (packed); `megatron`: ``tokens`` (masked), ``labels`` (the unmasked tokens),
    ``loss_mask`` (1 where predicted), ``position_ids``, a packed batch's boundaries and the passthrough
    keys, as the general path gives them. None where this path does not apply."""
    if codes is None or rules.min_real_fraction:
        return None
    compact, drawn = as_numpy(batch["tokens"]), as_numpy(codes)
    flags = batch.get("token_flags")
    marks = None if flags is None else as_numpy(flags)
    span = tokenizer.ordinary_range
    if compact is None or drawn is None or (flags is not None and marks is None) or span is None:
        return None
    if span[0] <= tokenizer.pad_id < span[1]:  # padding that is an ordinary id: no family has it
        return None
    if compact.ndim != 2 or not native_lays_tokens(compact, drawn):
        return None
    n, width = compact.shape
    shown, labels = np.empty((n, width), dtype=np.int64), np.empty((n, width), dtype=np.int64)
    sizes = np.asarray(batch["doc_tokens"]) if "doc_tokens" in batch else None
    positions = position_ids(width).expand(n, width)
    if sizes is not None:
        positions = torch.from_numpy(document_positions(sizes, width))
    lay = (compact, drawn, marks, dropped_flags(soft_mask_weight, rules), span, tokenizer.pad_id, shown, labels)
    out: dict[str, Any]
    if megatron:
        loss_mask = np.empty((n, width), dtype=np.float32)
        native_lay_tokens(*lay, loss_mask=loss_mask)
        out = megatron_inputs(shown, labels, loss_mask, positions, sizes)
        return out | {k: v for k, v in token_passthrough(batch).items() if k not in out}
    attention = None if sizes is not None else np.empty((n, width), dtype=np.int64)
    native_lay_tokens(*lay, attention_mask=attention)
    out = {"input_ids": torch.from_numpy(shown), "labels": torch.from_numpy(labels), "position_ids": positions}
    if attention is None:
        return out | varlen_keys(out, batch)
    out["attention_mask"] = torch.from_numpy(attention)
    return out
