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

from bionemo_wds.load.tokenize.base import Spans, Tokenizer

#: The order both families enumerate k-mers in: ``product("ATCG", repeat=k)``.
KMER_ORDER = b"ATCG"


def base_codes() -> np.ndarray:
    """``CODES[byte]``: A 0, T 1, C 2, G 3 (the k-mer digit), -1 for anything else."""
    codes = np.full(256, -1, dtype=np.int64)
    codes[np.frombuffer(KMER_ORDER, dtype=np.uint8)] = np.arange(4)
    return codes


CODES = base_codes()


def kmer_values(codes: np.ndarray, starts: np.ndarray, k: int) -> np.ndarray:
    """The index in `KMER_ORDER` order of the k-mer at each start (codes of its bases, all >= 0)."""
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
        single = np.full(256, self.UNK, dtype=np.int64)
        single[np.frombuffer(KMER_ORDER + b"N", dtype=np.uint8)] = np.arange(self.singles, self.singles + 5)
        self.single = single

    def window_bases(self, room: int) -> int:
        return max(1, room * (self.kmer or 1))

    def spell(self, upper: np.ndarray) -> Spans:
        k, n = self.kmer or 1, len(upper)
        if ord("N") not in upper:  # one piece: whole k-mers, then the leftover bases (the usual window)
            whole = n // k * k
            kmers = CODES[upper[:whole]].reshape(-1, k) @ (4 ** np.arange(k - 1, -1, -1, dtype=np.int64))
            ids = np.concatenate([4 + kmers, self.single[upper[whole:]]])
            starts = np.concatenate([np.arange(0, whole, k, dtype=np.int64), np.arange(whole, n, dtype=np.int64)])
            return Spans(ids, starts, starts + np.where(starts < whole, k, 1))
        idx = np.arange(n, dtype=np.int64)
        is_n = upper == ord("N")
        run_start = np.maximum.accumulate(np.where(is_n, idx, -1)) + 1  # first base after the last N
        next_n = np.minimum.accumulate(np.where(is_n, idx, n)[::-1])[::-1] if n else idx  # next N (or n)
        full_end = run_start + (next_n - run_start) // k * k  # where the piece's whole k-mers end
        in_kmer = ~is_n & (idx < full_end)
        starts = idx[~in_kmer | ((idx - run_start) % k == 0)]
        kmer = in_kmer[starts]
        codes = CODES[upper]
        ids = self.single[upper[starts]]
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

    def window_bases(self, room: int) -> int:
        return room + (self.kmer or 1) - 1

    def spell(self, upper: np.ndarray) -> Spans:
        k = self.kmer or 1
        if len(upper) < k:
            empty = np.empty(0, dtype=np.int64)
            return Spans(empty, empty, empty)
        codes = CODES[upper]
        count = len(upper) - k + 1
        value = np.zeros(count, dtype=np.int64)
        for j in range(k):  # k whole-array passes: numpy has no fast integer matrix product
            value = value * 4 + codes[j : j + count]
        ids = 5 + value
        if ord("N") in upper:  # a k-mer holding N is [UNK]
            cum = np.concatenate([[0], np.cumsum(codes < 0)])
            ids[cum[k:] > cum[:count]] = self.UNK
        starts = np.arange(count, dtype=np.int64)
        return Spans(ids, starts, starts + k)
