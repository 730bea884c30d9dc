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


def headers(tags: list[bytes], control_tags: bool) -> tuple[list[np.ndarray], np.ndarray]:
    """Each document's tokens before its first base (``BOS tag SEP``; ``BOS`` without control tags)
    and their counts; one shared array for every document without a tag."""
    if not control_tags:
        return [_BOS] * len(tags), np.ones(len(tags), dtype=np.int64)
    if not any(tags):
        return [_BOS_SEP] * len(tags), np.full(len(tags), 2, dtype=np.int64)
    made = [np.frombuffer(b"%c%s%c" % (BOS_ID, tag, SEP_ID), dtype=np.uint8) if tag else _BOS_SEP for tag in tags]
    return made, np.fromiter((len(tag) + 2 for tag in tags), dtype=np.int64, count=len(tags))


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
    head, prefix = headers(tags, control_tags)
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
    # the items concatenated, in order: per document its header, its base items (its pieces, or the
    # one reverse-complemented view), EOS; per row its padding
    base_items = np.diff(docs.first_piece)
    base_items[flip] = 1
    per_doc = base_items + 2
    doc_item = np.cumsum(per_doc) - per_doc + row  # every row before ends with one padding item
    row_docs = np.diff(row_first)
    pad_item = np.cumsum(np.bincount(row, weights=per_doc, minlength=n).astype(np.int64)) + np.arange(n)
    items = np.empty(int(per_doc.sum()) + n, dtype=object)
    items[doc_item] = objects(head)
    items[doc_item + per_doc - 1] = objects([_EOS] * k)
    forward = ~flip
    at = np.repeat(doc_item + 1 - docs.first_piece[:-1], np.diff(docs.first_piece)) + np.arange(len(docs.pieces))
    take = np.repeat(forward, np.diff(docs.first_piece))
    items[at[take]] = objects([p for p, t in zip(docs.pieces, take.tolist()) if t])
    if not forward.all():
        items[doc_item[~forward] + 1] = objects(complemented(docs, flip))
    pads = padding(seq_length)
    items[pad_item] = objects([pads[: seq_length - u] for u in row_used.tolist()])
    tokens = np.concatenate(items.tolist()).reshape(n, seq_length) if n else np.empty((0, seq_length), np.uint8)
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
