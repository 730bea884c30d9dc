"""Packed samples laid out from arrays: a batch's documents as offset arrays over their stored pieces.

The reader (`span_reader`) hands a batch of samples cut at load over as `DocumentArrays`: per
document its row (sample) in the batch, sequence, first base, length and tag, and the views of the
stored pieces its bases lie in (``pieces[first_piece[d]:first_piece[d + 1]]``). `lay_out` writes
the packed token matrix (each document ``BOS tag SEP bases EOS``, then PAD) and the document columns
(``doc_tokens``, ``doc_prefix``, ``doc_rc``) in one C call a batch (`packed_native.native_lay_out`:
where each document goes, each stored piece copied once to its place, a flipped document's pieces
complemented backwards straight into place, last piece first, each row's fields). Without the
extension, `python_lay_out` works the places out in one pass over plain lists (a batch holds a few
dozen documents; on arrays that small each numpy call costs more than the Python arithmetic it
replaces) and `place_documents` writes a slice copy a piece.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, reverse_complement_bases
from bionemo_wds.load.batch.packed_native import Laid, native_lay_out


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


def header_lengths(tags: list[bytes], control_tags: bool) -> np.ndarray:
    """Each document's tokens before its first base: ``BOS tag SEP``, or ``BOS`` without control tags."""
    if not control_tags:
        return np.ones(len(tags), dtype=np.int64)
    return np.fromiter(map(len, tags), dtype=np.int64, count=len(tags)) + 2


def lay_out(
    docs: DocumentArrays, flip: np.ndarray, tags: list[bytes], n: int, seq_length: int, control_tags: bool
) -> dict[str, Any]:
    """The compact packed batch (`packed.PACKED_FIELDS` but filler and dataset) of `n` rows of
    `seq_length` tokens holding `docs`, those where `flip` says reverse-complemented, each with its
    tag from `tags` (after dropout)."""
    k = len(docs)
    prefix = [len(t) + 2 for t in tags] if control_tags else [1] * k
    laid = native_lay_out(n, seq_length, docs.row, docs.length, prefix, flip, tags, docs.pieces, docs.first_piece)
    if laid is None:
        laid = python_lay_out(docs, flip, tags, prefix, n, seq_length)
    if isinstance(laid, int):
        i = int(docs.row[laid])
        raise ValueError(f"packed sample {i} needs more than {seq_length} tokens (document {docs.keys[laid]})")
    flips, first = flip.tolist(), laid.first
    keys, starts = docs.keys, docs.start.tolist()
    return {
        "tokens": laid.tokens,
        "doc_tokens": laid.doc_tokens,
        "doc_prefix": laid.doc_prefix,
        "doc_rc": laid.doc_rc,
        "lengths": np.array(laid.bases_of, dtype=np.int32),
        "rc": np.array([d >= 0 and flips[d] for d in first], dtype=bool),
        "start": np.array([starts[d] if d >= 0 else 0 for d in first], dtype=np.int64),
        "seq_id": [docs.seq_id[d] if d >= 0 else "" for d in first],
        "keys": [";".join(keys[a:b]) if a >= 0 else "" for a, b in zip(first, laid.past)],
    }


def python_lay_out(
    docs: DocumentArrays, flip: np.ndarray, tags: list[bytes], prefix: list[int], n: int, seq_length: int
) -> Laid | int:
    """`lay_out`'s matrices where the C kernel is not built (`native_lay_out`'s, the same cells; the
    number of the first document that does not fit its row, where one does not), worked out in one
    pass over plain lists, each tag and piece written by a slice copy."""
    rows, lengths = docs.row.tolist(), docs.length.tolist()
    k = len(docs)
    tokens = np.full((n, seq_length), PAD_ID, dtype=np.uint8)
    used, bases_of = [0] * n, [0] * n  # tokens and bases of each row taken so far
    first, past = [-1] * n, [0] * n  # each row's documents: first:past (rows hold runs of documents)
    column = [0] * k  # each document's column among its row's documents
    doc_at = [0] * k  # each document's BOS in the flat token matrix
    for d in range(k):
        i, head = rows[d], prefix[d]
        at = used[i]
        used[i] = at + head + lengths[d] + 1
        if used[i] > seq_length:
            return d
        if first[i] < 0:
            first[i] = d
        column[d], past[i] = d - first[i], d + 1
        bases_of[i] += lengths[d]
        doc_at[d] = at + i * seq_length
    at_array, prefix_array = np.array(doc_at, dtype=np.int64), np.array(prefix, dtype=np.int64)
    sizes = prefix_array + docs.length + 1
    place_documents(tokens.reshape(-1), at_array, prefix_array, sizes, flip, tags, docs.pieces, docs.first_piece)
    width = max(1, max(column, default=-1) + 1)
    doc_tokens = np.zeros((n, width), dtype=np.int32)
    doc_prefix = np.zeros((n, width), dtype=np.int32)
    doc_rc = np.zeros((n, width), dtype=bool)
    place = docs.row * width + np.array(column, dtype=np.int64)
    doc_tokens.reshape(-1)[place], doc_prefix.reshape(-1)[place], doc_rc.reshape(-1)[place] = sizes, prefix_array, flip
    return Laid(tokens, doc_tokens, doc_prefix, doc_rc, bases_of, first, past)


def place_documents(
    flat: np.ndarray,
    doc_at: np.ndarray,
    prefix: np.ndarray,
    sizes: np.ndarray,
    flip: np.ndarray,
    tags: list[bytes],
    pieces: list[np.ndarray],
    first_piece: np.ndarray,
) -> None:
    """Write each document into the flat uint8 token matrix (PAD already) from its BOS column
    `doc_at[d]`: BOS, tag and SEP (when `prefix[d]` > 1), its pieces (the last first, complemented
    backwards, where `flip`), EOS; each tag and piece a slice copy (the C kernel's `lay_out` does this
    in one call a batch)."""
    starts, heads, pieces_at, flips = doc_at.tolist(), prefix.tolist(), first_piece.tolist(), flip.tolist()
    for d, (at, head) in enumerate(zip(starts, heads)):
        if head > 2:
            flat[at + 1 : at + head - 1] = np.frombuffer(tags[d], dtype=np.uint8)
        at += head
        order = range(pieces_at[d + 1] - 1, pieces_at[d] - 1, -1) if flips[d] else range(pieces_at[d], pieces_at[d + 1])
        for p in order:  # a flipped document: the last piece first, each complemented backwards into place
            piece = pieces[p]
            if flips[d]:
                flat[at : at + len(piece)] = reverse_complement_bases(piece)
            else:
                flat[at : at + len(piece)] = piece
            at += len(piece)
    flat[doc_at] = BOS_ID
    flat[doc_at + sizes - 1] = EOS_ID
    tagged = prefix > 1
    flat[(doc_at + prefix - 1)[tagged]] = SEP_ID


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
