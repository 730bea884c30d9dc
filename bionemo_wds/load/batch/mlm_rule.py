"""Masked-LM rules: the objective's options, the vocabulary a rule masks over, and `MaskingRule`, which
checks them (`batch.mlm` draws by a rule; `mlm_native` and numpy both read it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID
from bionemo_wds.errors import OptionError

#: The training objectives: causal (next token; today's batches) and masked-LM.
OBJECTIVES = ("clm", "mlm")
#: What a chosen token becomes: BERT's 80/10/10, or the mask token always.
REPLACE_RULES = ("bert", "mask")
#: BERT's shares of a chosen token: the mask token, then a random token; the rest keep the token.
BERT_MASK_SHARE, BERT_RANDOM_SHARE = 0.8, 0.1
#: Values of the ``mlm`` matrix: nothing predicted here; predicted, the input left as it is.
MLM_NONE, MLM_KEEP = -1, -2
#: The label `transformers` (and torch's cross-entropy) leaves out of the loss.
IGNORE_INDEX = -100
#: Mixed into a token's hash to draw its replacement (independent of the draw that chose it).
REPLACE_MIX = np.uint64(0xD1B54A32D192ED03)


class MaskVocabulary(Protocol):
    """What masking needs of a tokenizer (the tokenizers of `load` have these attributes)."""

    name: str
    vocab_size: int
    pad_id: int
    mask_id: int | None
    special_ids: frozenset[int]
    kmer: int | None
    overlapping: bool


@dataclass
class Vocabulary:
    """A vocabulary described by its attributes alone (`MaskVocabulary`)."""

    name: str
    vocab_size: int
    pad_id: int
    mask_id: int | None
    special_ids: frozenset[int]
    kmer: int | None = None
    overlapping: bool = False


#: Today's byte-level ids (a base is its ASCII code; EOS, PAD, BOS, SEP, UNK are 0..4): no mask token.
BYTES = Vocabulary("bytes", 256, PAD_ID, None, frozenset({EOS_ID, PAD_ID, BOS_ID, SEP_ID, UNK_ID}))


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest signed integer type that holds every id of a vocabulary of `vocab_size` and the
    ``mlm`` matrix's negative codes: int8 up to 127 ids, int16 up to 32,767, else int32."""
    for dtype in (np.int8, np.int16, np.int32):
        if vocab_size <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise OptionError(f"a vocabulary of {vocab_size} ids does not fit int32")


def check_objective(objective: str, probability: float, replace: str, span: bool | None) -> None:
    """The objective options alone (a vocabulary is checked by `MaskingRule.of`)."""
    if objective not in OBJECTIVES:
        raise OptionError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability < 1:
        raise OptionError(f"mlm_probability must be a number in (0, 1), got {probability!r}")
    if replace not in REPLACE_RULES:
        raise OptionError(f"mlm_replace must be one of {', '.join(REPLACE_RULES)}, got {replace!r}")
    if span not in (None, True, False):
        raise OptionError(f"mlm_span must be None (automatic), True or False, got {span!r}")


@dataclass(frozen=True)
class MaskingRule:
    """A masked-LM rule over one vocabulary (module docstring); made by `of`, which checks it.

    Args:
        probability: chance that a maskable token is chosen (a centre when `span` > 1).
        replace: ``"bert"`` or ``"mask"`` (`REPLACE_RULES`).
        span: tokens chosen per centre (1; k for DNABERT's overlapping k-mers).
        mask_id: the mask token's id.
        special_ids: ids never chosen (specials and padding), sorted.
        random_ids: ids a ``"bert"`` random replacement is drawn from (every id not in `special_ids`).
        dtype: the ``mlm`` matrix's type (`id_dtype`).
        pad_id: the vocabulary's padding id (one of `special_ids`; -1: none given), which the C
            kernel skips at the end of a row without drawing (never chosen either way).
    """

    probability: float
    replace: str
    span: int
    mask_id: int
    special_ids: np.ndarray = field(repr=False)
    random_ids: np.ndarray = field(repr=False)
    dtype: np.dtype
    pad_id: int = -1

    @property
    def bound32(self) -> int:
        """A token is chosen when its 32-bit draw is below this (``probability * 2**32``, rounded up,
        at most 2**32 - 1): the same bound wherever the draws are made (numpy, the C kernel, a GPU)."""
        return min(math.ceil(self.probability * 2.0**32), (1 << 32) - 1)

    @cached_property
    def special_table(self) -> np.ndarray:
        """``special_table[id]``: the id is never chosen (at least 256 entries: byte ids index it too)."""
        table = np.zeros(max(int(self.special_ids.max(initial=0)), int(self.random_ids.max(initial=0)), 255) + 1, bool)
        table[self.special_ids] = True
        return table

    @classmethod
    def of(cls, vocab: MaskVocabulary, probability: float = 0.15, replace: str = "bert", span: bool | None = None):
        """The rule of `vocab`; `span` None: DNABERT's span exactly when `vocab` is overlapping k-mers.
        Raises `OptionError` for a vocabulary without a mask token or span masking it cannot take."""
        check_objective("mlm", probability, replace, span)
        if vocab.mask_id is None:
            raise OptionError(
                f"objective='mlm' needs a tokenizer with a mask token, and {vocab.name!r} has none: give a "
                "tokenizer that has one (a character, k-mer or Hugging Face tokenizer with a mask token)"
            )
        kmer = vocab.kmer or 1
        if span and not (vocab.overlapping and kmer > 1):
            raise OptionError(
                f"mlm_span=True is DNABERT's masking of overlapping k-mers, and tokenizer {vocab.name!r} is not "
                "overlapping k-mers: leave mlm_span unset (or False)"
            )
        width = kmer if (span is None and vocab.overlapping) or span else 1
        specials = np.array(sorted({*vocab.special_ids, vocab.pad_id, vocab.mask_id}), dtype=np.int64)
        ordinary = np.setdiff1d(np.arange(vocab.vocab_size, dtype=np.int64), specials)
        if not len(ordinary):
            raise OptionError(f"tokenizer {vocab.name!r} has no id that is not special: nothing to mask")
        dtype = id_dtype(vocab.vocab_size)
        mask_id, pad_id = int(vocab.mask_id), int(vocab.pad_id)
        return cls(float(probability), replace, width, mask_id, specials, ordinary, dtype, pad_id)
