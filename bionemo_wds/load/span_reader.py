"""Reading what the epoch plan says from a sequence-layout split: samples cut at load, as documents.

`SpanBatches` is `reader.PlannedBatches` (the same dealing of batches to loader workers, the same
record cache and read-ahead) over `spans.SpanSources`: a planned sample id becomes its documents
(`plan.samples`: one window, or the documents of a packed sample), and each document's bases are
read from the stored pieces it spans (a 1 M window spans many records), checked as every record
is (crc32, piece count). The batch builder (`batch.assemble`) lays the documents out. A sample
with a damaged piece is filler under ``handler="warn"``, so every rank still yields its batches.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.load.batch.assemble import Document, PlannedDocuments, document_key
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
        draws, and each document's row, length and pieces (record number, row, bases taken)."""
        micro = plan.batches.shape[1]
        real, seeds, passes, sources, found = self.plan_documents(plan.batches[batches])
        rows: dict[int, tuple[list[int], list[tuple[int, int] | None]]] = {}
        for b in batches:
            rows[b] = ([0] * micro, [None] * micro)
        for i, src, seed, p in zip(real.tolist(), sources.tolist(), seeds, passes.tolist()):
            source_list, draw_list = rows[batches[i // micro]]
            source_list[i % micro], draw_list[i % micro] = src, (seed, p)
        docs_of: dict[int, list[tuple[int, int, list[tuple[int, int, int, int]]]]] = {b: [] for b in batches}
        for d, docs in enumerate(found):
            pieces = self.records.parts[d].pieces(docs.seq, docs.start, docs.length)
            offset = int(self.records.record_offsets[d])
            spans: list[list[tuple[int, int, int, int]]] = [[] for _ in range(len(docs))]
            for span, record, row, lo, hi in zip(*(column.tolist() for column in pieces)):
                spans[span].append((offset + record, row, lo, hi))
            for i, length, span_pieces in zip(docs.sample.tolist(), docs.length.tolist(), spans):
                docs_of[batches[i // micro]].append((i % micro, length, span_pieces))
        self.prepared = {b: (rows[b][0], rows[b][1], docs_of[b]) for b in batches}
        self.prepared_plan = plan

    def ahead(self, plan: RankPlan, b: int, worker: Worker) -> list[int]:
        """Batch `b` and the next batches this worker produces (`AHEAD` of them)."""
        return worker_batches_from(len(plan), worker.id, worker.count, self.unit, b, AHEAD)

    def windows(  # type: ignore[override]  # documents of samples cut at load, not rows of stored windows
        self, plan: RankPlan, b: int, cache: RecordCache, worker: Worker
    ) -> PlannedDocuments:
        """The documents of batch `b` of the plan, with their bases read."""
        if getattr(self, "prepared_plan", None) is not plan or b not in self.prepared:
            self.prepare(plan, self.ahead(plan, b, worker))
        source_list, draw_list, docs = self.prepared.pop(b)
        samples: list[list[Document] | None] = [[] if draw is not None else None for draw in draw_list]
        damaged: set[int] = set()
        for i, length, pieces in docs:
            doc = self.read_document(length, pieces, cache)
            row = samples[i]
            if doc is None:
                damaged.add(i)
            elif row is not None:
                row.append(doc)
        for i in damaged:  # a sample with a damaged piece is filler
            samples[i] = None
        return PlannedDocuments(samples, source_list, list(draw_list))

    def read_document(
        self, length: int, pieces: list[tuple[int, int, int, int]], cache: RecordCache
    ) -> Document | None:
        """A document's bases from the pieces it spans, through the cache (None: a piece is damaged)."""
        first: BlockRows | None = None
        parts = []
        for number, row, lo, hi in pieces:
            block = cache.get(number)
            if block is MISSING:
                block = cache.put(number, self.records.read(number, True))
            if block is None:
                return None
            parts.append(block.bases(row)[lo:hi])
            if first is None:
                first = block
        assert first is not None
        row, lo = pieces[0][1], pieces[0][2]
        bases = parts[0] if len(parts) == 1 else tuple(parts)  # pieces are written where they go, never joined
        seq_id, start = first.seq_id[row], first.start[row] + lo
        return Document(bases, first.tag[row], seq_id, start, document_key(seq_id, start, length))

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
#: No documents.
EMPTY_DOCUMENTS = Documents(*(np.empty(0, dtype=np.int64) for _ in range(4)))
