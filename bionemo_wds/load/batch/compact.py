"""Compact batches: the one place a batch's arrays are built from its windows' bases.

A compact batch is what loaders yield and what crosses the loader-worker boundary: uint8 bases and
tags padded with PAD, their lengths, reverse-complement flags, starts, seq ids and keys; about 8x
smaller than the int64 model inputs `model_inputs.to_model_inputs` expands it into. Both ways of
making one end here: `stages.collate_compact` (any loader's `Window` views or dicts) and
`planned.assemble` (the planned loader's records, without a Python object per window).

Reverse complement is applied here: a flipped row is written complemented and backwards from its
stored pieces in one C table pass (`core.byte_lookup`); without the extension, flipped rows are
copied reversed, then complemented together by `bytes.translate` (PAD complements to itself, so
padding needs no care). The strand is decided by the caller (`seeds.salted_flips`); this module only
writes bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bionemo_wds.core.byte_lookup import pieces_into, translate_rows
from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE, PAD_ID

assert COMPLEMENT_TABLE[PAD_ID] == PAD_ID, "padding must complement to itself (whole rows are complemented)"


#: A row's bases as stored: one array, or the pieces a window cut at load spans, in order.
Part = np.ndarray | tuple[np.ndarray, ...]


def part_pieces(part: Part) -> tuple[np.ndarray, ...]:
    """A part's pieces, in order (one array: a piece of its own)."""
    return part if isinstance(part, tuple) else (part,)


def part_length(part: Part) -> int:
    """Bases of a part."""
    return sum(map(len, part)) if isinstance(part, tuple) else len(part)


def put_bases(row: np.ndarray, part: Part, reverse: bool) -> None:
    """Write `part` at the start of `row` (a view), reversed when `reverse` (the caller complements):
    pieces are copied one after another, never joined first."""
    if not isinstance(part, tuple):
        row[: len(part)] = part[::-1] if reverse else part
        return
    pos = 0
    for piece in reversed(part) if reverse else part:
        row[pos : pos + len(piece)] = piece[::-1] if reverse else piece
        pos += len(piece)


def compact_bases(parts: Sequence[Part], flip: Sequence[bool], window: int | None = None) -> np.ndarray:
    """Rows of `parts` (uint8 bases as stored, or the pieces of a row) padded with PAD to `window`
    (default: the longest), each row reverse-complemented where `flip` says so.

    One slice copy per row; a flipped row is written complemented and backwards from its pieces in one
    C pass each (`byte_lookup.pieces_into`), or, without the extension, reversed, then complemented with
    the other flipped rows (a per-row `reverse_complement_bases` costs three copies and a translate call
    per row).
    """
    n = len(parts)
    width = window or max(map(part_length, parts), default=0)
    bases = np.empty((n, width), dtype=np.uint8)
    flipped: list[int] = []
    for i, part in enumerate(parts):
        m = part_length(part)
        if m > width:
            raise ValueError(f"row {i} has {m} bases, more than the batch width {width}")
        if not flip[i] and not isinstance(part, tuple):  # the usual row: one slice copy, no call
            bases[i, :m] = part
        elif not (flip[i] and pieces_into(bases[i], part_pieces(part), COMPLEMENT_TABLE, backward=True)):
            put_bases(bases[i], part, flip[i])
            if flip[i]:
                flipped.append(i)
        if m < width:
            bases[i, m:] = PAD_ID
    if flipped:
        complement_rows(bases, flipped)
    return bases


def complement_rows(bases: np.ndarray, rows: list[int]) -> None:
    """Complement rows `rows` of the uint8 matrix `bases` in place: one byte-table pass per row
    (`byte_lookup.translate_rows`; without the C extension one `bytes.translate` over all of them)."""
    translate_rows(bases, rows, COMPLEMENT_TABLE)


def compact_tags(tags: Sequence[bytes], max_tag: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Control tags as a PAD-padded uint8 matrix at least `max_tag` wide, and their lengths."""
    n = len(tags)
    if not any(tags):  # the usual batch: no control tags
        return np.full((n, max_tag or 0), PAD_ID, dtype=np.uint8), np.zeros(n, dtype=np.int32)
    lengths = np.fromiter(map(len, tags), dtype=np.int32, count=n)
    width = max(max_tag or 0, int(lengths.max(initial=0)))
    out = np.full((n, width), PAD_ID, dtype=np.uint8)
    for i, tag in enumerate(tags):
        if tag:
            out[i, : len(tag)] = np.frombuffer(tag, dtype=np.uint8)
    return out, lengths


def compact_batch(
    parts: Sequence[Part],
    flip: Sequence[bool],
    tags: Sequence[bytes],
    rc: Sequence[bool],
    starts: Sequence[int],
    seq_ids: list[str],
    keys: list[str],
    window: int | None = None,
    max_tag: int | None = None,
) -> dict[str, object]:
    """The compact batch of n windows.

    `parts` are their bases as stored, `flip` which of them to reverse-complement on the way in,
    `rc` the strand flag each row reports (the same as `flip` for stored bases; a caller whose bases
    are already on their strand passes no flips and its own flags).
    """
    n = len(parts)
    tag_matrix, tag_lengths = compact_tags(tags, max_tag)
    return {
        "bases": compact_bases(parts, flip, window),
        "lengths": np.fromiter(map(part_length, parts), dtype=np.int32, count=n),
        "tags": tag_matrix,
        "tag_lengths": tag_lengths,
        "rc": np.fromiter(rc, dtype=bool, count=n),
        "start": np.fromiter(starts, dtype=np.int64, count=n),
        "seq_id": seq_ids,
        "keys": keys,
    }
