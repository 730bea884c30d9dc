"""Compact token batches (`tokens`) to model inputs, where the batch is used (any device).

The ids widen to int64 here, after the host-to-device copy, as the byte layout's do. What is trained:
every token that is not one of the tokenizer's `special_ids` (padding, CLS, SEP, UNK, ...), weighed
by the rule of soft-masked bases: a token that spells any soft-masked (lower-case) base weighs
``soft_mask_weight`` (1 without one), a token that spells any base that is not A/C/G/T weighs 0 when
``mask_degenerate_bases`` (NT's N token, a DNABERT k-mer holding N). ``min_real_fraction`` leaves
out a sample (a packed document) whose trained tokens are less than that fraction free of degenerate
bases.

- ``batch_format="megatron"``: ``tokens``, ``labels`` (the next token; PAD where the next token lies in
  another packed document), ``loss_mask`` (the label's weight), ``position_ids`` (restarting in every
  packed document), and a packed batch's ``seq_lens`` / ``cu_seqlens`` (`packed_columns.boundaries`).
- ``batch_format="hf"``: ``input_ids``, ``labels`` not shifted (-100 where not trained, and at the
  first token of every document), ``position_ids``, ``attention_mask`` (unpacked) or the flattened
  varlen keys (packed: `packed.varlen_keys`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bionemo_wds.load.batch.hf import IGNORE_INDEX
from bionemo_wds.load.batch.labels import LabelRules, too_few_real
from bionemo_wds.load.batch.model_inputs import position_ids
from bionemo_wds.load.batch.packed import document_columns, varlen_keys
from bionemo_wds.load.batch.packed_columns import boundaries, document_positions
from bionemo_wds.load.batch.to_torch import SampleNames, megatron_inputs
from bionemo_wds.load.tokenize.base import FLAG_DEGENERATE, FLAG_SOFT_MASKED, Tokenizer

#: What a model batch carries through from the compact batch, for tracing.
PASSTHROUGH = ("keys", "seq_id", "start", "rc", "doc_rc", "lengths", "left_out", "dataset")


def token_weights(
    ids: torch.Tensor,
    flags: torch.Tensor | None,
    tokenizer: Tokenizer,
    soft_mask_weight: float | None,
    rules: LabelRules,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(float weight of every token as a label, where a token spells a degenerate base or None)."""
    special = torch.tensor(sorted(tokenizer.special_ids), dtype=ids.dtype, device=ids.device)
    weight = (~torch.isin(ids, special)).to(torch.float32)
    if flags is None:
        return weight, None
    if soft_mask_weight is not None:
        weight = torch.where((flags & FLAG_SOFT_MASKED) > 0, weight * soft_mask_weight, weight)
    degenerate = (flags & FLAG_DEGENERATE) > 0
    if rules.mask_degenerate_bases:
        weight = weight.masked_fill(degenerate, 0.0)
    return weight, degenerate


def token_model_inputs(
    batch: dict[str, Any],
    tokenizer: Tokenizer,
    soft_mask_weight: float | None,
    rules: LabelRules,
    batch_format: str,
    causal: bool = True,
) -> dict[str, Any]:
    """A compact token batch (`tokens.tokenized_batch`) as model inputs (module docstring); `causal`
    False (masked-LM: the ``hf`` layout `mlm.apply_masks` lays its draws over) keeps the label of a
    document's first token, which no earlier token predicts in a causal model. On a CPU by numpy
    (`token_inputs_cpu`: a dozen small torch kernels cost several times more there), elsewhere by
    whole-batch tensor ops (`token_inputs_gather`)."""
    ids = batch["tokens"]
    if isinstance(ids, np.ndarray) or ids.device.type == "cpu":
        return token_inputs_cpu(batch, tokenizer, soft_mask_weight, rules, batch_format, causal)
    return token_inputs_gather(batch, tokenizer, soft_mask_weight, rules, batch_format, causal)


def token_inputs_cpu(
    batch: dict[str, Any],
    tokenizer: Tokenizer,
    soft_mask_weight: float | None,
    rules: LabelRules,
    batch_format: str,
    causal: bool,
) -> dict[str, Any]:
    """`token_model_inputs` in numpy. The labels and the loss mask are read from the compact ids
    (1 or 2 bytes each, not the int64 ids), and float weights are made only when flags or a fraction
    of real bases change them (otherwise the loss mask is where a label is not special)."""
    compact = np.asarray(batch["tokens"])
    ids = compact.astype(np.int64)
    n, width = ids.shape
    trained = tokenizer.ordinary(compact)
    weight: np.ndarray | None = None  # the label weights, when they are not just `trained`
    flags, degenerate = batch.get("token_flags"), None
    if flags is not None:
        weight = trained.astype(np.float32)
        flags = np.asarray(flags)
        if soft_mask_weight is not None:
            weight[(flags & FLAG_SOFT_MASKED) > 0] *= soft_mask_weight
        degenerate = (flags & FLAG_DEGENERATE) > 0
        if rules.mask_degenerate_bases:
            weight[degenerate] = 0.0
    packed = "doc_tokens" in batch
    sizes = np.asarray(batch["doc_tokens"]) if packed else None
    positions = torch.from_numpy(document_positions(sizes, width)) if sizes is not None else None
    expanded = positions if positions is not None else position_ids(width).expand(n, width)
    if rules.min_real_fraction > 0:
        weight = trained.astype(np.float32) if weight is None else weight
        chosen = torch.from_numpy(weight > 0)
        real = chosen if degenerate is None else chosen & ~torch.from_numpy(degenerate)
        weight[too_few_real(chosen, real, expanded, rules.min_real_fraction).numpy()] = 0.0
    if weight is not None:
        trained = weight > 0
    out: dict[str, Any]
    if batch_format == "hf":
        labels = np.where(trained, ids, IGNORE_INDEX)
        if causal:  # nothing before a document predicts its first token
            labels[(expanded == 0).numpy() if positions is not None else np.s_[:, 0]] = IGNORE_INDEX
        out = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels), "position_ids": expanded}
        if packed:
            return out | varlen_keys(out, batch)
        out["attention_mask"] = torch.from_numpy((ids != tokenizer.pad_id).astype(np.int64))
        return out
    labels = np.empty_like(ids)
    labels[:, :-1] = compact[:, 1:]
    labels[:, -1] = tokenizer.pad_id
    loss_mask = np.zeros((n, width), dtype=np.float32)
    loss_mask[:, :-1] = (trained if weight is None else weight)[:, 1:]
    if positions is not None:  # no label crosses into the next document
        crossing = np.zeros((n, width), dtype=bool)
        crossing[:, :-1] = positions[:, 1:].numpy() == 0
        labels[crossing] = tokenizer.pad_id
        loss_mask[crossing] = 0.0
    return megatron_inputs(ids, labels, loss_mask, expanded, sizes) | token_passthrough(batch)


def token_inputs_gather(
    batch: dict[str, Any],
    tokenizer: Tokenizer,
    soft_mask_weight: float | None,
    rules: LabelRules,
    batch_format: str,
    causal: bool,
) -> dict[str, Any]:
    """`token_model_inputs` by tensor ops, on the batch's device."""
    ids = torch.as_tensor(batch["tokens"]).long()
    n, width = ids.shape
    flags = batch.get("token_flags")
    flags = None if flags is None else torch.as_tensor(flags).to(ids.device)
    weight, degenerate = token_weights(ids, flags, tokenizer, soft_mask_weight, rules)
    packed = "doc_tokens" in batch
    if packed:
        doc_tokens = torch.as_tensor(batch["doc_tokens"]).to(ids.device)
        positions = document_columns(doc_tokens, width)[1]
    else:
        positions = position_ids(width).to(ids.device).expand(n, width)
    if rules.min_real_fraction > 0:
        trained = weight > 0
        real = trained if degenerate is None else trained & ~degenerate
        weight = weight.masked_fill(too_few_real(trained, real, positions, rules.min_real_fraction), 0.0)
    out: dict[str, Any]
    if batch_format == "hf":
        labels = torch.where(weight > 0, ids, torch.full_like(ids, IGNORE_INDEX))
        if causal:
            labels = labels.masked_fill(positions == 0, IGNORE_INDEX)  # nothing before a document predicts it
        out = {"input_ids": ids, "labels": labels, "position_ids": positions}
        if packed:
            return out | varlen_keys(out, batch)
        out["attention_mask"] = (ids != tokenizer.pad_id).long()
        return out
    labels = torch.full_like(ids, tokenizer.pad_id)
    labels[:, :-1] = ids[:, 1:]
    loss_mask = torch.zeros_like(weight)
    loss_mask[:, :-1] = weight[:, 1:]
    if packed:  # no label crosses into the next document
        crossing = torch.zeros_like(ids, dtype=torch.bool)
        crossing[:, :-1] = positions[:, 1:] == 0
        labels = labels.masked_fill(crossing, tokenizer.pad_id)
        loss_mask = loss_mask.masked_fill(crossing, 0.0)
    out = {"tokens": ids, "labels": labels, "loss_mask": loss_mask, "position_ids": positions}
    if packed:
        out.update(boundaries(doc_tokens))
    return out | token_passthrough(batch)


def token_passthrough(batch: dict[str, Any]) -> dict[str, Any]:
    """What a ``megatron`` model batch carries through from the compact batch (`PASSTHROUGH`)."""
    out = {}
    for key in PASSTHROUGH:
        if key in batch:
            value = batch[key]
            out[key] = SampleNames(value) if isinstance(value, (list, tuple)) else torch.as_tensor(value)
    return out
