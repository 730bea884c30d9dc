"""Masked-LM batches of window rows in one pass over their labels: the CPU's path for the usual
masked-LM batch (byte ids of windows with a mask token, `options.SampleOptions.model_inputs`), in
either batch format.

The general path lays a batch out as a causal ``hf`` batch (every base's label written, degenerate
and soft-masked ones then set to -100) and then lays the masks over it (`mlm.apply_masks`: every
label read and written again). A masked-LM batch trains about 15% of its tokens, so here the labels
are written once, by `mlm_lay.lay_windows`: -100, or the base where it is drawn and trained, with
the ids the model sees laid over the tokens in the same pass (Megatron's batch: the labels are the
unmasked tokens, and the loss mask, 1 where a token is predicted, is written in the same pass). The
batch is the same, key for key and cell for cell (the tests compare the two paths); where this path
does not apply (rows of different tag lengths, a minimum share of real bases to check, tensors on an
accelerator, no C extension), `masked_window_inputs` says so with None and the general path runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.mlm_native import native_lay_windows, native_lays_windows
from bionemo_wds.load.batch.model_inputs import attention_mask, position_ids, window_tokens


def as_numpy(value: Any) -> np.ndarray | None:
    """A numpy array or CPU tensor as numpy (no copy); None for a tensor on another device."""
    if isinstance(value, torch.Tensor):
        return value.numpy() if value.device.type == "cpu" else None
    return np.asarray(value)


def masked_window_inputs(
    batch: dict[str, Any],
    seq_length: int,
    control_tags: bool,
    fold_case: bool,
    soft_mask_weight: float | None,
    rules: LabelRules,
    codes: Any,
    megatron: bool = False,
) -> dict[str, Any] | None:
    """The ``hf`` masked-LM inputs of a compact batch of window rows (``input_ids`` with the masks laid
    over, ``attention_mask``, ``labels`` -100 but where predicted, ``position_ids``), given its ``mlm``
    codes (rows x the bases' width, over the bases; None: not a masked-LM batch). `megatron`:
    ``tokens`` (masked), ``labels`` (the unmasked tokens), ``loss_mask`` (1 where predicted),
    ``position_ids``, as `mlm.apply_masks` gives them. None where this path does not apply."""
    if codes is None:
        return None
    bases, tag_lengths, drawn = as_numpy(batch["bases"]), as_numpy(batch["tag_lengths"]), as_numpy(codes)
    if bases is None or tag_lengths is None or drawn is None or rules.min_real_fraction:
        return None
    if not len(bases) or drawn.shape != bases.shape or not native_lays_windows(drawn):
        return None
    if control_tags and not (tag_lengths == tag_lengths[0]).all():
        return None
    made = window_tokens(batch, seq_length, control_tags, fold_case, soft_mask_weight, rules)
    dropped = made.degenerate
    if made.lower is not None and soft_mask_weight == 0:  # soft-masked bases out of the loss too
        dropped = made.lower if dropped is None else dropped | made.lower
    labels = np.empty_like(made.tokens)
    seq = position_ids(seq_length).expand(len(made.lengths), seq_length)
    if megatron:
        loss_mask = np.zeros(made.tokens.shape, dtype=np.float32)
        lay = (made.tokens, labels, made.label_bases, drawn, dropped, made.first, made.lengths, loss_mask)
        native_lay_windows(*lay)
        return {
            "tokens": torch.from_numpy(made.tokens),
            "labels": torch.from_numpy(labels),
            "loss_mask": torch.from_numpy(loss_mask),
            "position_ids": seq,
        }
    native_lay_windows(made.tokens, labels, made.label_bases, drawn, dropped, made.first, made.lengths)
    return {
        "input_ids": torch.from_numpy(made.tokens),
        "attention_mask": attention_mask(made.first + made.lengths + 1, seq_length),
        "labels": torch.from_numpy(labels),
        "position_ids": seq,
    }
