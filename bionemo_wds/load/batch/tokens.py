"""Compact batches of token ids: a non-byte tokenizer's samples, laid out in the loader workers.

With ``tokenizer=`` other than ``"bytes"`` the worker turns each document's bases (joined from their
pieces, reverse-complemented when its strand draw says so: the bases flip first, then they are
tokenized) into the family's ids (`tokenize`), frames each document with the family's specials
(``prefix`` ids, the document's tokens, ``suffix`` ids) and writes rows of ``seq_length`` tokens in
the smallest integer type the vocabulary fits (int16 for NT and DNABERT-6: half of the int64 the
model takes, made from it on the main side by `token_inputs`).

Fields: ``tokens`` (rows x seq_length ids, ``pad_id`` after the last document), ``token_flags``
(uint8, only when a token spells a soft-masked or degenerate base: `tokenize.base.token_flags`),
``lengths`` (bases of each row), ``left_out`` (bases of each row whose tokens did not fit in
seq_length: a variable-length tokenizer's window that ran long; 0 for characters and k-mers), and for
packed rows the document columns of `packed` (``doc_tokens``, ``doc_prefix``, ``doc_rc``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from bionemo_wds.core.tokenizer import reverse_complement_bases
from bionemo_wds.load.batch.compact import Part
from bionemo_wds.load.tokenize.base import Tokenizer, token_flags


class TokenDoc(NamedTuple):
    """One document of a row to tokenize: its bases as stored, its strand and its key (named in errors)."""

    bases: Part
    rc: bool
    key: str


def doc_bases(part: Part, rc: bool) -> np.ndarray:
    """A document's bases in one array, on its strand."""
    bases = np.concatenate(part) if isinstance(part, tuple) else np.asarray(part)
    return reverse_complement_bases(bases) if rc else bases


def tokenized_batch(
    rows: Sequence[Sequence[TokenDoc]], tokenizer: Tokenizer, seq_length: int, packed: bool
) -> dict[str, Any]:
    """The compact token batch of `rows` (each a list of documents, laid out in order; empty: filler)."""
    n = len(rows)
    docs = [doc_bases(doc.bases, doc.rc) for row in rows for doc in row]
    spans = iter(tokenizer.spans_many(docs, [f"sample {doc.key}" for row in rows for doc in row]))
    bases_of = iter(docs)
    tokens = np.full((n, seq_length), tokenizer.pad_id, dtype=tokenizer.id_dtype)
    flags: np.ndarray | None = None
    width = max(1, max((len(r) for r in rows), default=0))
    doc_tokens = np.zeros((n, width), dtype=np.int32)
    doc_prefix = np.zeros((n, width), dtype=np.int32)
    doc_rc = np.zeros((n, width), dtype=bool)
    lengths = np.zeros(n, dtype=np.int32)
    left_out = np.zeros(n, dtype=np.int32)
    pre, suf = np.asarray(tokenizer.prefix, dtype=np.int64), np.asarray(tokenizer.suffix, dtype=np.int64)
    for i, row in enumerate(rows):
        pos = 0
        for j, doc in enumerate(row):
            bases, spell = next(bases_of), next(spans)
            lengths[i] += len(bases)
            room = seq_length - pos - len(pre) - len(suf)
            take = max(0, min(len(spell.ids), room))
            if take < len(spell.ids):  # tokens that do not fit: their bases are counted, not hidden
                left_out[i] += len(bases) - (int(spell.ends[take - 1]) if take else 0)
            if room < 0 or (take == 0 and len(spell.ids)):
                continue
            p = pos + len(pre)
            tokens[i, pos:p] = pre
            tokens[i, p : p + take] = spell.ids[:take]
            tokens[i, p + take : p + take + len(suf)] = suf
            marks = token_flags(bases, spell)
            if marks is not None:
                if flags is None:
                    flags = np.zeros((n, seq_length), dtype=np.uint8)
                flags[i, p : p + take] = marks[:take]
            size = len(pre) + take + len(suf)
            doc_tokens[i, j], doc_prefix[i, j], doc_rc[i, j] = size, len(pre), doc.rc
            pos += size
    out: dict[str, Any] = {"tokens": tokens, "lengths": lengths, "left_out": left_out}
    if flags is not None:
        out["token_flags"] = flags
    if packed:
        out.update(doc_tokens=doc_tokens, doc_prefix=doc_prefix, doc_rc=doc_rc)
    return out
