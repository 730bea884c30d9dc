"""Reading what the epoch plan says from a sequence-layout split: samples cut at load, as documents.

`SpanBatches` is `reader.PlannedBatches` (the same dealing of batches to loader workers, the same
record cache and read-ahead) over `spans.SpanSources`: a planned sample id becomes its documents
(`plan.samples`: one window, or the documents of a packed sample), and each document's bases are
read from the stored pieces it spans (a 1 M window spans many records), checked as every record
is (crc32, piece count). The batch builder (`batch.assemble`) lays the documents out. A sample
with a damaged piece is filler under ``handler="warn"``, so every rank still yields its batches.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from bionemo_wds.load.batch.assemble import PlannedDocuments, document_key
from bionemo_wds.load.batch.packed_layout import DocumentArrays
from bionemo_wds.load.plan import FILLER, RankPlan, worker_batches_from
from bionemo_wds.load.plan.samples import Documents
from bionemo_wds.load.reader import MISSING, PlannedBatches, RecordCache
from bionemo_wds.load.rows import BlockRows
from bionemo_wds.load.spans import SpanSources
from bionemo_wds.load.world import Worker


class SpanBatches(PlannedBatches):
    """The dataset of a planned loader over a sequence-layout split: this worker's batches of the
    current pass, as `PlannedDocuments`."""

    records: SpanSources  # type: ignore[assignment]  # the sequence layout's counterpart of SourceRecords

    def plan_documents(self, ids: np.ndarray) -> tuple[np.ndarray, list[int], np.ndarray, np.ndarray, list[Documents]]:
        """The documents of planned ids (any shape, taken flat): (the flat indices of the real ids, each
        one's draws' seed and pass and its source, each source's `Documents` of the ids that are its own,
        their `sample` indices into the flat ids). Filler ids have none."""
        flat = ids.ravel()
        real = np.flatnonzero(flat != FILLER)
        samples, sources, seeds, passes = self.records.resolve(flat[real])
        found = []
        for d in range(len(self.records.parts)):
            at = np.flatnonzero(sources == d) if len(self.records.parts) > 1 else np.arange(len(real))
            docs = self.records.tables[d].documents(samples[at], passes[at]) if len(at) else EMPTY_DOCUMENTS
            found.append(Documents(real[at][docs.sample], docs.seq, docs.start, docs.length))
        return real, seeds, passes, sources, found

    def prepare(self, plan: RankPlan, batches: list[int]) -> None:
        """Work out what `batches` of the plan read, all at once (numpy over every sample and piece of
        them, instead of a few small array operations per batch): per batch, each row's source and
        draws, and the range of its documents in one table (`PreparedDocuments`, by batch and row)."""
        micro = plan.batches.shape[1]
        real, seeds, passes, sources, found = self.plan_documents(plan.batches[batches])
        rows: dict[int, tuple[list[int], list[tuple[int, int] | None]]] = {}
        for b in batches:
            rows[b] = ([0] * micro, [None] * micro)
        for i, src, seed, p in zip(real.tolist(), sources.tolist(), seeds, passes.tolist()):
            source_list, draw_list = rows[batches[i // micro]]
            source_list[i % micro], draw_list[i % micro] = src, (seed, p)
        columns: list[list[np.ndarray]] = [[] for _ in range(7)]
        for d, docs in enumerate(found):
            pieces = self.records.parts[d].pieces(docs.seq, docs.start, docs.length)
            record = pieces.record + int(self.records.record_offsets[d])
            counts = np.bincount(pieces.span, minlength=len(docs))
            for column, value in zip(
                columns, (docs.sample, docs.length, counts, record, pieces.row, pieces.lo, pieces.hi)
            ):
                column.append(value.astype(np.int64))
        sample, length, counts, record, row, lo, hi = (
            np.concatenate(c) if c else np.empty(0, np.int64) for c in columns
        )
        order = np.argsort(sample, kind="stable")  # a source's documents are in order: this merges sources
        first = np.cumsum(counts) - counts
        counts = counts[order]
        moved = np.cumsum(counts) - counts
        take = np.repeat(first[order] - moved, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        sample = sample[order]
        bounds = np.searchsorted(sample, np.arange(len(batches) + 1, dtype=np.int64) * micro).tolist()
        first_piece = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.prepared_docs = PreparedDocuments(
            sample % micro, length[order], first_piece, record[take], row[take], lo[take], hi[take]
        )
        self.prepared = {b: (*rows[b], bounds[k], bounds[k + 1]) for k, b in enumerate(batches)}
        self.prepared_plan = plan

    def ahead(self, plan: RankPlan, b: int, worker: Worker) -> list[int]:
        """Batch `b` and the next batches this worker produces (`AHEAD` of them)."""
        return worker_batches_from(len(plan), worker.id, worker.count, self.unit, b, AHEAD)

    def windows(  # type: ignore[override]  # documents of samples cut at load, not rows of stored windows
        self, plan: RankPlan, b: int, cache: RecordCache, worker: Worker
    ) -> PlannedDocuments:
        """The documents of batch `b` of the plan, with their bases read: each record decoded once
        (through the cache), one view per stored piece, the documents' columns as arrays
        (`DocumentArrays`). A sample with a damaged piece is filler."""
        if getattr(self, "prepared_plan", None) is not plan or b not in self.prepared:
            self.prepare(plan, self.ahead(plan, b, worker))
        source_list, draw_list, lo, hi = self.prepared.pop(b)
        table = self.prepared_docs
        first_piece = table.first_piece[lo : hi + 1]
        p0, p1 = int(first_piece[0]), int(first_piece[-1])
        first_piece = first_piece - p0
        record, row, begin, end = (c[p0:p1] for c in (table.record, table.row, table.lo, table.hi))
        doc_row, length = table.doc_row[lo:hi], table.length[lo:hi]
        blocks = {number: self.block(number, cache) for number in dict.fromkeys(record.tolist())}
        filler = [draw is None for draw in draw_list]
        if any(block is None for block in blocks.values()):  # drop the samples with a damaged piece
            bad = np.fromiter((blocks[n] is None for n in record.tolist()), dtype=bool, count=len(record))
            damaged = np.unique(doc_row[np.add.reduceat(bad, first_piece[:-1]) > 0])
            for i in damaged.tolist():
                filler[i] = True
            kept = ~np.isin(doc_row, damaged)
            piece_kept = np.repeat(kept, np.diff(first_piece))
            record, row, begin, end = (c[piece_kept] for c in (record, row, begin, end))
            doc_row, length = doc_row[kept], length[kept]
            first_piece = np.concatenate([[0], np.cumsum(np.diff(first_piece)[kept])]).astype(np.int64)
        numbers, rows, offsets = record.tolist(), row.tolist(), begin.tolist()
        read = {number: block for number, block in blocks.items() if block is not None}
        views = []
        for number, r, a, z in zip(numbers, rows, offsets, end.tolist()):
            block = read[number]
            at = block.offsets[r]
            views.append(block.tokens[at + a : at + z])
        # each document's fields from its first piece (plain lists: a batch holds a few dozen documents)
        seq_id: list[str] = []
        starts: list[int] = []
        tags: list[bytes] = []
        keys: list[str] = []
        for p, n in zip(first_piece[:-1].tolist(), length.tolist()):
            block, r = read[numbers[p]], rows[p]
            name, at = block.seq_id[r], block.start[r] + offsets[p]
            seq_id.append(name)
            starts.append(at)
            tags.append(block.tag[r])
            keys.append(document_key(name, at, n))
        start = np.array(starts, dtype=np.int64)
        docs = DocumentArrays(doc_row, seq_id, start, length, tags, views, first_piece, keys)
        return PlannedDocuments(docs, filler, source_list, list(draw_list))

    def block(self, number: int, cache: RecordCache) -> BlockRows | None:
        """Record `number`, decoded, through the cache (None: damaged and skipped)."""
        block = cache.get(number)
        if block is MISSING:
            block = cache.put(number, self.records.read(number, True))
        return block

    def prefetch(self, plan: RankPlan, batches: list[int], cache: RecordCache) -> None:
        """Ask for the records of `batches` not decoded already, in the order they are read."""
        if not self.records.shards.reads_ahead:
            return
        wanted: dict[int, None] = {}
        for d, docs in enumerate(self.plan_documents(plan.batches[batches])[-1]):
            offset = int(self.records.record_offsets[d])
            for record in self.records.parts[d].pieces(docs.seq, docs.start, docs.length).record.tolist():
                wanted.setdefault(offset + record)
        self.records.prefetch([r for r in wanted if r not in cache])


#: Batches whose documents and pieces a worker works out at once.
AHEAD = 32


class PreparedDocuments(NamedTuple):
    """The documents of the batches a worker worked out at once (`SpanBatches.prepare`), by batch and
    row: per document its row in its batch, its bases and its pieces' range (``first_piece``); per
    piece its record number, row in the record and the bases it takes (``lo:hi``)."""

    doc_row: np.ndarray
    length: np.ndarray
    first_piece: np.ndarray
    record: np.ndarray
    row: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


#: No documents.
EMPTY_DOCUMENTS = Documents(*(np.empty(0, dtype=np.int64) for _ in range(4)))
