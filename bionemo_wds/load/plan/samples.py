"""Samples cut at load time from a sequence-layout split: windows of any length, or packed documents. Pure.

A sequence-layout dataset (``prepare --layout sequences``) stores every base of a split once, each
sequence as consecutive pieces, sequences in a seeded order (`SequenceTable`). The samples are made
here, per split, from the sequences' lengths alone, so one set of shards serves any context length:

- `WindowSamples`: windows of ``window`` bases every ``stride`` bases of each sequence, the tail
  rule of prepare (``"end"``: a last window aligned to the sequence's end; ``"drop"``), a sequence
  shorter than a window as one short (padded) window. With ``offsets="random"`` each sequence's
  grid shifts per pass by an offset drawn from (seed, pass, sequence) within the room its tail
  leaves, so the count never changes (a fresh cut every epoch, with the same epoch length).
- `PackedSamples`: whole stretches of ``seq_length - header`` bases fill a sample alone; the
  rest of each sequence (a short sequence, a long one's tail, and with random offsets its head)
  are documents packed one after another into samples of ``seq_length`` tokens, a document cut
  at a sample's end continuing as a document of its own in the next one. Which documents share a
  sample is a function of (seed, pass); the number of packed samples is a bound that holds for
  every pass (`packed_bound`), the few a pass leaves unused being empty (filler) samples.

Sample ids number full samples sequence by sequence in storage order (then the packed ones in
packing order), so consecutive ids read the same stored bytes; `order` deals units of consecutive
ids (`plan.order.UnitOrder`) that span about `UNIT_RECORDS` stored records (`unit_size`), so a
record is decoded about once per pass however many samples it holds (1 k windows: hundreds; 1 M:
a fraction of one). Nothing holds an array of every sample: per sequence arrays only, and per pass
the packing of the short documents.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from bionemo_wds.core.seeds import salted_ints, stream_seed
from bionemo_wds.core.windowing import TAIL_MODES, tail_window_counts
from bionemo_wds.errors import OptionError
from bionemo_wds.load.plan.order import UnitOrder
from bionemo_wds.load.plan.types import DEFAULT_MIX

#: The fewest consecutive sample ids dealt together (their bases lie together).
UNIT = 16
#: Stored records' worth of samples a unit of ids spans: its records are read for it alone, but for
#: the one or two it shares at its edges with the neighbouring units (read again for those).
UNIT_RECORDS = 2
#: Load-time tail rules (prepare's).
TAILS = TAIL_MODES
#: Where each sequence's window grid starts: at 0 (``"fixed"``) or at a per-pass random offset.
OFFSETS = ("fixed", "random")
#: Short documents shuffled together when a pass's packing order is drawn, where the table does not
#: know its records (then: `UNIT_RECORDS` records' worth of documents, which lie close in storage).
PACK_BLOCK = 256


@dataclass(frozen=True)
class SequenceTable:
    """A split's sequences in storage order: length, control-tag bytes, and the piece length they are
    stored in (sequence s is pieces ``first_piece[s] ..`` of the split, ``piece`` bases each, the last
    shorter); `records`: how many stored records hold those pieces (0: not known), which sizes the
    units of ids the epoch order deals (`unit_size`)."""

    lengths: np.ndarray  # int64
    tag_bytes: np.ndarray  # int64
    piece: int
    records: int = 0

    def __len__(self) -> int:
        return len(self.lengths)

    @cached_property
    def first_piece(self) -> np.ndarray:
        """The piece id of each sequence's first piece, plus the total (length ``len + 1``)."""
        pieces = np.maximum(1, -(-self.lengths // self.piece))
        return np.concatenate([[0], np.cumsum(pieces)]).astype(np.int64)

    @property
    def n_bases(self) -> int:
        return int(self.lengths.sum())


@dataclass(frozen=True)
class Documents:
    """The documents of some samples (one for a window): for each, the index of its sample among
    the ids asked for (non-decreasing), its sequence (storage order), first base and length."""

    sample: np.ndarray
    seq: np.ndarray
    start: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return len(self.sample)


def unit_size(n_samples: int, records: int, mix: int) -> int:
    """Consecutive sample ids dealt together: the largest power of two from `UNIT` up within
    `UNIT_RECORDS` records' worth of the `n_samples` samples (of `records` records; `UNIT` when not
    known), at most `mix` (so a mixing block of a power of two holds whole units)."""
    want = UNIT_RECORDS * n_samples / records if records > 0 else UNIT
    unit = UNIT
    while unit * 2 <= min(want, mix):
        unit *= 2
    return unit


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise OptionError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def offset_salt(seed: int, pass_: int) -> int:
    """The salt of a pass's window offsets (their own stream)."""
    return stream_seed(seed, "window_offset", pass_)


def pass_offsets(seqs: np.ndarray, bounds: np.ndarray, passes: np.ndarray, seed: int) -> np.ndarray:
    """Each sequence's offset in ``[0, bound)`` in its pass: a pure function of (seed, pass, sequence)."""
    out = np.zeros(len(seqs), dtype=np.int64)
    for p in np.unique(passes).tolist():
        at = passes == p
        out[at] = salted_ints(seqs[at], bounds[at], offset_salt(seed, int(p)))
    return out


@dataclass(frozen=True)
class WindowSamples:
    """Windows of `window` bases every `stride` bases of every sequence (see the module docstring)."""

    seqs: SequenceTable
    window: int
    stride: int
    tail: str = "end"
    offsets: str = "fixed"
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("tail", self.tail, TAILS)
        check_choice("window_offset", self.offsets, OFFSETS)
        if self.window < 1 or not 1 <= self.stride <= self.window:
            raise OptionError(f"stride must be in [1, window]: window {self.window}, stride {self.stride}")

    @cached_property
    def counts(self) -> np.ndarray:
        """Windows of each sequence (prepare's rule)."""
        return tail_window_counts(self.seqs.lengths, self.window, self.stride, self.tail)

    @cached_property
    def first(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    @cached_property
    def room(self) -> np.ndarray:
        """Per sequence: how many grid offsets keep its window count (1: only 0)."""
        lengths, counts = self.seqs.lengths, self.counts
        excess = np.maximum(lengths - self.window, 0)
        if self.tail == "drop":
            return excess - (counts - 1) * self.stride + 1
        rem = excess % self.stride  # "end": the regular windows may move within what the end window covers
        return np.maximum(rem, 1)

    @property
    def n_windows(self) -> int:
        return int(self.first[-1])

    def order(self, seed: int, epoch: int, mix: int = DEFAULT_MIX) -> UnitOrder:
        return UnitOrder(self.n_windows, unit_size(self.n_windows, self.seqs.records, mix), seed, epoch, mix)

    def documents(self, ids: np.ndarray, passes: np.ndarray) -> Documents:
        """The window of each id (sample ids of this table; `passes`: the pass of each)."""
        ids = np.asarray(ids, dtype=np.int64)
        seq = np.searchsorted(self.first, ids, side="right") - 1
        k = ids - self.first[seq]
        lengths = self.seqs.lengths[seq]
        short = lengths <= self.window
        offset = np.zeros(len(ids), dtype=np.int64)
        if self.offsets == "random":
            offset = pass_offsets(seq, self.room[seq], np.asarray(passes, dtype=np.int64), self.seed)
        start = k * self.stride + offset
        if self.tail == "end":  # the last window of a grid that does not tile the sequence ends at its end
            end_window = (k == self.counts[seq] - 1) & ((lengths - self.window) % self.stride > 0)
            start = np.where(end_window, lengths - self.window, start)
        start = np.where(short, 0, start)
        return Documents(np.arange(len(ids)), seq, start, np.where(short, lengths, self.window))


@dataclass(frozen=True)
class Packing:
    """One pass's packing of the short documents: each document's sequence, start, length and
    header, in packing order, and where each packed sample starts (document, bases of it already
    placed)."""

    seq: np.ndarray
    start: np.ndarray
    length: np.ndarray
    bin_doc: np.ndarray
    bin_offset: np.ndarray

    @property
    def n_bins(self) -> int:
        return len(self.bin_doc)


def pack_documents(headers: np.ndarray, lengths: np.ndarray, seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Pack documents (``headers[d]`` tokens besides their ``lengths[d]`` bases) in order into samples of
    `seq_length` tokens: a document goes into the current sample when it fits; otherwise the bases
    that fit go in (at least one, after its header) and the rest starts the next sample as a document
    of its own; a sample without room for a header and one base is closed (that room is padding).
    Returns where each sample starts: (document, bases of it placed in earlier samples).

    A loop over documents (not over tokens): each decision depends on the room the previous ones
    left, and short documents are at most two per sequence."""
    bin_doc, bin_offset = [], []
    used, size = seq_length, seq_length  # "full" before the first document: it opens a sample
    for d, (h, n) in enumerate(zip(headers.tolist(), lengths.tolist())):
        placed = 0
        while True:
            room = size - used
            if h + n - placed <= room:
                used += h + n - placed
                break
            if room >= h + 1 and used < size:  # cut the document: what fits here, the rest next
                placed += room - h
            bin_doc.append(d)
            bin_offset.append(placed)
            used = 0
    return np.asarray(bin_doc, dtype=np.int64), np.asarray(bin_offset, dtype=np.int64)


def packed_bound(tokens: int, seq_length: int, max_header: int) -> int:
    """Packed samples that hold `tokens` tokens of documents (headers and bases) under every packing
    order: each sample but the last is full but for at most `max_header` tokens of padding, and each
    cut adds at most one header (one cut per sample), so ``(K - 1) (seq_length - 2 max_header) <= tokens``."""
    if tokens <= 0:
        return 0
    return 1 + -(-tokens // (seq_length - 2 * max_header))


@dataclass(frozen=True)
class PackedSamples:
    """Samples of `seq_length` tokens packed from every base of the split once (module docstring).

    `headers`: tokens each sequence's documents take besides their bases (BOS, the tag's room,
    SEP, EOS: ``3 + tag`` with control tags, 2 without)."""

    seqs: SequenceTable
    seq_length: int
    headers: np.ndarray
    offsets: str = "fixed"
    seed: int = 0
    packings: OrderedDict = field(default_factory=OrderedDict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_choice("window_offset", self.offsets, OFFSETS)
        if len(self.headers) and int(self.headers.max()) * 2 >= self.seq_length:
            raise OptionError(
                f"seq_length {self.seq_length} leaves no room to pack documents after headers of "
                f"{int(self.headers.max())} tokens (BOS, the control tag, SEP, EOS)"
            )

    @cached_property
    def full_length(self) -> np.ndarray:
        """Bases of a sample one sequence fills alone."""
        return self.seq_length - self.headers

    @cached_property
    def full(self) -> np.ndarray:
        """Whole samples of each sequence."""
        return self.seqs.lengths // self.full_length

    @cached_property
    def rest(self) -> np.ndarray:
        """Bases of each sequence left to the short documents."""
        return self.seqs.lengths - self.full * self.full_length

    @cached_property
    def first(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.full)]).astype(np.int64)

    @property
    def n_full(self) -> int:
        return int(self.first[-1])

    @cached_property
    def n_packed(self) -> int:
        """Packed samples of every pass (`packed_bound` of the most tokens a pass's documents take)."""
        docs = (self.rest > 0).astype(np.int64)
        if self.offsets == "random":  # a head and a tail where the offset falls inside the rest
            docs = np.where((self.full > 0) & (self.rest > 0), 2, docs)
        tokens = int((self.rest + docs * self.headers).sum())
        return packed_bound(tokens, self.seq_length, int(self.headers.max(initial=0)))

    @property
    def n_windows(self) -> int:
        """Samples of the table (the plan's name for them)."""
        return self.n_full + self.n_packed

    def order(self, seed: int, epoch: int, mix: int = DEFAULT_MIX) -> UnitOrder:
        return UnitOrder(self.n_windows, unit_size(self.n_windows, self.seqs.records, mix), seed, epoch, mix)

    @cached_property
    def pack_block(self) -> int:
        """Documents shuffled together in a pass's packing order (`packing`)."""
        if self.seqs.records <= 0:
            return PACK_BLOCK
        return max(UNIT, -(-UNIT_RECORDS * len(self.seqs) // self.seqs.records))

    def offset(self, seqs: np.ndarray, passes: np.ndarray) -> np.ndarray:
        """Where the whole samples of each sequence start in its pass (0 unless random)."""
        if self.offsets == "fixed":
            return np.zeros(len(seqs), dtype=np.int64)
        bounds = np.where(self.full[seqs] > 0, self.rest[seqs] + 1, 1)
        return pass_offsets(seqs, bounds, passes, self.seed)

    def packing(self, pass_: int) -> Packing:
        """The short documents of pass `pass_` in their packing order, packed (kept for two passes)."""
        if pass_ in self.packings:
            return self.packings[pass_]
        n = len(self.seqs)
        every = np.arange(n, dtype=np.int64)
        offset = self.offset(every, np.full(n, pass_, dtype=np.int64))
        heads = np.flatnonzero(offset > 0)
        tail_start = offset + self.full * self.full_length
        tails = np.flatnonzero(self.seqs.lengths > tail_start)
        seq = np.concatenate([heads, tails])
        start = np.concatenate([np.zeros(len(heads), np.int64), tail_start[tails]])
        length = np.concatenate([offset[heads], self.seqs.lengths[tails] - tail_start[tails]])
        # storage order (head before tail), shuffled within blocks of about `UNIT_RECORDS` records' worth
        # of documents: documents sharing a sample change every pass and still lie close in storage,
        # so a unit of packed ids (`order`) reads few records
        near = np.lexsort((start, seq))
        seq, start, length = seq[near], start[near], length[near]
        block = np.arange(len(seq), dtype=np.int64) // self.pack_block
        within = salted_ints(np.arange(len(seq)), np.full(len(seq), 1 << 30), stream_seed(self.seed, "pack", pass_))
        order = np.lexsort((within, block))
        seq, start, length = seq[order], start[order], length[order]
        bin_doc, bin_offset = pack_documents(self.headers[seq], length, self.seq_length)
        if len(bin_doc) > self.n_packed:  # cannot happen: `packed_bound` holds for every order
            raise AssertionError(f"packing needs {len(bin_doc)} samples, more than its bound {self.n_packed}")
        packing = Packing(seq, start, length, bin_doc, bin_offset)
        self.packings[pass_] = packing
        while len(self.packings) > 2:
            self.packings.popitem(last=False)
        return packing

    def documents(self, ids: np.ndarray, passes: np.ndarray) -> Documents:
        """The documents of each sample id (whole samples: one; packed: several; unused: none)."""
        ids, passes = np.asarray(ids, dtype=np.int64), np.asarray(passes, dtype=np.int64)
        sample, seq, start, length = [], [], [], []
        whole = np.flatnonzero(ids < self.n_full)
        if len(whole):
            s = np.searchsorted(self.first, ids[whole], side="right") - 1
            k = ids[whole] - self.first[s]
            sample.append(whole)
            seq.append(s)
            start.append(self.offset(s, passes[whole]) + k * self.full_length[s])
            length.append(self.full_length[s])
        packed = np.flatnonzero(ids >= self.n_full)
        for p in np.unique(passes[packed]).tolist():
            at = packed[passes[packed] == p]
            for column, values in zip((sample, seq, start, length), self.bins_documents(at, ids[at] - self.n_full, p)):
                column.append(values)
        if not sample:
            empty = np.empty(0, dtype=np.int64)
            return Documents(empty, empty, empty, empty)
        docs = [np.concatenate(c).astype(np.int64) for c in (sample, seq, start, length)]
        order = np.argsort(docs[0], kind="stable")
        return Documents(*(c[order] for c in docs))

    def bins_documents(
        self, at: np.ndarray, bins: np.ndarray, pass_: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(sample index from `at`, sequence, start, length) of each document of the packed samples
        `bins` of pass `pass_`, in order (none for a sample the pass leaves unused): each sample's
        documents are a range of the packing's, the first and last cut where the sample starts and
        where the next one does; numpy over all of them, no loop per sample."""
        packing = self.packing(pass_)
        n_bins, n_docs = packing.n_bins, len(packing.seq)
        used = bins < n_bins
        at, bins = at[used], bins[used]
        d0, o0 = packing.bin_doc[bins], packing.bin_offset[bins]
        following = bins + 1 < n_bins
        after = np.minimum(bins + 1, max(n_bins - 1, 0))
        d1 = np.where(following, packing.bin_doc[after] if n_bins else 0, n_docs)
        o1 = np.where(following, packing.bin_offset[after] if n_bins else 0, 0)
        counts = np.maximum(np.minimum(d1, n_docs - 1) - d0 + 1, 0)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        d = np.repeat(d0, counts) + np.arange(len(first), dtype=np.int64) - first
        lo = np.where(d == np.repeat(d0, counts), np.repeat(o0, counts), 0)
        hi = np.where(d == np.repeat(d1, counts), np.repeat(o1, counts), packing.length[d])
        kept = hi > lo
        d = d[kept]
        return np.repeat(at, counts)[kept], packing.seq[d], packing.start[d] + lo[kept], (hi - lo)[kept]
