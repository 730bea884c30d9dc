"""The one assembly path: a planned batch's windows -> a compact batch, drawn and laid out.

The reader (`load.reader`) hands over each batch as `PlannedRows` (every window's decoded record
and row, its source and the pass its draws come from); `assemble` reverse-complements and drops
tags as `draws` decides (training only) and writes the batch with `compact.compact_batch`, without
a Python object per window. Every loader's batches are made here: the data module's, the plain
`GenomicDataset`'s; the webdataset stages (`compat.stages`) use the same draws and writer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
from webdataset.filters import pipelinefilter

from bionemo_wds.core.seeds import flip_salt, mlm_salt, salted_key_flips, tag_salt
from bionemo_wds.load.batch.compact import Part, compact_batch
from bionemo_wds.load.batch.draws import Salts, check_tag_room, dropped_tag, key_flip, row_flip
from bionemo_wds.load.batch.mlm import batch_masks, row_salts
from bionemo_wds.load.batch.mlm_device import draw_candidates
from bionemo_wds.load.batch.mlm_rule import MaskingRule
from bionemo_wds.load.batch.packed import PackedSchema
from bionemo_wds.load.batch.packed_layout import DocumentArrays, lay_out
from bionemo_wds.load.batch.schema import BatchSchema
from bionemo_wds.load.batch.tokens import TokenDoc, tokenized_batch
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.rows import FILLER_ROWS, BlockRows

log = logging.getLogger("bionemo_wds.load.dataset")  # the dataset's log, where users look for it


class PlannedRows(NamedTuple):
    """The windows of one planned batch: each one's record (`FILLER_ROWS` for filler) and row, the
    dataset it comes from, and the (seed, pass) its random draws come from (its dataset's stream
    seed and the pass of its virtual id: `records.SourceRecords.resolve`; None: the pass's own)."""

    blocks: list[BlockRows]
    rows: list[int]
    sources: list[int]
    draws: list[tuple[int, int] | None]


class Document(NamedTuple):
    """One document of a planned sample: its bases as stored (one array, or the pieces it spans, in
    order), tag, sequence name, first base in the source sequence, and key
    (``<seq_id>:<start>+<length>``, what its random draws are keyed by)."""

    bases: Part
    tag: bytes
    seq_id: str
    start: int
    key: str


class WindowRows(NamedTuple):
    """The windows of a batch of one-window samples, by row (`PlannedDocuments.window_rows`): each
    row's bases as stored, tag, first base, sequence name and key ("" for a row without one)."""

    parts: list[Part]
    tags: list[bytes]
    starts: list[int]
    seq_ids: list[str]
    keys: list[str]


class TokenLayout(NamedTuple):
    """A non-byte tokenizer's samples: ids of `tokenizer` in rows of `seq_length` tokens (`tokens`)."""

    tokenizer: Any
    seq_length: int


class PlannedDocuments(NamedTuple):
    """The samples of one planned batch: their documents as arrays (`packed_layout.DocumentArrays`,
    each with its row), which rows are filler (no sample, or a damaged piece; a packed sample the
    pass left unused is a row without documents that is not filler), each row's source, and the
    (seed, pass) of its draws."""

    docs: DocumentArrays
    filler: list[bool]
    sources: list[int]
    draws: list[tuple[int, int] | None]

    def documents(self) -> list[Document]:
        """Every document of the batch as a `Document`, in order (``docs.row`` says whose)."""
        docs = self.docs
        pieces, first, starts = docs.pieces, docs.first_piece.tolist(), docs.start.tolist()
        out = []
        for d in range(len(docs)):
            bases = document_part(pieces, first[d], first[d + 1])
            out.append(Document(bases, docs.tag[d], docs.seq_id[d], starts[d], docs.keys[d]))
        return out

    def window_rows(self) -> WindowRows:
        """Each row's one document as columns (samples of one window each; filler and rows without a
        document: no bases, key ""), taken from the document arrays without a Python object per
        document (the cut-at-load counterpart of a stored window's row)."""
        docs, n = self.docs, len(self.filler)
        parts: list[Part] = [EMPTY] * n
        tags, starts, seq_ids, keys = [b""] * n, [0] * n, [""] * n, [""] * n
        pieces, first, start = docs.pieces, docs.first_piece.tolist(), docs.start.tolist()
        for d, i in enumerate(docs.row.tolist()):
            if self.filler[i]:
                continue
            parts[i] = document_part(pieces, first[d], first[d + 1])
            tags[i], starts[i], seq_ids[i], keys[i] = docs.tag[d], start[d], docs.seq_id[d], docs.keys[d]
        return WindowRows(parts, tags, starts, seq_ids, keys)

    def samples(self) -> list[list[Document] | None]:
        """Each row's documents as `Document` (None: filler), for the layouts that take them one by one."""
        out: list[list[Document] | None] = [None if f else [] for f in self.filler]
        for doc, i in zip(self.documents(), self.docs.row.tolist()):
            row = out[i]
            assert row is not None
            row.append(doc)
        return out


def document_part(pieces: list[np.ndarray], a: int, z: int) -> Part:
    """A document's bases from its pieces ``pieces[a:z]``: the one view, or the views in order (pieces
    are written where they go, never joined)."""
    return pieces[a] if z == a + 1 else tuple(pieces[a:z])


def document_key(seq_id: str, start: int, length: int) -> str:
    """A document's identity: its sequence and the bases it holds."""
    return f"{seq_id}:{start}+{length}"


def _assemble(
    src: Iterable[tuple[int, PlannedRows]],
    schema: BatchSchema,
    rc_prob: float,
    seed: int,
    epoch: EpochState,
    tag_dropout: float = 0.0,
    control_tags: bool = True,
    layout: TokenLayout | None = None,
    mlm: MaskingRule | None = None,
    mlm_on_device: bool = False,
) -> Iterator[dict[str, Any]]:
    """(index, planned rows) -> the compact batch of `schema`, with its index (for putting workers'
    batches back in order), reverse-complemented and with tags dropped (seeded by seed, pass and
    window key: `draws`); with a masking rule `mlm`, each row's masked-LM draws (`add_masks`; with
    `mlm_on_device` each row's salt, for the expansion to draw from)."""
    pass_draw = (seed, epoch.epoch)
    rc_salts, drop_salts, mlm_salts = Salts(flip_salt), Salts(tag_salt), Salts(mlm_salt)
    for index, planned in src:
        if isinstance(planned, PlannedDocuments):
            batch = documents_batch(
                planned, schema, pass_draw, rc_prob, rc_salts, tag_dropout, drop_salts, control_tags, layout
            )
            if mlm is not None:
                add_masks(batch, mlm, [pass_draw if d is None else d for d in planned.draws], mlm_salts, mlm_on_device)
            batch["index"] = index
            yield batch
            continue
        blocks, rows = planned.blocks, planned.rows
        filler = [block is FILLER_ROWS for block in blocks]
        draws = [pass_draw if d is None else d for d in planned.draws]
        keys = [block.keys[row] if not f else "" for block, row, f in zip(blocks, rows, filler)]
        tags = [block.tag[row] for block, row in zip(blocks, rows)]
        if rc_prob > 0:
            rc = [
                not f and row_flip(block, row, rc_prob, rc_salts[d])
                for block, row, f, d in zip(blocks, rows, filler, draws)
            ]
        else:
            rc = [False] * len(blocks)
        if tag_dropout > 0:
            tags = [
                tag if f else dropped_tag(tag, key, tag_dropout, drop_salts[d])
                for tag, key, f, d in zip(tags, keys, filler, draws)
            ]
            check_tag_room(tags, keys, schema.max_tag)
        starts = [block.start[row] for block, row in zip(blocks, rows)]
        seq_ids = [block.seq_id[row] for block, row in zip(blocks, rows)]
        if layout is not None:
            docs = [
                [] if f else [TokenDoc(block.bases(row), flip, key)]
                for block, row, f, flip, key in zip(blocks, rows, filler, rc, keys)
            ]
            batch = token_rows(docs, layout, False, rc, starts, seq_ids, keys)
        else:
            parts = [block.bases(row) for block, row in zip(blocks, rows)]
            batch = compact_batch(parts, rc, tags, rc, starts, seq_ids, keys, schema.window, schema.max_tag)
        batch["filler"] = np.array(filler, dtype=bool)
        batch["dataset"] = np.array([-1 if f else s for f, s in zip(filler, planned.sources)], dtype=np.int16)
        if mlm is not None:
            add_masks(batch, mlm, draws, mlm_salts, mlm_on_device)
        batch["index"] = index
        yield batch


def add_masks(
    batch: dict[str, Any], rule: MaskingRule, draws: list[tuple[int, int]], salts: Salts, on_device: bool = False
) -> None:
    """Put the masked-LM draws of a compact batch in it (``mlm``, `mlm.batch_masks`): over a window
    row's bases (before its length), or a packed row's base columns; each row keyed by its key
    (a packed row's: its documents' keys joined) and salted by its (seed, pass). `on_device`: only
    each row's salt (``mlm_salts``, the uint64's bits as int64), for the expansion to draw from
    (`mlm_device.draw_masks`)."""
    pass_salts = np.array([salts[d] for d in draws], dtype=np.uint64)
    if on_device:
        batch["mlm_salts"] = row_salts(batch["keys"], pass_salts).view(np.int64)
        return
    ids, candidates = draw_candidates(batch, "bases" not in batch and "tags" not in batch)
    batch["mlm"] = batch_masks(ids, candidates, batch["keys"], pass_salts, rule)


def documents_batch(
    planned: PlannedDocuments,
    schema: BatchSchema | PackedSchema,
    pass_draw: tuple[int, int],
    rc_prob: float,
    rc_salts: Salts,
    tag_dropout: float,
    drop_salts: Salts,
    control_tags: bool,
    layout: TokenLayout | None = None,
) -> dict[str, Any]:
    """The compact batch of samples cut at load (`PlannedDocuments`): one window per row (`BatchSchema`,
    the same batch as stored windows give), or packed rows of several documents (`PackedSchema`,
    `packed_layout.lay_out`). Each document draws its strand and tag dropout by its own key."""
    draws = [pass_draw if d is None else d for d in planned.draws]
    filler = planned.filler
    if layout is not None:
        batch = documents_tokens(planned, draws, rc_prob, rc_salts, layout, isinstance(schema, PackedSchema))
    elif isinstance(schema, PackedSchema):
        docs = planned.docs
        flip = document_flips(docs, draws, rc_prob, rc_salts)
        tags = docs.tag
        if tag_dropout > 0:
            tags = [
                dropped_tag(tag, key, tag_dropout, drop_salts[draws[i]])
                for tag, key, i in zip(tags, docs.keys, docs.row.tolist())
            ]
        batch = lay_out(docs, flip, tags, len(filler), schema.seq_length, control_tags)
    else:  # one window per row: its document's fields straight into the compact batch
        one = planned.window_rows()
        keys, tags = one.keys, one.tags
        if tag_dropout > 0:
            tags = [
                dropped_tag(tag, key, tag_dropout, drop_salts[draw]) if key else tag
                for tag, key, draw in zip(tags, keys, draws)
            ]
            check_tag_room(tags, keys, schema.max_tag)
        flips = [bool(key) and rc_prob > 0 and key_flip(key, rc_prob, rc_salts[draw]) for key, draw in zip(keys, draws)]
        batch = compact_batch(
            one.parts, flips, tags, flips, one.starts, one.seq_ids, keys, schema.window, schema.max_tag
        )
    batch["filler"] = np.array(filler, dtype=bool)
    batch["dataset"] = np.array([-1 if f else s for f, s in zip(filler, planned.sources)], dtype=np.int16)
    return batch


def document_flips(docs: DocumentArrays, draws: list[tuple[int, int]], p: float, salts: Salts) -> np.ndarray:
    """Whether each document is reverse-complemented (probability `p`): `draws.key_flip` of its key
    salted by its row's (seed, pass), for all documents at once (`seeds.salted_key_flips`)."""
    if p <= 0 or not len(docs):
        return np.zeros(len(docs), dtype=bool)
    row_salts = [salts[d] for d in draws]
    if len(set(row_salts)) == 1:  # the usual batch: one (seed, pass)
        return salted_key_flips(docs.keys, p, row_salts[0])
    return salted_key_flips(docs.keys, p, np.array([s & (2**64 - 1) for s in row_salts], dtype=np.uint64)[docs.row])


def documents_tokens(
    planned: PlannedDocuments,
    draws: list[tuple[int, int]],
    rc_prob: float,
    rc_salts: Salts,
    layout: TokenLayout,
    packed: bool,
) -> dict[str, Any]:
    """`documents_batch` for a non-byte tokenizer: every document on its drawn strand, tokenized."""
    samples = planned.samples()
    rows = [
        [TokenDoc(d.bases, rc_prob > 0 and key_flip(d.key, rc_prob, rc_salts[draw]), d.key) for d in docs or ()]
        for docs, draw in zip(samples, draws)
    ]
    first = [docs[0] if docs else None for docs in samples]
    keys = [";".join(d.key for d in docs or ()) for docs in samples]
    rc = [bool(row) and row[0].rc for row in rows]
    starts = [d.start if d is not None else 0 for d in first]
    seq_ids = [d.seq_id if d is not None else "" for d in first]
    return token_rows(rows, layout, packed, rc, starts, seq_ids, keys)


def token_rows(
    rows: list[list[TokenDoc]],
    layout: TokenLayout,
    packed: bool,
    rc: list[bool],
    starts: list[int],
    seq_ids: list[str],
    keys: list[str],
) -> dict[str, Any]:
    """`tokens.tokenized_batch` of `rows` with the fields every compact batch carries for tracing."""
    batch = tokenized_batch(rows, layout.tokenizer, layout.seq_length, packed)
    lost = batch["left_out"]
    if lost.any():  # a variable-length tokenizer's window ran longer than planned: say so, never hide it
        first = int(np.argmax(lost > 0))
        log.warning(
            "%d bases of this batch are left out: their %s tokens did not fit in seq_length %d (first: %d bases of "
            "sample %s); the batch's left_out field counts them per row",
            int(lost.sum()),
            layout.tokenizer.name,
            layout.seq_length,
            int(lost[first]),
            keys[first],
        )
    batch["rc"] = np.array(rc, dtype=bool)
    batch["start"] = np.array(starts, dtype=np.int64)
    batch["seq_id"], batch["keys"] = seq_ids, keys
    return batch


#: The bases of a filler row.
EMPTY = np.empty(0, dtype=np.uint8)

assemble = pipelinefilter(_assemble)
