"""Packed samples laid out from arrays: a batch's documents as offset arrays over their stored pieces.

The reader (`span_reader`) hands a batch of samples cut at load over as `DocumentArrays`: per
document its row (sample) in the batch, sequence, first base, length and tag, and the views of the
stored pieces its bases lie in (``pieces[first_piece[d]:first_piece[d + 1]]``). `lay_out` writes
the packed token matrix (each document ``BOS tag SEP bases EOS``, then PAD) with one
`np.concatenate` over the headers, pieces, EOS and padding placed by index arithmetic, and
reverse-complements the flipped documents with one reversed copy and one `bytes.translate` over all
of their bases: no Python step per document but formatting its key. The document columns
(``doc_tokens``, ``doc_prefix``, ``doc_rc``) and the row fields are scattered from the same arrays.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from bionemo_wds.core.tokenizer import BOS_ID, COMPLEMENT_TABLE, EOS_ID, PAD_ID, SEP_ID


class DocumentArrays(NamedTuple):
    """The documents of one batch of samples, in row order (a row's documents in their order)."""

    row: np.ndarray  # int64: each document's sample (row) in the batch
    seq_id: list[str]
    start: np.ndarray  # int64: the document's first base in its sequence
    length: np.ndarray  # int64: its bases
    tag: list[bytes]
    pieces: list[np.ndarray]  # views of the stored bases, in document order
    first_piece: np.ndarray  # int64, documents + 1: document d's pieces are pieces[first_piece[d]:first_piece[d + 1]]
    keys: list[str]  # each document's key (`assemble.document_key`: what its random draws are keyed by)

    def __len__(self) -> int:
        return len(self.row)


#: The one-token arrays a layout places between documents.
_BOS = np.array([BOS_ID], dtype=np.uint8)
_BOS_SEP = np.array([BOS_ID, SEP_ID], dtype=np.uint8)
_EOS = np.array([EOS_ID], dtype=np.uint8)


def header_lengths(tags: list[bytes], control_tags: bool) -> np.ndarray:
    """Each document's tokens before its first base: ``BOS tag SEP``, or ``BOS`` without control tags."""
    if not control_tags:
        return np.ones(len(tags), dtype=np.int64)
    return np.fromiter(map(len, tags), dtype=np.int64, count=len(tags)) + 2


def complemented(docs: DocumentArrays, flip: np.ndarray) -> list[np.ndarray]:
    """The bases of each flipped document (`flip`, bool per document) reverse-complemented: every
    flipped document's pieces copied reversed into one buffer, complemented by one translate, and
    cut back into one view per flipped document."""
    flipped = np.flatnonzero(flip)
    if not len(flipped):
        return []
    lo, hi = docs.first_piece[flipped], docs.first_piece[flipped + 1]
    counts = hi - lo
    # each flipped document's pieces last to first
    order = np.repeat(hi - 1, counts) - (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts))
    pieces = docs.pieces
    joined = np.concatenate([pieces[i][::-1] for i in order.tolist()]) if len(order) else np.empty(0, np.uint8)
    done = np.frombuffer(joined.tobytes().translate(COMPLEMENT_TABLE), dtype=np.uint8)
    ends = np.cumsum(docs.length[flipped]).tolist()
    return [done[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def lay_out(
    docs: DocumentArrays, flip: np.ndarray, tags: list[bytes], n: int, seq_length: int, control_tags: bool
) -> dict[str, Any]:
    """The compact packed batch (`packed.PACKED_FIELDS` but filler and dataset) of `n` rows of
    `seq_length` tokens holding `docs`, those where `flip` says reverse-complemented, each with its
    tag from `tags` (after dropout)."""
    k = len(docs)
    prefix = header_lengths(tags, control_tags)
    sizes = prefix + docs.length + 1
    row = docs.row
    ends = np.cumsum(sizes)
    row_first = np.searchsorted(row, np.arange(n + 1))  # each row's first document
    row_used = np.diff(np.concatenate([[0], ends])[row_first])  # tokens each row's documents take
    if k and (row_used > seq_length).any():
        i = int(np.argmax(row_used > seq_length))
        within = np.cumsum(sizes[row_first[i] : row_first[i + 1]])
        d = int(row_first[i] + np.argmax(within > seq_length))
        raise ValueError(f"packed sample {i} needs more than {seq_length} tokens (document {docs.keys[d]})")
    # each document's first column in the flat token matrix; its specials and tag placed by index, its
    # bases copied piece by piece (one slice copy per stored piece: they lie in different records)
    row_docs = np.diff(row_first)
    doc_at = ends - sizes + row * seq_length - np.repeat(np.concatenate([[0], ends])[row_first[:-1]], row_docs)
    tokens = np.full((n, seq_length), PAD_ID, dtype=np.uint8)
    flat = tokens.reshape(-1)
    flat[doc_at] = BOS_ID
    flat[doc_at + sizes - 1] = EOS_ID
    if control_tags:
        flat[doc_at + prefix - 1] = SEP_ID
        tagged = prefix > 2
        if tagged.any():
            count = prefix[tagged] - 2
            within = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
            flat[np.repeat(doc_at[tagged] + 1, count) + within] = np.frombuffer(
                b"".join(t for t, f in zip(tags, tagged.tolist()) if f), dtype=np.uint8
            )
    base_at = doc_at + prefix
    counts = np.diff(docs.first_piece)
    forward = ~flip
    before = np.concatenate([[0], np.cumsum(np.fromiter(map(len, docs.pieces), np.int64, len(docs.pieces)))])
    piece_at = np.repeat(base_at - before[docs.first_piece[:-1]], counts) + before[:-1]
    if forward.all():
        for piece, at in zip(docs.pieces, piece_at.tolist()):
            flat[at : at + len(piece)] = piece
    else:
        for piece, at, f in zip(docs.pieces, piece_at.tolist(), np.repeat(forward, counts).tolist()):
            if f:
                flat[at : at + len(piece)] = piece
        for bases, at in zip(complemented(docs, flip), base_at[flip].tolist()):
            flat[at : at + len(bases)] = bases
    width = max(1, int(row_docs.max(initial=0)))
    column = np.arange(k) - np.repeat(row_first[:-1], row_docs)
    doc_tokens = np.zeros((n, width), dtype=np.int32)
    doc_prefix = np.zeros((n, width), dtype=np.int32)
    doc_rc = np.zeros((n, width), dtype=bool)
    doc_tokens[row, column], doc_prefix[row, column], doc_rc[row, column] = sizes, prefix, flip
    first = row_first[:-1]
    has = row_docs > 0
    at_first = np.minimum(first, max(k - 1, 0))
    keys = docs.keys
    seq_first = [docs.seq_id[d] if h else "" for d, h in zip(first.tolist(), has.tolist())]
    return {
        "tokens": tokens,
        "doc_tokens": doc_tokens,
        "doc_prefix": doc_prefix,
        "doc_rc": doc_rc,
        "lengths": np.bincount(row, weights=docs.length, minlength=n).astype(np.int32),
        "rc": flip[at_first] & has if k else np.zeros(n, dtype=bool),
        "start": np.where(has, docs.start[at_first], 0).astype(np.int64) if k else np.zeros(n, dtype=np.int64),
        "seq_id": seq_first,
        "keys": [";".join(keys[a:b]) for a, b in zip(row_first[:-1].tolist(), row_first[1:].tolist())],
    }


def objects(arrays: list[np.ndarray]) -> np.ndarray:
    """A one-dimensional object array of `arrays` (never a matrix, whatever their shapes)."""
    return np.fromiter(arrays, dtype=object, count=len(arrays))


_PADDING: list[np.ndarray] = [np.empty(0, dtype=np.uint8)]


def padding(seq_length: int) -> np.ndarray:
    """A read-only run of at least `seq_length` PAD tokens (made once, sliced for every row)."""
    if len(_PADDING[0]) < seq_length:
        pads = np.full(seq_length, PAD_ID, dtype=np.uint8)
        pads.flags.writeable = False
        _PADDING[0] = pads
    return _PADDING[0]
