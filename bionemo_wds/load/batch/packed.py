"""Packed batches: several documents per sample, laid out in the worker, expanded where they are used.

A packed sample holds documents one after another, each ``BOS tag SEP bases EOS`` (``BOS bases
EOS`` without control tags), then PAD to ``seq_length``. The compact packed batch (what crosses
from loader workers) is those tokens as uint8 ids plus, per document, its tokens and the tokens
before its first base; `packed_model_inputs` expands it on whatever device it is on:

- ``tokens``, ``labels`` (the next token within the document; PAD at each document's EOS and in
  the padding, so no label crosses a document boundary: a document's last base predicts its EOS,
  which is not trained, as in the unpacked layout), ``loss_mask`` (1 where the label is a base;
  the soft-mask weight for lower-case bases), ``position_ids`` restarting at 0 in every document
  (and in the padding after them);
- the boundaries as variable-length attention takes them: ``seq_lens`` (samples x documents,
  int32: each document's tokens, 0 after a sample's last document) and ``cu_seqlens`` (samples x
  documents + 1, int32: 0 then each document's end, -1 after a sample's last document, as NeMo's
  packed-sequence parameters pad them). `flat_cu_seqlens` gives the one-dimensional form over the
  whole batch that flash-attention's varlen functions and Transformer Engine's THD layout take;
  `document_mask` the dense causal block-diagonal mask for attention that takes a mask.

The label rules (`labels`: degenerate bases out of the loss, ...) apply to both forms, and with
``batch_format="hf"`` the batch is the one a `transformers` model takes (`hf`): ``input_ids``,
``labels`` not shifted, ``position_ids`` and the flattened varlen keys (`varlen_keys`).

Beside them both forms carry what the rows hold (`PACKED_FIELDS`): ``keys`` (every document's,
joined by ``;``), ``doc_rc`` (each document's strand), ``lengths`` (the row's bases, all its
documents together, as a window row's ``lengths`` counts its bases), ``dataset``, and ``seq_id``,
``start`` and ``rc`` of the row's first document.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bionemo_wds.core.tokenizer import PAD_ID
from bionemo_wds.load.batch.compact import Part, part_length
from bionemo_wds.load.batch.hf import IGNORE_INDEX, check_batch_format, finish
from bionemo_wds.load.batch.labels import (
    DEFAULT_RULES,
    NO_RULES,
    LabelRules,
    degenerate_bases,
    may_hold_degenerate,
    trained_labels,
)
from bionemo_wds.load.batch.model_inputs import CASE_OFFSET, LOWER_A, check_soft_mask_weight
from bionemo_wds.load.batch.packed_columns import (
    base_columns,
    boundaries,
    clear_tag_labels,
    document_positions,
)
from bionemo_wds.load.batch.packed_layout import DocumentArrays, lay_out
from bionemo_wds.load.batch.packed_native import native_packed_inputs
from bionemo_wds.load.batch.schema import Field, slot_nbytes

#: Documents per sample the transfer slots are sized for (a batch with more sends its document
#: columns with the message instead).
SLOT_DOCUMENTS = 32


#: The fields of a packed compact batch (dimensions: ``rows``, ``seq_length``, ``documents``).
PACKED_FIELDS: tuple[Field, ...] = (
    Field("tokens", np.dtype(np.uint8), ("rows", "seq_length"), "each row's documents as token ids, then PAD"),
    Field("doc_tokens", np.dtype(np.int32), ("rows", "documents"), "tokens of each document, 0 after the last"),
    Field("doc_prefix", np.dtype(np.int32), ("rows", "documents"), "tokens before each document's first base"),
    Field("doc_rc", np.dtype(bool), ("rows", "documents"), "whether each document was reverse-complemented"),
    Field("lengths", np.dtype(np.int32), ("rows",), "bases of each row, all its documents together"),
    Field("rc", np.dtype(bool), ("rows",), "whether the row's first document was reverse-complemented"),
    Field("start", np.dtype(np.int64), ("rows",), "the first document's first base in its sequence"),
    Field("seq_id", None, ("rows",), "the sequence of each row's first document"),
    Field("keys", None, ("rows",), "the keys of each row's documents, joined by ';'"),
    Field("filler", np.dtype(bool), ("rows",), "a row without a sample (padding, a damaged piece)"),
    Field("dataset", np.dtype(np.int16), ("rows",), "the source of each row (-1 for filler)"),
)


@dataclass(frozen=True)
class PackedSchema:
    """The layout of packed compact batches: `rows` samples of `seq_length` tokens, transfer slots
    sized for `documents` documents per sample (`PACKED_FIELDS`)."""

    rows: int
    seq_length: int
    documents: int = SLOT_DOCUMENTS
    extra: tuple[Field, ...] = ()  # fields beyond PACKED_FIELDS (``window`` wide: the token matrix's width)

    @property
    def window(self) -> int:
        """Bytes per row of the token matrix (what transfer sizing reads as a row's width)."""
        return self.seq_length

    @property
    def shared_nbytes(self) -> int:
        """Bytes one batch takes in a transfer slot (`schema.slot_nbytes`)."""
        sizes = {"rows": self.rows, "seq_length": self.seq_length, "window": self.seq_length}
        return slot_nbytes(PACKED_FIELDS + self.extra, sizes | {"documents": self.documents})


class PackedDocument:
    """One document of a packed sample: its bases as stored, its tag, strand, and where it comes from."""

    __slots__ = ("bases", "key", "rc", "seq_id", "start", "tag")

    def __init__(self, bases: Part, tag: bytes, rc: bool, seq_id: str, start: int, key: str):
        self.bases, self.tag, self.rc, self.seq_id, self.start, self.key = bases, tag, rc, seq_id, start, key


def compact_packed(rows: Sequence[Sequence[PackedDocument]], seq_length: int, control_tags: bool) -> dict[str, Any]:
    """The compact packed batch of `rows` (each a list of documents, laid out in order): the rows as
    `packed_layout.DocumentArrays`, laid out by `packed_layout.lay_out` (what the loaders call)."""
    docs = [doc for row in rows for doc in row]
    pieces: list[np.ndarray] = []
    for doc in docs:
        pieces.extend(doc.bases if isinstance(doc.bases, tuple) else (doc.bases,))
    counts = [len(doc.bases) if isinstance(doc.bases, tuple) else 1 for doc in docs]
    arrays = DocumentArrays(
        np.repeat(np.arange(len(rows), dtype=np.int64), [len(row) for row in rows]),
        [doc.seq_id for doc in docs],
        np.array([doc.start for doc in docs], dtype=np.int64),
        np.array([part_length(doc.bases) for doc in docs], dtype=np.int64),
        [doc.tag for doc in docs],
        pieces,
        np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64),
        [doc.key for doc in docs],
    )
    flip = np.array([bool(doc.rc) for doc in docs], dtype=bool)
    return lay_out(arrays, flip, arrays.tag, len(rows), seq_length, control_tags)


def document_columns(doc_tokens: torch.Tensor, seq_length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every token column of every sample: its document (the number of documents for the padding
    after them), its position within that document, and whether it lies in a document."""
    n = doc_tokens.shape[0]
    ends = torch.cumsum(doc_tokens.long(), dim=1)
    col = torch.arange(seq_length, device=doc_tokens.device).expand(n, seq_length).contiguous()
    doc = torch.searchsorted(ends, col, right=True)
    width = doc_tokens.shape[1]
    begin = torch.cat([torch.zeros_like(ends[:, :1]), ends], dim=1).gather(1, doc)
    inside = doc < width
    inside &= col < ends[:, -1:]
    return doc, col - begin, inside


def packed_model_inputs(
    batch: dict[str, Any],
    fold_case: bool = True,
    soft_mask_weight: float | None = None,
    rules: LabelRules = DEFAULT_RULES,
    batch_format: str = "megatron",
) -> dict[str, Any]:
    """Compact packed batch -> ``tokens``, ``labels``, ``loss_mask``, ``position_ids``, ``seq_lens``,
    ``cu_seqlens`` (module docstring), with the label `rules` (`labels.LabelRules`), on the device the
    batch is on: numpy slices per document on a CPU (`packed_inputs_cpu`), whole-batch tensor ops
    elsewhere (`packed_inputs_gather`). ``batch_format="hf"``: ``input_ids``, ``labels`` (not shifted),
    ``position_ids`` and the flattened varlen keys (`hf`, `varlen_keys`)."""
    check_soft_mask_weight(soft_mask_weight)
    check_batch_format(batch_format, soft_mask_weight)
    hf = batch_format == "hf"
    tokens = batch["tokens"]
    on_cpu = isinstance(tokens, np.ndarray) or tokens.device.type == "cpu"
    if on_cpu and not rules.min_real_fraction:
        out = packed_inputs_cpu(batch, fold_case, soft_mask_weight, rules, hf)
    else:  # a fraction of real bases per document, or an accelerator: the rules after the layout
        if on_cpu:
            laid = packed_inputs_cpu(batch, fold_case, soft_mask_weight, NO_RULES)
        else:
            laid = packed_inputs_gather(batch, fold_case, soft_mask_weight)
        out = finish(laid, rules, hf, packed=True)
    return out | varlen_keys(out, batch) if hf else out


def varlen_keys(inputs: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
    """The ``hf`` batch's flattened variable-length keys (`hf`): ``cu_seq_lens_q/k`` and
    ``max_length_q/k`` over the flattened batch (`flat_cu_seqlens` of the documents' token counts),
    and ``use_cache=False``."""
    sizes = torch.as_tensor(batch["doc_tokens"]).to(inputs["input_ids"].device)
    cu, longest = flat_cu_seqlens({"seq_lens": sizes, "tokens": inputs["input_ids"]})
    return {
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
        "use_cache": False,
    }


def packed_inputs_cpu(
    batch: dict[str, Any],
    fold_case: bool,
    soft_mask_weight: float | None,
    rules: LabelRules = DEFAULT_RULES,
    hf: bool = False,
) -> dict[str, Any]:
    """Whole-batch numpy, no loop over documents: every column's place (in a document's bases or not,
    its position) is expanded from a few numbers per document; labels are the tokens shifted by one
    with PAD written at each EOS and over the padding (``hf``: the tokens where they are bases, -100
    elsewhere). The case pass runs only when one max over the uint8 tokens finds a lower-case byte
    (the usual batch has none); the shifts are made in uint8 and widened once, so each int64 output
    costs one pass, and the loss mask is one `bytes.translate` of the uint8 labels (`trained_labels`:
    specials, PAD and, by default, degenerate bases 0), its tag columns cleared by index. Every label
    rule but a fraction of real bases per document (`labels.LabelRules.apply`, after)."""
    raw = np.asarray(batch["tokens"])
    sizes = np.asarray(batch["doc_tokens"]).astype(np.int64)
    prefix = np.asarray(batch["doc_prefix"]).astype(np.int64)
    n, seq_length = raw.shape
    cased = fold_case or soft_mask_weight is not None or rules.uppercase_labels
    is_base = base_columns(sizes, prefix, seq_length) if hf else None
    lower = None  # lower-case bases, when the batch has any (one max over the uint8 tokens decides)
    if cased and raw.size and int(raw.max()) >= LOWER_A:
        is_base = is_base if is_base is not None else base_columns(sizes, prefix, seq_length)
        lower = is_base & (raw >= LOWER_A)
        if not lower.any():
            lower = None
    if lower is None and not hf:  # the usual batch: one pass in C where built
        fused = native_packed_inputs(raw, sizes, prefix, rules.mask_degenerate_bases)
        if fused is not None:
            return fused
    ids = raw if lower is None or not fold_case else np.where(lower, raw - np.uint8(CASE_OFFSET), raw)
    tokens = ids.astype(np.int64)
    # the labels' ids: upper case when asked (the model's keep their case)
    label_ids = ids
    if lower is not None and rules.uppercase_labels and not fold_case:
        label_ids = np.where(lower, ids - np.uint8(CASE_OFFSET), ids)
    positions = torch.from_numpy(document_positions(sizes, seq_length))
    if hf:
        assert is_base is not None
        dropped = None  # bases out of the loss: degenerate, or soft-masked with weight 0
        if rules.mask_degenerate_bases and may_hold_degenerate(raw):
            dropped = degenerate_bases(np.where(is_base, raw, np.uint8(PAD_ID)))
        labels = np.where(is_base, tokens if label_ids is ids else label_ids.astype(np.int64), IGNORE_INDEX)
        for out in (dropped, lower if soft_mask_weight == 0 else None):
            if out is not None:
                labels[out] = IGNORE_INDEX
        return {"input_ids": torch.from_numpy(tokens), "labels": torch.from_numpy(labels), "position_ids": positions}
    # labels: the next token, then PAD at every EOS (no label crosses a document) and in the padding
    ends = np.cumsum(sizes, axis=1)
    shifted = np.empty_like(label_ids)
    shifted.ravel()[:-1] = label_ids.ravel()[1:]
    shifted[:, -1] = PAD_ID
    row_at = np.arange(0, n * seq_length, seq_length)[:, None]
    shifted.ravel()[(ends - 1 + row_at)[sizes > 0]] = PAD_ID
    for i, used in enumerate(ends[:, -1].tolist()):  # per row: the padding (PAD already, unless a caller's differs)
        if used < seq_length:
            shifted[i, used:] = PAD_ID
    # where the label is a base (a real one when degenerate bases are masked); tag bytes are letters too
    loss_mask = trained_labels(shifted, rules.mask_degenerate_bases).astype(np.float32)
    clear_tag_labels(loss_mask, sizes, prefix)
    if lower is not None and soft_mask_weight is not None:
        loss_mask[:, :-1][lower[:, 1:]] *= np.float32(soft_mask_weight)  # a degenerate base's 0 stays 0
    return {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(shifted.astype(np.int64)),
        "loss_mask": torch.from_numpy(loss_mask),
        "position_ids": positions,
        **boundaries(torch.from_numpy(sizes)),
    }


def packed_inputs_gather(batch: dict[str, Any], fold_case: bool, soft_mask_weight: float | None) -> dict[str, Any]:
    """Whole-batch tensor ops (searchsorted/gather/where): no per-document work, for an accelerator."""
    raw = torch.as_tensor(batch["tokens"])
    doc_tokens = torch.as_tensor(batch["doc_tokens"]).to(raw.device)
    doc_prefix = torch.as_tensor(batch["doc_prefix"]).to(raw.device).long()
    n, seq_length = raw.shape
    doc, position, inside = document_columns(doc_tokens, seq_length)
    at = doc.clamp(max=doc_tokens.shape[1] - 1)
    size = doc_tokens.long().gather(1, at)
    is_base = inside & (position >= doc_prefix.gather(1, at)) & (position < size - 1)
    tokens = raw.long()
    lower = is_base & (tokens >= LOWER_A)
    if fold_case:
        tokens = torch.where(lower, tokens - CASE_OFFSET, tokens)
    labels = torch.full_like(tokens, PAD_ID)
    within = inside & (position < size - 1)  # the next token is in the same document
    labels[:, :-1] = torch.where(within[:, :-1], tokens[:, 1:], labels[:, :-1])
    loss_mask = torch.zeros((n, seq_length), dtype=torch.float32, device=raw.device)
    loss_mask[:, :-1] = is_base[:, 1:].float()
    if soft_mask_weight is not None:
        label_lower = torch.zeros_like(lower)
        label_lower[:, :-1] = lower[:, 1:]
        loss_mask = torch.where(label_lower, torch.full_like(loss_mask, soft_mask_weight), loss_mask)
    return {
        "tokens": tokens,
        "labels": labels,
        "loss_mask": loss_mask,
        "position_ids": position,
        **boundaries(doc_tokens),
    }


def flat_cu_seqlens(batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
    """The documents of a packed batch as one sequence of segments over the flattened batch
    (``tokens.view(-1)``), each sample's padding a segment of its own: (cu_seqlens int32 of
    segments + 1, the longest segment), as flash-attention's ``flash_attn_varlen_func`` and Transformer
    Engine's THD layout take them."""
    seq_lens = torch.as_tensor(batch["seq_lens"])
    n, seq_length = seq_lens.shape[0], batch["tokens"].shape[1]
    pad = seq_length - seq_lens.sum(dim=1, keepdim=True)
    segments = torch.cat([seq_lens, pad.to(seq_lens.dtype)], dim=1).reshape(-1)
    segments = segments[segments > 0]
    cu = torch.cat([segments.new_zeros(1), torch.cumsum(segments, 0)]).int()
    assert int(cu[-1]) == n * seq_length
    return cu, int(segments.max()) if len(segments) else 0


def document_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """The dense causal mask of packed samples (samples x seq x seq, True where a token may attend):
    each token sees the tokens before it in its own document. From ``position_ids`` alone (they
    restart at 0 in every document): tokens i >= j share a document when no position between them
    restarts."""
    s = position_ids.shape[1]
    starts = torch.cumsum((position_ids == 0).int(), dim=1)  # document number of each column
    same = starts[:, :, None] == starts[:, None, :]
    causal = torch.ones((s, s), dtype=torch.bool, device=position_ids.device).tril()
    return same & causal


def unpack_lengths(batch: dict[str, Any]) -> list[list[int]]:
    """Tokens of each document of each sample (for logs and tests)."""
    return [[int(x) for x in row if x > 0] for row in np.asarray(batch["doc_tokens"])]
