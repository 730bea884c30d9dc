"""k-mer vocabularies: Nucleotide Transformer's non-overlapping 6-mers and DNABERT's overlapping k-mers.

Nucleotide Transformer (instadeepai/nucleotide-transformer, ``nucleotide_transformer/tokenizers.py``,
``NucleotidesKmersTokenizer`` and ``compute_dcnuc_tokens_to_ids``): the sequence is split at every N;
each piece is cut into 6-mers from its start, and what is left of it (fewer than 6 bases) becomes
single-base tokens; every N is a token of its own. Vocabulary: ``<unk>`` 0, ``<pad>`` 1, ``<mask>`` 2,
``<cls>`` 3, the 4,096 6-mers in ``itertools.product("ATCG", repeat=6)`` order (4 .. 4099), the single
bases A, T, C, G, N (4100 .. 4104), ``<eos>`` 4105, ``<bos>`` 4106: 4,107 ids. The Hugging Face
models prepend ``<cls>`` to every sequence.

DNABERT (jerryji1993/DNABERT, ``src/transformers/dnabert-config/bert-config-{k}/vocab.txt`` and its
``seq2kmer``): a sequence of L bases is the L - k + 1 overlapping k-mers starting at every base.
Vocabulary: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3, ``[MASK]`` 4, then the 4^k k-mers in
``product("ATCG", repeat=k)`` order; a k-mer not in it (one holding N) is ``[UNK]``, as DNABERT's BERT
tokenizer makes it. A sample is ``[CLS]`` k-mers ``[SEP]``.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.core.byte_lookup import holds_other_than, translate_bytes
from bionemo_wds.load.tokenize.base import Spans, Tokenizer, Tokens, first_tokens, plain_table

#: The order both families enumerate k-mers in: ``product("ATCG", repeat=k)``.
KMER_ORDER = b"ATCG"


def base_codes() -> np.ndarray:
    """``CODES[byte]``: A 0, T 1, C 2, G 3 in either case (the k-mer digit), 4 for anything else."""
    codes = np.full(256, 4, dtype=np.uint8)
    for case in (KMER_ORDER, KMER_ORDER.lower()):
        codes[np.frombuffer(case, dtype=np.uint8)] = np.arange(4)
    return codes


CODES = base_codes()
#: `CODES` as a `bytes.translate` table.
CODES_TABLE = CODES.tobytes()


def codes_of(bases: np.ndarray) -> np.ndarray:
    """``CODES[bases]`` in one table pass (`byte_lookup.translate_bytes`: a numpy table lookup of uint8
    costs about 3x `bytes.translate`, which costs several times the C pass)."""
    return translate_bytes(bases, CODES_TABLE)


def only_acgt(bases: np.ndarray) -> bool:
    """Whether every base is A, C, G or T in either case (one pass: `byte_lookup.holds_other_than`)."""
    return not holds_other_than(bases, b"ACGTacgt")


def kmer_grid(codes: np.ndarray, k: int) -> np.ndarray:
    """The index in `KMER_ORDER` order of the k-mer starting at every base of `codes` (the last
    ``k - 1`` and any holding a code above 3 meaningless), by doubling: 2-mers from bases, 4-mers
    from 2-mers, then k from those (log k whole-array passes in the smallest types; uint8 arithmetic
    wraps only on k-mers holding N, whose values are not used)."""
    pieces = {1: codes}
    span = 1
    while span * 2 <= k:  # pieces[2 * span][i] = pieces[span][i] * 4**span + pieces[span][i + span]
        part = pieces[span]
        wide = part if span < 4 else part.astype(np.int32)
        pieces[2 * span] = wide[: len(wide) - span] * wide.dtype.type(4**span) + wide[span:]
        span *= 2
    wide_type = np.dtype(np.int16 if k <= 7 else np.int32)  # 4**7 ids (and DNABERT's 5 specials) fit int16
    value: np.ndarray = pieces[span].astype(wide_type)
    have = span
    for size in sorted(pieces, reverse=True):  # then the rest of k from the pieces made
        if have + size <= k:
            value = value[: len(value) - size] * wide_type.type(4**size) + pieces[size][have : have + len(value) - size]
            have += size
    return value


def kmer_values(codes: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    """The index in `KMER_ORDER` order of the k-mer at each start (codes of its bases, all < 4)."""
    value = np.zeros(len(starts), dtype=np.int64)
    for j in range(k):
        value = value * 4 + codes[starts + j]
    return value


class NucleotideTransformerTokenizer(Tokenizer):
    """NT's 6-mers (module docstring); ``<cls>`` before each sample."""

    UNK, PAD, MASK, CLS = range(4)

    def __init__(self, name: str = "nt", k: int = 6):
        self.name, self.kmer, self.overlapping = name, k, False
        self.singles = 4 + 4**k  # A, T, C, G, N from here
        self.vocab_size = self.singles + 5 + 2
        self.pad_id, self.mask_id = self.PAD, self.MASK
        eos, bos = self.singles + 5, self.singles + 6
        self.special_ids = frozenset({self.UNK, self.PAD, self.MASK, self.CLS, eos, bos})
        self.prefix = (self.CLS,)
        self.bases_per_token = float(k)
        self.edge_tokens = k - 1  # a piece's leftover bases, one token each
        single = np.full(256, self.UNK, dtype=np.int16)
        for case in (KMER_ORDER + b"N", KMER_ORDER.lower() + b"n"):
            single[np.frombuffer(case, dtype=np.uint8)] = np.arange(self.singles, self.singles + 5)
        self.single = single

    def window_bases(self, room: int) -> int:
        return max(1, room * (self.kmer or 1))

    def spell(self, bases: np.ndarray, bounds: np.ndarray, plain: bool) -> Tokens:
        """Each document's tokens in a few whole-document array operations (its k-mers are a reshape
        of its bases); a document holding N by the general rule (`spell_pieces`)."""
        k, codes, clean = self.kmer or 1, codes_of(bases), plain or only_acgt(bases)
        powers = (4 ** np.arange(k - 1, -1, -1)).tolist()
        ids, starts, widths, counts = [], [], [], []
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if not clean and not only_acgt(bases[s:e]):
                got = self.spell_pieces(bases[s:e], codes[s:e], k)
                ids.append(got.ids)
                starts.append(got.starts + s)
                widths.append(got.ends - got.starts)
                counts.append(len(got.ids))
                continue
            whole = s + (e - s) // k * k  # whole k-mers, then the leftover bases (the usual document)
            grid = codes[s:whole].reshape(-1, k)
            value = np.full(len(grid), 4, dtype=np.int16)
            for j in range(k):  # k column passes: numpy has no fast integer matrix product
                value += grid[:, j] * np.int16(powers[j])
            ids += [value, self.single[bases[whole:e]]]
            starts += [np.arange(s, whole, k, dtype=np.int64), np.arange(whole, e, dtype=np.int64)]
            widths += [np.full(len(value), k, dtype=np.int64), np.ones(e - whole, dtype=np.int64)]
            counts.append(len(value) + e - whole)
        sizes = np.array(counts, dtype=np.int64)
        first = first_tokens(sizes)
        if not ids:
            empty = np.empty(0, dtype=np.int64)
            return Tokens(empty.astype(np.int16), first, sizes, empty, empty)
        return Tokens(np.concatenate(ids), first, sizes, np.concatenate(starts), np.concatenate(widths))

    def spell_pieces(self, bases: np.ndarray, codes: np.ndarray, k: int) -> Spans:
        """One document's tokens by NT's general rule: split at N, whole k-mers from each piece's start,
        its leftover bases and every N single tokens (starts relative to the document)."""
        n = len(bases)
        idx = np.arange(n, dtype=np.int64)
        is_n = codes > 3
        run_start = np.maximum.accumulate(np.where(is_n, idx, -1)) + 1  # first base after the last N
        next_n = np.minimum.accumulate(np.where(is_n, idx, n)[::-1])[::-1] if n else idx  # next N (or n)
        full_end = run_start + (next_n - run_start) // k * k  # where the piece's whole k-mers end
        in_kmer = ~is_n & (idx < full_end)
        starts = idx[~in_kmer | ((idx - run_start) % k == 0)]
        kmer = in_kmer[starts]
        ids = self.single[bases[starts]]
        ids[kmer] = 4 + kmer_values(codes, starts[kmer], k)
        return Spans(ids, starts, starts + np.where(kmer, k, 1))


class DnabertTokenizer(Tokenizer):
    """DNABERT's overlapping k-mers (module docstring); ``[CLS]`` before, ``[SEP]`` after each sample."""

    PAD, UNK, CLS, SEP, MASK = range(5)

    def __init__(self, k: int):
        self.name, self.kmer, self.overlapping = f"dnabert{k}", k, True
        self.vocab_size = 5 + 4**k
        self.pad_id, self.mask_id = self.PAD, self.MASK
        self.special_ids = frozenset(range(5))
        self.prefix, self.suffix = (self.CLS,), (self.SEP,)
        self.plain_codes = plain_table({b: int(CODES[b]) for b in b"ACGT"})

    def window_bases(self, room: int) -> int:
        return room + (self.kmer or 1) - 1

    def spell(self, bases: np.ndarray, bounds: np.ndarray, plain: bool) -> Tokens:
        """The k-mer at every base of the joined documents in k whole-batch passes (int16: 4**6 + 5
        ids fit); a document's tokens are those starting at its first ``length - k + 1`` bases."""
        k = self.kmer or 1
        codes = codes_of(bases)
        count = max(0, len(bases) - k + 1)
        value = self.spell_codes(codes)[:count]
        if not plain and not only_acgt(bases):  # a k-mer holding N is [UNK]
            cum = np.concatenate([[0], np.cumsum(codes > 3)])
            value[cum[k : k + count] > cum[:count]] = self.UNK
        counts = np.maximum(np.diff(bounds) - k + 1, 0)
        return Tokens(value, bounds[:-1], counts, None, k)

    def spell_codes(self, codes: np.ndarray) -> np.ndarray:
        value = kmer_grid(codes, self.kmer or 1)
        value += self.MASK + 1
        return value
