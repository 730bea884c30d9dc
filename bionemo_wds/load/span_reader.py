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
from bionemo_wds.load.reader import MISSING, PlannedBatches, RecordCache
from bionemo_wds.load.spans import SpanSources
from bionemo_wds.load.world import Worker


class SpanBatches(PlannedBatches):
    """The dataset of a planned loader over a sequence-layout split: this worker's batches of the
    current pass, as `PlannedDocuments`."""

    records: SpanSources  # type: ignore[assignment]  # the sequence layout's counterpart of SourceRecords

    def plan_documents(self, ids: np.ndarray) -> list[list[tuple[int, int, int, int]] | None]:
        """(source, sequence, start, length) of each document of each planned id (None: filler)."""
        real = ids != FILLER
        out: list[list[tuple[int, int, int, int]] | None] = [None] * len(ids)
        samples, sources, _, passes = self.records.resolve(ids[real])
        where = np.flatnonzero(real)
        for d in np.unique(sources).tolist():
            at = np.flatnonzero(sources == d)
            docs = self.records.tables[d].documents(samples[at], passes[at])
            for i in at.tolist():
                out[int(where[i])] = []
            for k, s, a, n in zip(docs.sample.tolist(), docs.seq.tolist(), docs.start.tolist(), docs.length.tolist()):
                target = out[int(where[at[k]])]
                assert target is not None
                target.append((d, s, a, n))
        return out

    def windows(  # type: ignore[override]  # documents of samples cut at load, not rows of stored windows
        self, plan: RankPlan, b: int, cache: RecordCache, worker: Worker
    ) -> PlannedDocuments:
        """The documents of batch `b` of the plan, with their bases read."""
        ids = plan.batches[b]
        planned = self.plan_documents(ids)
        real = ids != FILLER
        _, sources, seeds, passes = self.records.resolve(ids[real])
        source_list: list[int] = [0] * len(ids)
        draw_list: list[tuple[int, int] | None] = [None] * len(ids)
        for i, src, seed, p in zip(np.flatnonzero(real).tolist(), sources.tolist(), seeds, passes.tolist()):
            source_list[i], draw_list[i] = src, (seed, p)
        samples: list[list[Document] | None] = []
        for docs in planned:
            if docs is None:
                samples.append(None)
                continue
            read = [self.read_document(d, s, a, n, cache) for d, s, a, n in docs]
            samples.append(None if any(doc is None for doc in read) else [doc for doc in read if doc is not None])
        return PlannedDocuments(samples, source_list, list(draw_list))

    def read_document(self, d: int, seq: int, start: int, length: int, cache: RecordCache) -> Document | None:
        """Bases ``[start, start + length)`` of sequence `seq` of source `d` (None: a piece is damaged)."""
        parts, first = [], None
        offset = int(self.records.record_offsets[d])
        for record, row, lo, hi in self.records.parts[d].pieces(seq, start, length):
            number = offset + record
            block = cache.get(number)
            if block is MISSING:
                block = cache.put(number, self.records.read(number, True))
            if block is None:
                return None
            parts.append(block.bases(row)[lo:hi])
            if first is None:
                first = (block, row, lo)
        assert first is not None
        block, row, lo = first
        bases = parts[0] if len(parts) == 1 else np.concatenate(parts)
        seq_id, source_start = block.seq_id[row], block.start[row] + lo
        return Document(bases, block.tag[row], seq_id, source_start, document_key(seq_id, source_start, length))

    def prefetch(self, plan: RankPlan, batches: list[int], cache: RecordCache) -> None:
        """Ask for the records of `batches` not decoded already, in the order they are read."""
        if not self.records.shards.reads_ahead:
            return
        wanted: dict[int, None] = {}
        for b in batches:
            for docs in self.plan_documents(plan.batches[b]):
                for d, s, a, n in docs or ():
                    offset = int(self.records.record_offsets[d])
                    for record, _, _, _ in self.records.parts[d].pieces(s, a, n):
                        wanted.setdefault(offset + record)
        self.records.prefetch([r for r in wanted if r not in cache])

    def reporter(self, plan: RankPlan, record: int, workers: int) -> int:
        """Every worker reports the damaged records it reads (one record is seldom read by two)."""
        return Worker.detect().id
