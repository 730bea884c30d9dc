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
from bionemo_wds.load.plan import FILLER, RankPlan
from bionemo_wds.load.plan.samples import Documents
from bionemo_wds.load.reader import MISSING, PlannedBatches, RecordCache
from bionemo_wds.load.rows import BlockRows
from bionemo_wds.load.spans import SpanSources
from bionemo_wds.load.world import Worker


class SpanBatches(PlannedBatches):
    """The dataset of a planned loader over a sequence-layout split: this worker's batches of the
    current pass, as `PlannedDocuments`."""

    records: SpanSources  # type: ignore[assignment]  # the sequence layout's counterpart of SourceRecords

    def plan_documents(self, ids: np.ndarray) -> tuple[np.ndarray, list[Documents]]:
        """The documents of each planned id: (the ids' sources, each source's `Documents` of the ids
        that are its own, their `sample` indices into `ids`). Filler ids have none."""
        real = np.flatnonzero(ids != FILLER)
        samples, sources, _, passes = self.records.resolve(ids[real])
        found = []
        for d in range(len(self.records.parts)):
            at = np.flatnonzero(sources == d)
            docs = self.records.tables[d].documents(samples[at], passes[at]) if len(at) else EMPTY_DOCUMENTS
            found.append(Documents(real[at][docs.sample], docs.seq, docs.start, docs.length))
        return sources, found

    def windows(  # type: ignore[override]  # documents of samples cut at load, not rows of stored windows
        self, plan: RankPlan, b: int, cache: RecordCache, worker: Worker
    ) -> PlannedDocuments:
        """The documents of batch `b` of the plan, with their bases read."""
        ids = plan.batches[b]
        real = ids != FILLER
        sources, found = self.plan_documents(ids)
        _, _, seeds, passes = self.records.resolve(ids[real])
        source_list: list[int] = [0] * len(ids)
        draw_list: list[tuple[int, int] | None] = [None] * len(ids)
        samples: list[list[Document] | None] = [None] * len(ids)
        for i, src, seed, p in zip(np.flatnonzero(real).tolist(), sources.tolist(), seeds, passes.tolist()):
            source_list[i], draw_list[i], samples[i] = src, (seed, p), []
        damaged: set[int] = set()
        for d, docs in enumerate(found):
            for i, doc in zip(docs.sample.tolist(), self.read_documents(d, docs, cache)):
                row = samples[i]
                if doc is None:
                    damaged.add(i)
                elif row is not None:
                    row.append(doc)
        for i in damaged:  # a sample with a damaged piece is filler
            samples[i] = None
        return PlannedDocuments(samples, source_list, draw_list)

    def read_documents(self, d: int, docs: Documents, cache: RecordCache) -> list[Document | None]:
        """The bases of each document of source `d` (None: a piece of it is damaged), read from the
        pieces they span through the cache."""
        part = self.records.parts[d]
        pieces = part.pieces(docs.seq, docs.start, docs.length)
        offset = int(self.records.record_offsets[d])
        parts: list[list[np.ndarray]] = [[] for _ in range(len(docs))]
        heads: list[tuple[BlockRows, int, int] | None] = [None] * len(docs)
        broken: set[int] = set()
        for span, record, row, lo, hi in zip(*(column.tolist() for column in pieces)):
            number = offset + record
            block = cache.get(number)
            if block is MISSING:
                block = cache.put(number, self.records.read(number, True))
            if block is None:
                broken.add(span)
                continue
            parts[span].append(block.bases(row)[lo:hi])
            if heads[span] is None:
                heads[span] = (block, row, lo)
        out: list[Document | None] = []
        for j, (length, head) in enumerate(zip(docs.length.tolist(), heads)):
            if j in broken or head is None:
                out.append(None)
                continue
            block, row, lo = head
            bases = parts[j][0] if len(parts[j]) == 1 else np.concatenate(parts[j])
            seq_id, start = block.seq_id[row], block.start[row] + lo
            out.append(Document(bases, block.tag[row], seq_id, start, document_key(seq_id, start, length)))
        return out

    def prefetch(self, plan: RankPlan, batches: list[int], cache: RecordCache) -> None:
        """Ask for the records of `batches` not decoded already, in the order they are read."""
        if not self.records.shards.reads_ahead:
            return
        wanted: dict[int, None] = {}
        for b in batches:
            for d, docs in enumerate(self.plan_documents(plan.batches[b])[1]):
                offset = int(self.records.record_offsets[d])
                for record in self.records.parts[d].pieces(docs.seq, docs.start, docs.length).record.tolist():
                    wanted.setdefault(offset + record)
        self.records.prefetch([r for r in wanted if r not in cache])


#: No documents.
EMPTY_DOCUMENTS = Documents(*(np.empty(0, dtype=np.int64) for _ in range(4)))
