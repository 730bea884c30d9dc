"""Tokenizers by name: the option value ``tokenizer=`` resolves here.

``"bytes"`` (the default: one byte per base, the ids `core.tokenizer` defines, laid out by the batch
builders as before), ``"hyenadna"``, ``"caduceus"``, ``"nt"``, ``"dnabert3"`` .. ``"dnabert6"``, or
a Hugging Face tokenizer (a path to a tokenizer.json, a `tokenizers.Tokenizer`, a
`PreTrainedTokenizerFast`). An unknown name is refused with the closest names.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from bionemo_wds.errors import OptionError
from bionemo_wds.load.tokenize.base import Tokenizer
from bionemo_wds.load.tokenize.characters import CharacterTokenizer
from bionemo_wds.load.tokenize.hf_file import HfTokenizer
from bionemo_wds.load.tokenize.kmers import DnabertTokenizer, NucleotideTransformerTokenizer

#: The default: bases as bytes, today's layout.
BYTES = "bytes"

#: Every named tokenizer and how to make it.
NAMED: dict[str, Callable[[], Tokenizer]] = {
    "hyenadna": partial(CharacterTokenizer, "hyenadna"),
    "caduceus": partial(CharacterTokenizer, "caduceus"),
    "nt": NucleotideTransformerTokenizer,
    **{f"dnabert{k}": partial(DnabertTokenizer, k) for k in range(3, 7)},
}


def tokenizer_names() -> list[str]:
    """The names ``tokenizer=`` takes (besides a tokenizer file)."""
    return [BYTES, *NAMED]


def resolve_tokenizer(spec: Any) -> Tokenizer | None:
    """The tokenizer `spec` names (None for ``"bytes"``); an `OptionError` naming the closest names for
    an unknown name, or saying what is wrong with a tokenizer file."""
    if spec is None or spec == BYTES:
        return None
    if isinstance(spec, Tokenizer):
        return spec
    if isinstance(spec, str) and spec in NAMED:
        return NAMED[spec]()
    if isinstance(spec, str) and not looks_like_path(spec):
        close = difflib.get_close_matches(spec, tokenizer_names(), n=2, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise OptionError(
            f"unknown tokenizer {spec!r}{hint} (names: {', '.join(tokenizer_names())}, or a path to a tokenizer.json)"
        )
    return HfTokenizer(spec)


#: What masked-LM reads of a vocabulary (`batch.mlm_rule.MaskVocabulary`).
VOCABULARY_ATTRIBUTES = ("name", "vocab_size", "pad_id", "mask_id", "special_ids", "kmer", "overlapping")


def vocabulary_only(spec: Any) -> bool:
    """Whether `spec` is a vocabulary described by its attributes alone (`batch.mlm_rule.Vocabulary`: the
    byte ids with a mask token of their own), not a tokenizer with rules: the byte layout serves it."""
    if spec is None or isinstance(spec, (str, os.PathLike, Tokenizer)):
        return False
    return all(hasattr(spec, name) for name in VOCABULARY_ATTRIBUTES)


def looks_like_path(text: str) -> bool:
    """Whether a tokenizer value is meant as a file (has a directory part or a .json suffix, or exists)."""
    return os.sep in text or "/" in text or text.endswith(".json") or os.path.exists(text)


def tokenizer_label(spec: Any) -> str:
    """How messages name the tokenizer of `spec`."""
    tok = resolve_tokenizer(spec)
    return BYTES if tok is None else tok.name
