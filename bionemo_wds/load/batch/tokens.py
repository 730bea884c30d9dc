"""Compact batches of token ids: a non-byte tokenizer's samples, laid out in the loader workers.

With ``tokenizer=`` other than ``"bytes"`` the worker turns each document's bases (joined from their
pieces, reverse-complemented when its strand draw says so: the bases flip first, then they are
tokenized) into the family's ids (`tokenize`), frames each document with the family's specials
(``prefix`` ids, the document's tokens, ``suffix`` ids) and writes rows of ``seq_length`` tokens in
the smallest integer type the vocabulary fits (int16 for NT and DNABERT-6: half of the int64 the
model takes, made from it on the main side by `token_inputs`). Unpacked rows of plain bases by
characters or overlapping k-mers take a shorter path of the same result (`plain_batch`).

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

from bionemo_wds.core.byte_lookup import pieces_into
from bionemo_wds.core.tokenizer import reverse_complement_bases
from bionemo_wds.load.batch.compact import Part, part_length, part_pieces
from bionemo_wds.load.tokenize.base import NOT_PLAIN, Tokenizer, only_plain, token_flags


class TokenDoc(NamedTuple):
    """One document of a row to tokenize: its bases as stored, its strand and its key (named in errors)."""

    bases: Part
    rc: bool
    key: str


def joined_bases(docs: Sequence[TokenDoc]) -> tuple[np.ndarray, np.ndarray]:
    """Every document's bases as stored in one array (one concatenation of all their pieces), and
    the bounds of each (``bounds[d] .. bounds[d + 1]``); `flip_reverse_strands` turns them."""
    pieces = [piece for doc in docs for piece in (doc.bases if isinstance(doc.bases, tuple) else (doc.bases,))]
    sizes = [sum(len(p) for p in doc.bases) if isinstance(doc.bases, tuple) else len(doc.bases) for doc in docs]
    bounds = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    bases = np.concatenate([np.asarray(p, dtype=np.uint8) for p in pieces]) if pieces else np.empty(0, np.uint8)
    return bases, bounds


def flip_reverse_strands(bases: np.ndarray, bounds: np.ndarray, docs: Sequence[TokenDoc]) -> None:
    """Reverse-complement, in place, the bases of each document on the reverse strand."""
    for doc, s, e in zip(docs, bounds[:-1].tolist(), bounds[1:].tolist()):
        if doc.rc:
            bases[s:e] = reverse_complement_bases(bases[s:e])


def strand_bytes(doc: TokenDoc) -> bytes:
    """A document's bases as stored, joined from their pieces, reversed when it is on the reverse
    strand (not complemented)."""
    part = doc.bases
    if not isinstance(part, tuple):
        return (part[::-1] if doc.rc else part).tobytes()
    if doc.rc:
        return b"".join(piece[::-1].tobytes() for piece in reversed(part))
    return b"".join(piece.tobytes() for piece in part)


def plain_batch(rows: Sequence[Sequence[TokenDoc]], tokenizer: Tokenizer, seq_length: int) -> dict[str, Any] | None:
    """`tokenized_batch` of unpacked rows (one document each, or none) by a tokenizer with
    `Tokenizer.plain_codes`, when every base is plain (upper-case A/C/G/T; None otherwise, and for
    a document whose tokens do not fit: the general path then makes the batch, flags, errors and
    left-out bases included).

    Each document's bases go through one table pass that complements the reverse strand and gives
    their codes at once (`byte_lookup.pieces_into`, in C: straight from the stored pieces, 32 bytes a
    step; without the extension one ``bytes.translate`` of the joined bases), into its row of a code matrix whose
    rows are ``seq_length + width - 1`` wide (room for the bases of a row's last overlapping k-mer) and
    start at the row's first token column; one max over the matrix checks that every base was plain;
    the ids of every row then come from one `Tokenizer.spell_codes` of the whole matrix, and only the
    specials and padding are written per row. The general path's joined bases, separate complement,
    plain check and layout copies cost about twice as much.
    """
    table = tokenizer.plain_codes
    if table is None or any(len(row) > 1 for row in rows):
        return None
    n, k, pre, suf = len(rows), tokenizer.kmer or 1, tokenizer.prefix, tokenizer.suffix
    stride, p = seq_length + k - 1, len(pre)
    codes = np.zeros((n, stride), dtype=np.uint8)
    lengths = np.zeros(n, dtype=np.int32)
    counts: list[int | None] = []
    for i, row in enumerate(rows):
        if not row:
            counts.append(None)
            continue
        m = part_length(row[0].bases)
        count = max(0, m - k + 1)
        if p + count + len(suf) > seq_length:
            return None
        doc = row[0]
        strand_table = tokenizer.plain_codes_rc if doc.rc else table
        if not pieces_into(codes[i, p : p + m], part_pieces(doc.bases), strand_table, backward=doc.rc):
            codes[i, p : p + m] = np.frombuffer(strand_bytes(doc).translate(strand_table), dtype=np.uint8)
        lengths[i] = m
        counts.append(count)
    if int(codes.max(initial=0)) == NOT_PLAIN:  # a base that is not plain (the codes are below it)
        return None
    ids = tokenizer.spell_codes(codes.reshape(-1))  # element i * stride + c: the token at column c of row i
    tokens = np.empty((n, seq_length), dtype=tokenizer.id_dtype)
    tokens[:] = np.lib.stride_tricks.as_strided(ids, (n, seq_length), (stride * ids.itemsize, ids.itemsize))
    for i, used in enumerate(counts):
        if used is None:
            tokens[i] = tokenizer.pad_id
            continue
        tokens[i, :p] = pre
        tokens[i, p + used : p + used + len(suf)] = suf
        tokens[i, p + used + len(suf) :] = tokenizer.pad_id
    return {"tokens": tokens, "lengths": lengths, "left_out": np.zeros(n, dtype=np.int32)}


def tokenized_batch(
    rows: Sequence[Sequence[TokenDoc]], tokenizer: Tokenizer, seq_length: int, packed: bool
) -> dict[str, Any]:
    """The compact token batch of `rows` (each a list of documents, laid out in order; empty: filler).

    Unpacked rows of plain bases by a tokenizer with `Tokenizer.plain_codes` (characters,
    overlapping k-mers): `plain_batch`. Otherwise the bases of the whole batch are tokenized at once
    (`Tokenizer.tokenize`) and flagged at once (`token_flags`); what stays per document is placing
    its tokens: plain integers and a slice copy.
    """
    if not packed:
        plain_rows = plain_batch(rows, tokenizer, seq_length)
        if plain_rows is not None:
            return plain_rows
    return laid_out_batch(rows, tokenizer, seq_length, packed)


def laid_out_batch(
    rows: Sequence[Sequence[TokenDoc]], tokenizer: Tokenizer, seq_length: int, packed: bool
) -> dict[str, Any]:
    """`tokenized_batch` of any rows: the whole batch tokenized at once (`Tokenizer.tokenize`), then
    each document's tokens placed in its row."""
    n = len(rows)
    docs = [doc for row in rows for doc in row]
    bases, bounds = joined_bases(docs)
    plain = only_plain(bases)  # the usual batch: no base to refuse, flag or spell as N (either strand)
    wheres = [f"sample {doc.key}" for doc in docs]
    if not plain and tokenizer.alphabet:  # as stored: a base outside a declared alphabet is refused
        tokenizer.check_alphabet(bases, bounds, wheres)  # on either strand (U complements to A)
    flip_reverse_strands(bases, bounds, docs)
    toks = tokenizer.tokenize(bases, bounds, wheres, plain)
    marks = None if plain else token_flags(bases, toks)
    tokens = np.full((n, seq_length), tokenizer.pad_id, dtype=tokenizer.id_dtype)
    flags = None if marks is None else np.zeros((n, seq_length), dtype=np.uint8)
    width = max(1, max((len(r) for r in rows), default=0))
    doc_tokens = np.zeros((n, width), dtype=np.int32)
    doc_prefix = np.zeros((n, width), dtype=np.int32)
    doc_rc = np.zeros((n, width), dtype=bool)
    left_out = np.zeros(n, dtype=np.int32)
    pre, suf = np.asarray(tokenizer.prefix, dtype=np.int64), np.asarray(tokenizer.suffix, dtype=np.int64)
    sizes = np.diff(bounds)
    row_of = np.repeat(np.arange(n), [len(r) for r in rows])
    lengths = np.bincount(row_of, weights=sizes, minlength=n).astype(np.int32)
    firsts, counts, edges = toks.first.tolist(), toks.counts.tolist(), bounds.tolist()
    d = 0
    for i, row in enumerate(rows):
        pos = 0
        for j, doc in enumerate(row):
            first, count = firsts[d], counts[d]
            room = seq_length - pos - len(pre) - len(suf)
            take = max(0, min(count, room))
            if take < count:  # tokens that do not fit: their bases are counted, not hidden
                end = int(toks.token_ends(np.array([first + take - 1]))[0]) if take else edges[d]
                left_out[i] += edges[d + 1] - end
            d += 1
            if room < 0 or (take == 0 and count):
                continue
            p = pos + len(pre)
            tokens[i, pos:p] = pre
            tokens[i, p : p + take] = toks.ids[first : first + take]
            tokens[i, p + take : p + take + len(suf)] = suf
            if flags is not None and marks is not None:
                flags[i, p : p + take] = marks[first : first + take]
            size = len(pre) + take + len(suf)
            doc_tokens[i, j], doc_prefix[i, j], doc_rc[i, j] = size, len(pre), doc.rc
            pos += size
    out: dict[str, Any] = {"tokens": tokens, "lengths": lengths, "left_out": left_out}
    if flags is not None:
        out["token_flags"] = flags
    if packed:
        out.update(doc_tokens=doc_tokens, doc_prefix=doc_prefix, doc_rc=doc_rc)
    return out
