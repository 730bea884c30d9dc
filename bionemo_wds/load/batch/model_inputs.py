"""Compact batches to model inputs: Eden's token layout, on whatever device the batch is on.

Loaders yield compact uint8 batches (`stages.collate_compact`); `to_model_inputs` expands them
where they are going to be used (the data modules call it in ``on_after_batch_transfer``), so the
int64 tensors, 8x larger, never cross a process boundary or the host-to-device copy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UPPERCASE_TABLE
from bionemo_wds.errors import OptionError
from bionemo_wds.load.batch.hf import IGNORE_INDEX, check_batch_format, finish
from bionemo_wds.load.batch.labels import DEFAULT_RULES, NO_RULES, LabelRules, degenerate_bases
from bionemo_wds.load.batch.to_torch import SampleNames

#: The smallest lower-case letter: a base id at or above it is soft-masked.
LOWER_A = ord("a")
#: Lower case minus upper case in ASCII.
CASE_OFFSET = ord("a") - ord("A")
#: ``UPPER_IDS[id]``: the id with its letter upper-cased (every other byte unchanged).
UPPER_IDS: np.ndarray = np.frombuffer(UPPERCASE_TABLE, dtype=np.uint8)


def to_model_inputs(
    batch: dict[str, Any],
    seq_length: int,
    control_tags: bool = True,
    fold_case: bool = True,
    soft_mask_weight: float | None = None,
    rules: LabelRules = DEFAULT_RULES,
    batch_format: str = "megatron",
) -> dict[str, Any]:
    """Compact batch -> Eden's layout, on whatever device the batch is on.

    ``BOS + tag + SEP + bases + EOS`` padded with PAD to `seq_length` (``BOS + bases + EOS`` when
    `control_tags` is False); ``labels`` are the tokens shifted left by one with PAD last;
    ``loss_mask`` is 1 exactly where the label is a base; ``position_ids`` count from 0 (an expanded
    view, no memory per row). Keys, seq ids, starts and rc flags pass through for tracing (keys and
    seq ids as `SampleNames`, so Lightning finds the batch size without ``self.log(batch_size=)``).

    Soft-masked (lower-case) bases: `fold_case` gives the model their upper-case ids (tags are never
    folded); with a `soft_mask_weight` w the loss mask is w where the label is a lower-case base
    (Evo2's ``lowercase_loss_reweighting``), 1 for other bases, 0 for specials, tags and padding.
    `rules` (`labels.LabelRules`) take degenerate bases out of the loss (by default), upper-case
    labels, or leave out windows of too few real bases. ``batch_format="hf"``: the same layout as a
    `transformers` model takes it (`hf`: ``input_ids``, ``attention_mask``, ``labels`` not shifted,
    ``position_ids``; nothing passes through).
    """
    check_soft_mask_weight(soft_mask_weight)
    check_batch_format(batch_format, soft_mask_weight)
    bases = batch["bases"]
    on_cpu = isinstance(bases, np.ndarray) or bases.device.type == "cpu"
    build = model_inputs_cpu if on_cpu else model_inputs_gather
    hf = batch_format == "hf"
    out = build(batch, seq_length, control_tags, fold_case, soft_mask_weight, rules, hf)
    for passthrough in () if hf else ("keys", "seq_id", "start", "rc", "lengths", "dataset"):
        if passthrough in batch:
            value = batch[passthrough]
            if isinstance(value, np.ndarray):
                value = torch.from_numpy(value)
            elif isinstance(value, (list, tuple)):
                value = SampleNames(value)
            out[passthrough] = value
    return out


def check_soft_mask_weight(weight: float | None) -> None:
    """A soft-mask weight is None (no distinction) or a finite number in [0, 1]."""
    if weight is not None and not (isinstance(weight, (int, float)) and 0.0 <= float(weight) <= 1.0):
        raise OptionError(f"soft_mask_weight must be None or a number in [0, 1], got {weight!r}")


def soft_masked(bases: np.ndarray) -> np.ndarray | None:
    """Where `bases` (uint8 ids, PAD-padded) are lower-case, or None when none is (one max() pass:
    upper-case data pays nothing more). Every lower-case IUPAC letter is >= ``a`` and every upper-case
    letter and special is below it."""
    if not bases.size or int(bases.max()) < LOWER_A:
        return None
    return bases >= LOWER_A


def _np(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.numpy()


def _layout(lengths: np.ndarray, tag_lengths: np.ndarray, seq_length: int, control_tags: bool) -> np.ndarray:
    """First base column of each row; refuses rows that do not fit."""
    prefix = tag_lengths + 2 if control_tags else np.ones_like(lengths)
    if len(lengths):
        needed = int((prefix + lengths).max()) + 1
        if needed > seq_length:
            raise OptionError(f"a sample needs {needed} tokens but seq_length is {seq_length}")
    return prefix


def model_inputs_cpu(
    batch: dict[str, Any],
    seq_length: int,
    control_tags: bool,
    fold_case: bool = True,
    soft_mask_weight: float | None = None,
    rules: LabelRules = DEFAULT_RULES,
    hf: bool = False,
) -> dict[str, Any]:
    """numpy slices over the whole batch, the fastest form on a CPU.

    When every row has the same tag length (always so without tags) the rows differ only in where
    EOS goes: tokens and labels are each written from the uint8 bases by a few whole-batch slice
    copies (`write_layout`; labels are not copied from the int64 tokens, which costs more memory
    traffic), EOS placed with one fancy index, and the label rules and the ``hf`` format applied on
    the way (`uniform_layout`). Otherwise a loop per row, the rules and the format applied after it
    (`labels.LabelRules.apply`, `hf.from_megatron`), as they are for a fraction of real bases per
    sample. On a CPU the gather/where form below is several times slower (a dozen full-size torch
    kernels).
    """
    lengths, tlen = _np(batch["lengths"]).astype(np.int64), _np(batch["tag_lengths"]).astype(np.int64)
    if not control_tags:
        tlen = np.zeros_like(lengths)
    if len(lengths) and (tlen == tlen[0]).all():
        if not rules.min_real_fraction:
            return uniform_layout(batch, seq_length, control_tags, fold_case, soft_mask_weight, rules, hf)
        out = uniform_layout(batch, seq_length, control_tags, fold_case, soft_mask_weight, NO_RULES, False)
    else:
        out = rowwise_layout(batch, seq_length, control_tags, fold_case, soft_mask_weight)
    return finish(out, rules, hf, packed=False)


class WindowTokens(NamedTuple):
    """The model's ids of window rows whose bases all start at one column, and what their labels are
    made of (`window_tokens`)."""

    #: int64 rows x seq_length: BOS, tag, SEP, bases, EOS, PAD (`write_layout`).
    tokens: np.ndarray
    #: uint8 rows x width: the bases the labels hold (upper case under ``uppercase_labels``).
    label_bases: np.ndarray
    #: Where the bases are soft-masked (lower case), or None (none is, or nothing asks).
    lower: np.ndarray | None
    #: Where they are degenerate (not A/C/G/T) and out of the loss by the rules, or None.
    degenerate: np.ndarray | None
    #: The first base column of every row.
    first: int
    #: Each row's number of bases (int64).
    lengths: np.ndarray


def window_tokens(
    batch: dict[str, Any],
    seq_length: int,
    control_tags: bool,
    fold_case: bool,
    soft_mask_weight: float | None,
    rules: LabelRules,
) -> WindowTokens:
    """The tokens of a compact batch whose rows all have one tag length, by whole-batch slices, and the
    parts of its labels: what `uniform_layout` and the masked-LM layout (`mlm_windows`) share."""
    raw, lengths = _np(batch["bases"]), _np(batch["lengths"]).astype(np.int64)
    tags, tlen = _np(batch["tags"]), _np(batch["tag_lengths"]).astype(np.int64)
    t = int(tlen[0]) if control_tags else 0
    lower = soft_masked(raw) if (fold_case or soft_mask_weight is not None or rules.uppercase_labels) else None
    bases = UPPER_IDS[raw] if lower is not None and fold_case else raw
    # the labels' bases: upper case when asked (the model's ids keep their case)
    label_bases = UPPER_IDS[raw] if lower is not None and rules.uppercase_labels and not fold_case else bases
    degenerate = degenerate_bases(raw) if rules.mask_degenerate_bases else None
    p = int(_layout(lengths, np.full_like(lengths, t), seq_length, control_tags)[0])
    tokens = np.empty((len(lengths), seq_length), dtype=np.int64)
    write_layout(tokens, 0, bases, tags[:, :t], p, lengths, control_tags)
    return WindowTokens(tokens, label_bases, lower, degenerate, p, lengths)


def uniform_layout(
    batch: dict[str, Any],
    seq_length: int,
    control_tags: bool,
    fold_case: bool,
    soft_mask_weight: float | None,
    rules: LabelRules,
    hf: bool,
) -> dict[str, Any]:
    """`model_inputs_cpu` of a batch whose rows all have one tag length (and no fraction of real
    bases to check): every label rule but that one, and either format, by whole-batch slices."""
    tokens, label_bases, lower, degenerate, p, lengths = window_tokens(
        batch, seq_length, control_tags, fold_case, soft_mask_weight, rules
    )
    n, raw = len(lengths), _np(batch["bases"])
    if hf:  # labels not shifted: a base where its column is a base, -100 elsewhere
        labels = np.empty_like(tokens)
        write_hf_labels(labels, label_bases, p, lengths)
        region = labels[:, p : min(p + raw.shape[1], seq_length)]
        for dropped in (degenerate, lower if soft_mask_weight == 0 else None):
            if dropped is not None:
                region[dropped[:, : region.shape[1]]] = IGNORE_INDEX  # padding is never either
        return {
            "input_ids": torch.from_numpy(tokens),
            "attention_mask": attention_mask(p + lengths + 1, seq_length),
            "labels": torch.from_numpy(labels),
            "position_ids": position_ids(seq_length).expand(n, seq_length),
        }
    # tokens, then labels (the tokens shifted left by one, PAD last) written from the uint8 bases
    # the same way: half the cost of copying the int64 tokens over
    labels = np.empty_like(tokens)
    t = int(_np(batch["tag_lengths"])[0]) if control_tags else 0
    write_layout(labels, 1, label_bases, _np(batch["tags"])[:, :t], p, lengths, control_tags)
    # the mask by row slices on zeroed memory: half the cost of a (columns < stop) comparison
    loss_mask = np.zeros((n, seq_length), dtype=np.float32)
    if (lengths == lengths[0]).all():  # the usual batch: full windows only
        loss_mask[:, p - 1 : p - 1 + int(lengths[0])] = 1.0
    else:
        for i, m in enumerate(lengths.tolist()):
            loss_mask[i, p - 1 : p - 1 + m] = 1.0
    # the label of column c is base c + 1 - p: the base columns shifted left by one
    weights = loss_mask[:, p - 1 : min(p - 1 + raw.shape[1], seq_length)]
    if lower is not None and soft_mask_weight is not None:
        weights[lower[:, : weights.shape[1]]] = soft_mask_weight  # padding is never lower-case
    if degenerate is not None:
        weights[degenerate[:, : weights.shape[1]]] = 0.0
    return {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "loss_mask": torch.from_numpy(loss_mask),
        "position_ids": position_ids(seq_length).expand(n, seq_length),
    }


def rowwise_layout(
    batch: dict[str, Any], seq_length: int, control_tags: bool, fold_case: bool, soft_mask_weight: float | None
) -> dict[str, Any]:
    """`model_inputs_cpu` of a batch whose rows differ in tag length: a loop per row, no label rules."""
    bases, lengths = _np(batch["bases"]), _np(batch["lengths"]).astype(np.int64)
    tags, tlen = _np(batch["tags"]), _np(batch["tag_lengths"]).astype(np.int64)
    lower = soft_masked(bases) if (fold_case or soft_mask_weight is not None) else None
    if lower is not None and fold_case:
        bases = UPPER_IDS[bases]
    if not control_tags:
        tlen = np.zeros_like(lengths)
    n = len(lengths)
    prefix = _layout(lengths, tlen, seq_length, control_tags)
    tokens = np.empty((n, seq_length), dtype=np.int64)
    loss_mask = np.zeros((n, seq_length), dtype=np.float32)
    tokens[:, 0] = BOS_ID
    for i in range(n):
        p, m, t = int(prefix[i]), int(lengths[i]), int(tlen[i])
        if control_tags:
            tokens[i, 1 : 1 + t] = tags[i, :t]
            tokens[i, 1 + t] = SEP_ID
        tokens[i, p : p + m] = bases[i, :m]
        tokens[i, p + m] = EOS_ID
        tokens[i, p + m + 1 :] = PAD_ID
        loss_mask[i, p - 1 : p - 1 + m] = 1.0
        if lower is not None and soft_mask_weight is not None:
            loss_mask[i, p - 1 : p - 1 + m][lower[i, :m]] = soft_mask_weight
    labels = np.empty_like(tokens)
    labels[:, :-1] = tokens[:, 1:]
    labels[:, -1] = PAD_ID
    return {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "loss_mask": torch.from_numpy(loss_mask),
        "position_ids": position_ids(seq_length).expand(n, seq_length),
    }


def write_hf_labels(out: np.ndarray, bases: np.ndarray, p: int, lengths: np.ndarray) -> None:
    """The ``hf`` labels of rows whose bases all start at column `p`: the bases, -100 everywhere
    else (BOS, tag, SEP, EOS, padding)."""
    width = min(bases.shape[1], out.shape[1] - p)
    out[:, :p] = IGNORE_INDEX
    out[:, p : p + width] = bases[:, :width]
    out[:, p + width :] = IGNORE_INDEX
    for i, m in enumerate(lengths.tolist()):  # rows shorter than the window carry PAD after their bases
        if m < width:  # a fill per short row (a whole-batch compare and mask cost two passes over it)
            out[i, p + max(m, 0) : p + width] = IGNORE_INDEX


#: One attention-mask row by (seq_length, end): the usual batch's rows all end alike.
_ATTENTION_ROWS: dict[tuple[int, int], torch.Tensor] = {}


def attention_mask(ends: np.ndarray, seq_length: int) -> torch.Tensor:
    """int64 rows of 1 before each row's end (after its EOS), 0 after: when all rows end alike (the
    usual batch), an expanded view of one row made once per (seq_length, end), as `position_ids`."""
    if (ends == ends[0]).all():
        key = (seq_length, int(ends[0]))
        if key not in _ATTENTION_ROWS:
            _ATTENTION_ROWS[key] = torch.from_numpy((np.arange(seq_length) < key[1]).astype(np.int64))
        return _ATTENTION_ROWS[key].expand(len(ends), seq_length)
    # zeroed rows, 1s filled per row: a whole-batch compare and its cast to int64 took about 25% longer
    out = np.zeros((len(ends), seq_length), dtype=np.int64)
    for i, end in enumerate(np.clip(ends, 0, seq_length).tolist()):
        out[i, :end] = 1
    return torch.from_numpy(out)


def write_layout(
    out: np.ndarray, shift: int, bases: np.ndarray, tags: np.ndarray, p: int, lengths: np.ndarray, control_tags: bool
) -> None:
    """Write every row's tokens from token column `shift` on into `out` (0: the tokens; 1: the labels,
    the tokens shifted left by one with PAD last), for rows whose bases all start at column `p`
    after tags of the width of `tags`: BOS, tag, SEP, the PAD-padded bases, PAD to the end, and EOS
    after each row's `lengths` bases. Whole-batch slice copies; only EOS is placed per row."""
    width = out.shape[1]

    def put(first: int, stop: int, value: Any) -> None:  # token columns [first, stop)
        lo, hi = max(first - shift, 0), min(stop - shift, width)
        if lo < hi:
            out[:, lo:hi] = value if np.isscalar(value) else value[:, lo + shift - first : hi + shift - first]

    t = tags.shape[1]
    put(0, 1, BOS_ID)
    if control_tags:
        put(1, 1 + t, tags)
        put(1 + t, 2 + t, SEP_ID)
    end = min(p + bases.shape[1], width + shift)  # rows shorter than the batch carry PAD already
    put(p, end, bases[:, : end - p])
    put(end, width + shift, PAD_ID)  # the column after the last token is PAD (the last label)
    out[np.arange(len(lengths)), p + lengths - shift] = EOS_ID


#: ``torch.arange(seq_length)`` by length: every batch's position ids are an expanded view of one.
_POSITIONS: dict[int, torch.Tensor] = {}


def position_ids(seq_length: int) -> torch.Tensor:
    """0 .. seq_length - 1 (int64), made once per length (batches expand it: no memory per row)."""
    if seq_length not in _POSITIONS:
        _POSITIONS[seq_length] = torch.arange(seq_length)
    return _POSITIONS[seq_length]


def model_inputs_gather(
    batch: dict[str, Any],
    seq_length: int,
    control_tags: bool,
    fold_case: bool = True,
    soft_mask_weight: float | None = None,
    rules: LabelRules = DEFAULT_RULES,
    hf: bool = False,
) -> dict[str, Any]:
    """Whole-batch tensor ops (gather/where): no per-row work, which is what an accelerator wants;
    the label rules and the format applied after the layout (`hf.finish`)."""
    bases, lengths = batch["bases"], batch["lengths"].long()
    lower = bases >= LOWER_A
    if fold_case:
        bases = torch.where(lower, bases - CASE_OFFSET, bases)
    device = bases.device
    n = bases.shape[0]
    col = torch.arange(seq_length, device=device).expand(n, seq_length)
    tlen = batch["tag_lengths"].long() if control_tags else torch.zeros_like(lengths)
    tags = batch["tags"]
    prefix = torch.from_numpy(_layout(lengths.cpu().numpy(), tlen.cpu().numpy(), seq_length, control_tags)).to(device)
    tokens = torch.full((n, seq_length), PAD_ID, dtype=torch.int64, device=device)
    tokens[:, 0] = BOS_ID
    p = prefix[:, None]
    is_base = (col >= p) & (col < p + lengths[:, None])
    if bases.shape[1]:
        base_idx = (col - p).clamp(0, bases.shape[1] - 1)
        tokens = torch.where(is_base, bases.long().gather(1, base_idx), tokens)
    if control_tags:
        if tags.shape[1]:
            is_tag = (col >= 1) & (col < 1 + tlen[:, None])
            tag_idx = (col - 1).clamp(0, tags.shape[1] - 1)
            tokens = torch.where(is_tag, tags.long().gather(1, tag_idx), tokens)
        tokens = torch.where(col == 1 + tlen[:, None], torch.full_like(tokens, SEP_ID), tokens)
    tokens = torch.where(col == p + lengths[:, None], torch.full_like(tokens, EOS_ID), tokens)
    labels = torch.full_like(tokens, PAD_ID)
    labels[:, :-1] = tokens[:, 1:]
    label_is_base = torch.zeros_like(is_base)
    label_is_base[:, :-1] = is_base[:, 1:]
    loss_mask = label_is_base.to(torch.float32)
    if soft_mask_weight is not None and bases.shape[1]:
        is_lower = is_base & lower.gather(1, (col - p).clamp(0, bases.shape[1] - 1))
        label_is_lower = torch.zeros_like(is_lower)
        label_is_lower[:, :-1] = is_lower[:, 1:]
        loss_mask = torch.where(label_is_lower, torch.full_like(loss_mask, soft_mask_weight), loss_mask)
    out = {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": col}
    return finish(out, rules, hf, packed=False)
