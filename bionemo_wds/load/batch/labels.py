"""Which labels are trained: degenerate bases out of the loss, labels upper-cased, and samples with
too few real bases left out.

The rule is the one of the Hugging Face genomic collator of bionemo-recipes (``GenomicDataCollator``:
``mask_degenerate_bases``, ``uppercase_labels``), stated on our shifted labels: a label that is not
A, C, G or T (either case) is not trained (``loss_mask`` 0), so a model is never taught to predict N,
R, Y, ...; specials and control tags are never trained anyway. ``uppercase_labels`` makes a
lower-case (soft-masked) base's label its upper-case letter, for a model that sees the case
(``fold_case=False``) but is to predict bases only.

``min_real_fraction`` takes a sample (a packed sample: each document) out of the loss when fewer
than that fraction of its trained bases are real (A/C/G/T): a window of a gap of Ns trains nothing.
It is decided here, on the batch, not in the epoch plan: the plan deals sample ids from counts alone
(every rank the same number of batches, an epoch's length by arithmetic, resumable by a count), and
which bases a window holds is only known once it is read. So such a sample keeps its place in its
batch, with every label out of the loss, as a filler row does.

Two forms of the same rules: the batch builders apply them while they lay a batch out on a CPU
(`degenerate_bases`: one pass over the compact uint8 bases, and nothing more for the usual batch,
which has no degenerate base), and `LabelRules.apply` applies them to a batch already laid out, with
whole-batch tensor ops, on any device (an accelerator; the CPU's slower layouts). Tests hold the two
equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bionemo_wds.core.byte_lookup import holds_other_than, translate_in_place
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID
from bionemo_wds.errors import OptionError

#: The bases that are trained when degenerate bases are masked: A, C, G, T in either case.
REAL_BASES = b"ACGTacgt"


def _not_real() -> np.ndarray:
    table = np.ones(256, dtype=bool)
    table[np.frombuffer(REAL_BASES, dtype=np.uint8)] = False
    return table


#: ``NOT_REAL[id]``: the token id is not a real base (a degenerate base, a special, a tag byte).
NOT_REAL: np.ndarray = _not_real()
#: `NOT_REAL` as a tensor, per device (made once each).
_TABLES: dict[torch.device, torch.Tensor] = {}
#: What a compact batch's base matrix holds besides degenerate bases: real bases and its padding.
NOT_DEGENERATE = REAL_BASES + bytes([PAD_ID])
#: The specials a packed token matrix holds besides its bases and tags.
SPECIALS = bytes([EOS_ID, PAD_ID, BOS_ID, SEP_ID, UNK_ID])


def degenerate_bases(bases: np.ndarray) -> np.ndarray | None:
    """Where a compact base matrix (uint8 ids, PAD after each row's bases) holds a base that is not
    A/C/G/T, or None when it holds none: one pass that asks whether any byte is neither a real base
    nor PAD (`byte_lookup.holds_other_than`) decides it, at memory speed, so a batch of real bases
    pays nothing more."""
    if not holds_other_than(bases, NOT_DEGENERATE):
        return None
    return NOT_REAL[bases] & (bases != PAD_ID)


#: Byte tables of packed label ids (`byte_lookup.translate_in_place`), by whether degenerate bases are
#: masked: 1 where the label is trained (a real base; any base when they are not masked), 0 elsewhere
#: (specials, PAD).
TRAINED_TABLES = {
    True: bytes(int(not NOT_REAL[b]) for b in range(256)),
    False: bytes(int(b > UNK_ID) for b in range(256)),
}


def trained_labels(labels: np.ndarray, mask_degenerate: bool) -> np.ndarray:
    """Where uint8 labels (any shape) are trained, as uint8 0/1 of the same shape: one
    byte-table pass (`TRAINED_TABLES`), which also decides the degenerate bases, at about the
    cost of the check that a batch holds none. Tag bytes are letters too: the caller clears them."""
    done = np.array(labels, dtype=np.uint8, order="C")  # a copy: the labels stay as they are
    translate_in_place(done, TRAINED_TABLES[mask_degenerate])
    return done


def may_hold_degenerate(tokens: np.ndarray) -> bool:
    """Whether a packed token matrix (uint8: specials, tags and bases) holds any byte but a real base
    and the specials: one byte-table pass; False says it holds no degenerate base."""
    return holds_other_than(tokens, NOT_DEGENERATE + SPECIALS)


def degenerate_in_documents(tokens: np.ndarray, is_base: np.ndarray) -> np.ndarray | None:
    """`degenerate_bases` of a packed token matrix (uint8: specials, tags and bases), where
    `is_base`: one pass decides that a batch without tags or degenerate bases has none; with tags,
    the bases are picked out first (tag bytes are letters too)."""
    if not may_hold_degenerate(tokens):
        return None
    return degenerate_bases(np.where(is_base, tokens, np.uint8(PAD_ID)))


def not_real(labels: torch.Tensor) -> torch.Tensor:
    """Where `labels` (token ids, any shape, any device) are not a real base: one table lookup."""
    table = _TABLES.get(labels.device)
    if table is None:
        table = _TABLES[labels.device] = torch.from_numpy(NOT_REAL).to(labels.device)
    return table[labels]


@dataclass(frozen=True)
class LabelRules:
    """The label rules of a dataset (module docstring); checked when made.

    Args:
        mask_degenerate_bases: ``loss_mask`` 0 where the label is not A/C/G/T (either case).
        uppercase_labels: a lower-case base's label is its upper-case id (the tokens keep their case).
        min_real_fraction: a sample (a packed sample's document) whose trained bases are less than
            this fraction A/C/G/T has no label trained (0: none is left out). A base whose weight is 0
            (``soft_mask_weight=0``) is not trained, so not counted.
    """

    mask_degenerate_bases: bool = True
    uppercase_labels: bool = False
    min_real_fraction: float = 0.0

    def __post_init__(self) -> None:
        fraction = self.min_real_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
            raise OptionError(f"min_real_fraction must be a number in [0, 1], got {fraction!r}")

    def apply(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """`inputs` (``labels``, ``loss_mask``, ``position_ids`` as the builders make them without
        rules) with the rules applied: ``labels`` replaced when upper-cased, ``loss_mask`` changed in
        place (the builders make a new one for every batch)."""
        labels, mask = inputs["labels"], inputs["loss_mask"]
        if not (self.uppercase_labels or self.mask_degenerate_bases or self.min_real_fraction > 0):
            return inputs
        trained = mask > 0
        if self.uppercase_labels:  # base labels only: a tag's bytes stay what they are
            labels = torch.where(trained & (labels >= ord("a")), labels - (ord("a") - ord("A")), labels)
            inputs["labels"] = labels
        if self.min_real_fraction > 0:
            short = too_few_real(trained, trained & ~not_real(labels), inputs["position_ids"], self.min_real_fraction)
            mask.masked_fill_(short, 0.0)
        if self.mask_degenerate_bases:  # where the mask is 0 already, 0 again: no `trained` needed
            mask.masked_fill_(not_real(labels), 0.0)
        return inputs


#: The default rules (degenerate bases out of the loss), and none (the batch as it is laid out).
DEFAULT_RULES = LabelRules()
NO_RULES = LabelRules(mask_degenerate_bases=False)


def too_few_real(
    trained: torch.Tensor, real: torch.Tensor, position_ids: torch.Tensor, fraction: float
) -> torch.Tensor:
    """Where a trained column lies in a document whose trained columns are less than `fraction` real.

    A document is a run of columns whose position ids count up from 0 (a window row is one; a
    packed row restarts them at every document, and in the padding after the last). Each trained
    base is one trained label column of its document, so the columns count its bases."""
    doc = torch.cumsum(position_ids == 0, dim=1)  # 1, 2, ... per row: each column's document
    n, width = doc.shape
    total = torch.zeros((n, width + 1), dtype=torch.int32, device=doc.device)
    reals = torch.zeros_like(total)
    total.scatter_add_(1, doc, trained.to(torch.int32))
    reals.scatter_add_(1, doc, real.to(torch.int32))
    short = reals.to(torch.float64) < fraction * total.to(torch.float64)
    return short.gather(1, doc) & trained
