"""Character vocabularies: HyenaDNA's and Caduceus's (one token per base, their special-token ids).

Both families use the same layout (HyenaDNA's ``CharacterTokenizer``, ``hg38_char_tokenizer.py`` in
HazyResearch/hyena-dna; Caduceus's ``CaduceusTokenizer``, ``tokenization_caduceus.py`` of the
kuleshov-group models): ``[CLS]`` 0, ``[SEP]`` 1, ``[BOS]`` 2, ``[MASK]`` 3, ``[PAD]`` 4,
``[RESERVED]`` 5, ``[UNK]`` 6, then the characters A, C, G, T, N as 7 .. 11 (12 ids). Caduceus's
tokenizer upper-cases and appends ``[SEP]`` to a sequence (``build_inputs_with_special_tokens``);
HyenaDNA's pre-training tokenizes without specials and appends ``[SEP]`` as its end of sequence
(``hg38_dataset.py``, ``add_eos``). So both frame a sample as bases then ``[SEP]``.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.core.byte_lookup import translate_bytes
from bionemo_wds.load.tokenize.base import Tokenizer, Tokens, plain_table

#: The special ids of both character vocabularies.
CLS, SEP, BOS, MASK, PAD, RESERVED, UNK = range(7)
#: The characters, from id 7 on.
CHARACTERS = b"ACGTN"


class CharacterTokenizer(Tokenizer):
    """One id per base (`CHARACTERS` from 7), ``[SEP]`` after each sample."""

    def __init__(self, name: str):
        self.name = name
        self.vocab_size = 7 + len(CHARACTERS)
        self.pad_id, self.mask_id = PAD, MASK
        self.special_ids = frozenset(range(7))
        self.suffix = (SEP,)
        table = np.full(256, UNK, dtype=np.uint8)  # either case: one lookup of the stored bytes
        for case in (CHARACTERS, CHARACTERS.lower()):
            table[np.frombuffer(case, dtype=np.uint8)] = np.arange(7, 7 + len(CHARACTERS))
        self.table = table.tobytes()  # for `byte_lookup.translate_bytes`
        self.plain_codes = plain_table({b: self.table[b] for b in b"ACGT"})  # the codes are the ids

    def spell(self, bases: np.ndarray, bounds: np.ndarray, plain: bool) -> Tokens:
        ids = translate_bytes(bases, self.table)
        return Tokens(ids, bounds[:-1], np.diff(bounds), None, 1)

    def spell_codes(self, codes: np.ndarray) -> np.ndarray:
        return codes
