"""A sequence-layout split read as samples cut at load: its sequences, where their bases lie, how to cut them.

A dataset prepared with ``--layout sequences`` (format version 5) stores every base of a split once,
as pieces of ``params.window_length`` bases, each sequence's pieces consecutive, and lists the
split's sequences in storage order in ``sequence-index.npy`` (`format.read_sequence_index`).
`Cutting` holds a dataset's load-time options (seq_length, stride, tail, pack, window_offset) and
makes the split's sample table (`plan.samples.WindowSamples` or `PackedSamples`), refusing what the
data cannot serve; `SequenceRecords` finds the pieces (record, row, bases) a span of a sequence
lies in; `SpanSources` is a split of one or more such datasets as one table of samples, the
counterpart of `records.SourceRecords` for the reader (`span_reader.SpanBatches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np

from bionemo_wds.core.tokenizer import N_SPECIALS_PER_SAMPLE
from bionemo_wds.core.windowing import default_stride
from bionemo_wds.errors import ManifestError, OptionError
from bionemo_wds.format import Params
from bionemo_wds.load.plan import RecordTable
from bionemo_wds.load.plan.mixing import split_virtual
from bionemo_wds.load.plan.samples import OFFSETS, TAILS, PackedSamples, SequenceTable, WindowSamples, check_choice
from bionemo_wds.load.records import SplitRecords, by_source
from bionemo_wds.load.rows import BlockRows
from bionemo_wds.load.shard_errors import ShardErrorPolicy

#: A load-time sample table.
SampleTable = WindowSamples | PackedSamples


def is_sequence_layout(params: Params) -> bool:
    """Whether a dataset stores sequences (format 5, ``--layout sequences``) rather than windows."""
    return getattr(params, "layout", "windows") == "sequences"


@dataclass(frozen=True)
class Cutting:
    """How samples are cut at load time (see `GenomicDataset` for each option); checked when made."""

    seq_length: int | None = None
    stride: int | None = None
    tail: str | None = None
    pack: bool = False
    window_offset: str = "fixed"
    control_tags: bool = True
    tag_dropout: float = 0.0
    tokenizer: Any = None  # a `tokenize.Tokenizer` (None: bytes): seq_length counts its tokens

    def __post_init__(self) -> None:
        if self.tail is not None:
            check_choice("tail", self.tail, TAILS)
        check_choice("window_offset", self.window_offset, OFFSETS)
        if self.stride is not None and self.stride < 1:
            raise OptionError(f"stride must be at least 1, got {self.stride}")
        if self.pack and self.stride is not None:
            raise OptionError("pack=True trains every base once (stride = window): leave stride unset")
        if self.seq_length is not None and self.seq_length <= N_SPECIALS_PER_SAMPLE:
            raise OptionError(f"seq_length must be more than {N_SPECIALS_PER_SAMPLE}, got {self.seq_length}")

    @property
    def at_load(self) -> bool:
        """Whether an option asks for a cut only a sequence-layout dataset can make."""
        return self.pack or self.stride is not None or self.tail is not None or self.window_offset != "fixed"

    def check_windows_layout(self, root: str, params: Params) -> None:
        """A windows-layout dataset (cut at prepare) serves its own windows only: say why not otherwise."""
        if not self.at_load:
            return
        asked = ", ".join(
            f"{name}={value!r}"
            for name, value, default in (
                ("pack", self.pack, False),
                ("stride", self.stride, None),
                ("tail", self.tail, None),
                ("window_offset", self.window_offset, "fixed"),
            )
            if value != default
        )
        raise OptionError(
            f"{root} stores windows cut at prepare (seq_length {params.seq_length}, stride {params.stride}, tail "
            f"{params.tail}), so {asked} cannot be served from it: its windows overlap and short sequences are "
            "padded in the shards. Prepare it with --layout sequences to cut windows and pack at load"
        )

    def window(self, params: Params) -> int:
        """Bases of a window (the room BOS, the longest tag, SEP and EOS leave in seq_length; with a
        tokenizer, the bases whose tokens fill the room its specials leave)."""
        seq_length = self.seq_length or params.seq_length
        if self.tokenizer is not None:
            return self.tokenizer.window_bases(seq_length - self.tokenizer.n_specials)
        return seq_length - N_SPECIALS_PER_SAMPLE - params.max_tag_bytes

    def table(self, root: str, params: Params, seqs: SequenceTable, seed: int) -> SampleTable:
        """The split's samples: windows, or packed samples."""
        seq_length = self.seq_length or params.seq_length
        window = self.window(params)
        if window < 1:
            raise OptionError(
                f"seq_length {seq_length} leaves no room for bases in {root} after {N_SPECIALS_PER_SAMPLE} special "
                f"tokens and its longest control tag ({params.max_tag_bytes} bytes)"
            )
        if self.pack and self.tokenizer is not None:  # packed in base units (`Tokenizer.pack_units`)
            units, header = self.tokenizer.pack_units(seq_length)
            return PackedSamples(seqs, units, np.full(len(seqs), header, dtype=np.int64), self.window_offset, seed)
        if self.pack:
            if self.control_tags:  # a dropped lineage tag may grow up to the room prepare left for it
                tags = np.where(seqs.tag_bytes > 0, params.max_tag_bytes, 0) if self.tag_dropout > 0 else seqs.tag_bytes
                headers = N_SPECIALS_PER_SAMPLE + tags
            else:
                headers = np.full(len(seqs), N_SPECIALS_PER_SAMPLE - 1, dtype=np.int64)
            return PackedSamples(seqs, seq_length, headers.astype(np.int64), self.window_offset, seed)
        longest = int(seqs.lengths.max(initial=0))
        if longest < window and self.tokenizer is not None:
            raise OptionError(
                f"seq_length {seq_length} asks for windows of {window} bases ({self.tokenizer.name} tokens), longer "
                f"than every sequence of {root} (the longest has {longest} bases): use a shorter seq_length, or "
                "pack=True"
            )
        if longest < window:
            raise OptionError(
                f"seq_length {seq_length} asks for windows of {window} bases, longer than every sequence of {root} "
                f"(the longest has {longest} bases): every sample would be one padded sequence; use a seq_length of "
                f"at most {longest + N_SPECIALS_PER_SAMPLE + params.max_tag_bytes}, or pack=True"
            )
        stride = self.stride if self.stride is not None else min(default_stride(seq_length), window)
        if stride > window:
            raise OptionError(f"stride {stride} is longer than the window of {window} bases: bases would be skipped")
        return WindowSamples(seqs, window, stride, self.tail or params.tail, self.window_offset, seed)


class Pieces(NamedTuple):
    """Stored pieces of some spans (`SequenceRecords.pieces`): parallel int64 arrays, in order."""

    span: np.ndarray
    record: np.ndarray
    row: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


class SequenceRecords:
    """A sequence-layout split of one dataset: its records (pieces) and its sequences."""

    def __init__(self, records: SplitRecords, seqs: SequenceTable):
        self.records, self.seqs = records, seqs
        pieces = int(seqs.first_piece[-1])
        if pieces != records.table.n_windows:
            raise ManifestError(
                f"{records.paths[0] if records.paths else 'a split'}: the sequence index lists {pieces} pieces, "
                f"the record index {records.table.n_windows}"
            )

    def pieces(self, seq: np.ndarray, start: np.ndarray, length: np.ndarray) -> Pieces:
        """The stored pieces that bases ``[start, start + length)`` of each sequence `seq` lie in, for
        many spans at once (int64 arrays): for each piece in order, its span, record, row in the record,
        and the bases of it the span takes (``lo:hi``)."""
        size = self.seqs.piece
        first = start // size
        counts = (start + np.maximum(length, 1) - 1) // size - first + 1
        span = np.repeat(np.arange(len(seq), dtype=np.int64), counts)
        k = first[span] + np.arange(len(span), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        record, row = self.records.table.locate(self.seqs.first_piece[seq[span]] + k)
        lo = np.maximum(start[span] - k * size, 0)
        hi = np.minimum(start[span] + length[span] - k * size, size)
        return Pieces(span, record, row, lo, hi)


class SpanSources:
    """A split of one or more sequence-layout datasets as one table of samples: source d's sample i is
    sample ``offset_d + i``; the plan's virtual ids are decoded here (`resolve`), and records are
    numbered across sources (source d's record r is ``record_offsets[d] + r``)."""

    def __init__(
        self,
        parts: Sequence[SequenceRecords],
        tables: Sequence[SampleTable],
        policies: Sequence[ShardErrorPolicy],
        seeds: Sequence[int],
    ):
        self.parts, self.tables, self.policies, self.seeds = list(parts), tuple(tables), list(policies), list(seeds)
        record_tables = [p.records.table for p in parts]
        self.record_offsets = np.cumsum([0] + [len(t) for t in record_tables]).astype(np.int64)
        self.sample_offsets = np.cumsum([0] + [t.n_windows for t in tables]).astype(np.int64)
        self.total = max(int(self.sample_offsets[-1]), 1)
        # the pieces of every source (the reader's cache is sized by the largest record)
        self.table = RecordTable(
            np.concatenate([t.shard for t in record_tables] or [np.empty(0, np.int64)]),
            np.concatenate([t.windows for t in record_tables] or [np.empty(0, np.int64)]),
        )
        self.shards = SimpleNamespace(reads_ahead=any(p.records.shards.reads_ahead for p in parts))

    @property
    def rows_per_sample(self) -> float:
        """Stored rows (pieces) a mixing block's sample keeps decoded in the reader's cache: the pieces
        per sample, twice (a unit of ids shares the records at its edges with units of other mixing
        blocks; packed documents lie among the pieces of long sequences' whole samples)."""
        return 2 * self.table.n_windows / self.total

    def resolve(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int], np.ndarray]:
        """Virtual plan ids -> (sample id within its source, source, its draws' seed, pass of each)."""
        samples, passes = split_virtual(np.asarray(ids, dtype=np.int64), self.total)
        sources = np.searchsorted(self.sample_offsets, samples, side="right") - 1
        seeds = [self.seeds[d] for d in sources.tolist()]
        return samples - self.sample_offsets[sources], sources, seeds, passes

    def source_of(self, record: int) -> tuple[int, int]:
        """(source, record within it) of a record number."""
        d = int(np.searchsorted(self.record_offsets, record, side="right")) - 1
        return d, record - int(self.record_offsets[d])

    def read(self, record: int, report: bool = True) -> BlockRows | None:
        """The record, read and checked by its source (None: damaged and skipped)."""
        d, local = self.source_of(record)
        return self.parts[d].records.read(local, self.policies[d], report)

    def prefetch(self, records: list[int]) -> None:
        """Start fetching these records' bytes (remote sources; in the order given)."""
        for d, wanted in by_source(records, self.record_offsets).items():
            self.parts[d].records.prefetch(wanted)

    def close(self) -> None:
        for part in self.parts:
            part.records.close()


def split_records(part: SplitRecords | SequenceRecords) -> SplitRecords:
    """The records of a split of one dataset (a sequence-layout split's are its pieces)."""
    return part.records if isinstance(part, SequenceRecords) else part
