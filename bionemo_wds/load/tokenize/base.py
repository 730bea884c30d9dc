"""What every tokenizer at load time is: the interface the batch builders and masked-LM code use.

Shards store bases, one byte each; a tokenizer turns a batch's documents (their bases joined in one
uint8 array, each already on the strand its sample was drawn on) into the ids of a model family's
vocabulary in whole-batch array operations (`Tokenizer.tokenize` -> `Tokens`: no numpy call per
document or token), and says how the family frames a sample with special tokens (`prefix`,
`suffix`) and which ids are never trained or masked (`special_ids`). Each id comes with the span of
bases it spells, which is how soft-mask weights and degenerate bases become per-token flags
(`token_flags`); `spans` gives one document's (`Spans`).

The planning side asks two numbers of a tokenizer (`bases_per_token`, `edge_tokens`) so an epoch
can be cut in bases before any base is read, with `seq_length` counting tokens (`window_bases`,
`pack_units`).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import NamedTuple

import numpy as np

from bionemo_wds.core.byte_lookup import holds_other_than
from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE, UPPERCASE_TABLE, shown_byte
from bionemo_wds.errors import SourceError

#: ``UPPER[byte]``: the byte upper-cased (tokenizer vocabularies are upper case).
UPPER: np.ndarray = np.frombuffer(UPPERCASE_TABLE, dtype=np.uint8)
#: Bytes that are A, C, G or T in either case.
REAL = np.zeros(256, dtype=bool)
REAL[np.frombuffer(b"ACGTacgt", dtype=np.uint8)] = True
#: Lower-case letters (soft-masked bases).
LOWER = np.zeros(256, dtype=bool)
LOWER[ord("a") : ord("z") + 1] = True

#: The code a `Tokenizer.plain_codes` table gives every byte that is not an upper-case A, C, G or T.
NOT_PLAIN = 255


def plain_table(codes: dict[int, int]) -> bytes:
    """A `Tokenizer.plain_codes` table: `codes` of the bytes A, C, G, T; `NOT_PLAIN` for the rest."""
    assert sorted(codes) == sorted(b"ACGT")
    table = bytearray([NOT_PLAIN]) * 256
    for byte, code in codes.items():
        table[byte] = code
    return bytes(table)


#: Bits of a token's flags (`token_flags`).
FLAG_SOFT_MASKED = 1
FLAG_DEGENERATE = 2
#: ``BASE_FLAGS[byte]``: the flags of a token spelling that base alone.
BASE_FLAGS = (LOWER * FLAG_SOFT_MASKED + ~REAL * FLAG_DEGENERATE).astype(np.uint8)


class Spans(NamedTuple):
    """A document's token ids and, for each, the bases ``[starts, ends)`` it spells (int64)."""

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


class Tokens(NamedTuple):
    """The tokens of several documents whose bases lie one after another in one array (`Tokenizer.tokenize`).

    Document d's ids are ``ids[first[d] : first[d] + counts[d]]``. Element j of `ids` spells the bases
    ``[starts[j], starts[j] + width[j])`` of the joined bases; `starts` None: element j starts at base
    j (characters, overlapping k-mers: one element per base, those past a document's last token unused);
    `width` a number: every element spells that many bases.
    """

    ids: np.ndarray
    first: np.ndarray
    counts: np.ndarray
    starts: np.ndarray | None
    width: np.ndarray | int

    def token_starts(self, at: np.ndarray) -> np.ndarray:
        """The first base (in the joined bases) of the elements `at` of `ids`."""
        return at if self.starts is None else self.starts[at]

    def token_ends(self, at: np.ndarray) -> np.ndarray:
        """The base after the last (in the joined bases) of the elements `at` of `ids`."""
        width = self.width if isinstance(self.width, int) else self.width[at]
        return self.token_starts(at) + width


def first_tokens(counts: np.ndarray) -> np.ndarray:
    """Each document's first element of the joined ids (`Tokens.first`), from its token count."""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


class Tokenizer:
    """A model family's tokenizer, run in the loader workers (subclasses set the attributes).

    Attributes:
        name: the option value that names it (``"nt"``, ``"dnabert6"``, a file's path, ...).
        vocab_size: ids are in ``[0, vocab_size)``.
        pad_id: the id that fills a sample after its tokens.
        mask_id: the ``[MASK]`` id masked-LM replaces tokens with (None: the vocabulary has none).
        special_ids: ids never masked nor predicted (pad, cls, sep, bos, eos, unk as the family has them).
        kmer, overlapping: k of a k-mer vocabulary (None otherwise) and whether its k-mers overlap
            (DNABERT: each base is in k tokens).
        prefix, suffix: the special ids the family puts before and after each sample's (each packed
            document's) tokens.
        bases_per_token: bases one token spells on average, for planning (exact where fixed).
        edge_tokens: tokens a document may take beyond ``bases / bases_per_token`` (NT's leftover
            single bases), so planned samples fit.
        alphabet: the upper-case bases the vocabulary spells, in either case (others are refused,
            naming the base).
        plain_codes: a ``bytes.translate`` table of a tokenizer whose element j is the token starting
            at base j (characters, overlapping k-mers; None for others): the code `spell_codes` takes
            for each upper-case A, C, G and T, `NOT_PLAIN` for every other byte. Unpacked rows of
            plain bases are then spelled with one table pass per base, the strand, the check that
            the bases are plain and the codes at once (`batch.tokens`).
    """

    name: str
    vocab_size: int
    pad_id: int
    mask_id: int | None
    special_ids: frozenset[int]
    kmer: int | None = None
    overlapping: bool = False
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    bases_per_token: float = 1.0
    edge_tokens: int = 0
    alphabet: bytes = b"ACGTN"
    plain_codes: bytes | None = None

    def encode(self, bases: np.ndarray) -> np.ndarray:
        """The ids of one document's bases (uint8, any case), without specials."""
        return self.spans(bases).ids

    def spans(self, bases: np.ndarray, where: str = "the data") -> Spans:
        """The ids of one document's bases and the bases each spells; a base the vocabulary cannot
        spell raises a `SourceError` naming it and where it first occurs (`where`: the document)."""
        bases = np.asarray(bases, dtype=np.uint8)
        toks = self.tokenize(bases, np.array([0, len(bases)], dtype=np.int64), [where])
        at = np.arange(int(toks.first[0]), int(toks.first[0] + toks.counts[0]), dtype=np.int64)
        starts = toks.token_starts(at).astype(np.int64)
        return Spans(toks.ids[at].astype(np.int64), starts, toks.token_ends(at).astype(np.int64))

    def tokenize(self, bases: np.ndarray, bounds: np.ndarray, wheres: list[str], plain: bool | None = None) -> Tokens:
        """The tokens of every document of `bases` (uint8, any case; document d is
        ``bases[bounds[d] : bounds[d + 1]]``, named `wheres[d]` in errors), in whole-batch array
        operations: a base the vocabulary cannot spell raises a `SourceError` naming it, its document
        and where in it it first occurs. `plain`: whether every base is upper-case A/C/G/T (`only_plain`;
        None: find out), which every vocabulary spells."""
        plain = only_plain(bases) if plain is None else plain
        if not plain:
            self.check_alphabet(bases, bounds, wheres)
        return self.spell(bases, bounds, plain)

    def spell(self, bases: np.ndarray, bounds: np.ndarray, plain: bool) -> Tokens:
        """`tokenize` of bases the alphabet holds (subclasses)."""
        raise NotImplementedError

    def spell_codes(self, codes: np.ndarray) -> np.ndarray:
        """Element j: the id of the token starting at element j of `codes` (`plain_codes` of plain
        bases, uint8), for the first ``len(codes) - width + 1`` elements (width: the bases one token
        spells); the ids of a document are those of its bases, as `spell` gives them."""
        raise NotImplementedError

    @cached_property
    def plain_codes_rc(self) -> bytes:
        """`plain_codes` of the complement of each byte: the reverse strand's codes, read backwards
        (`NOT_PLAIN` for a byte that is not plain itself, such as U, whose complement is A)."""
        assert self.plain_codes is not None
        plain = self.plain_codes
        return bytes(plain[COMPLEMENT_TABLE[b]] if plain[b] != NOT_PLAIN else NOT_PLAIN for b in range(256))

    def check_alphabet(self, bases: np.ndarray, bounds: np.ndarray, wheres: list[str]) -> None:
        """Refuse the first base outside `alphabet` (either case), naming it and where it is (one
        pass, `byte_lookup.holds_other_than`, decides that all are in it, at memory speed)."""
        spelled = self.alphabet + self.alphabet.lower()
        if not holds_other_than(bases, spelled):
            return
        allowed = np.zeros(256, dtype=bool)
        allowed[np.frombuffer(spelled, dtype=np.uint8)] = True
        at = int(np.argmax(~allowed[bases]))
        doc = int(np.searchsorted(bounds, at, side="right")) - 1
        refuse_base(self.name, int(UPPER[bases[at]]), at - int(bounds[doc]), wheres[doc])

    @cached_property
    def special_table(self) -> np.ndarray:
        """``special_table[id]``: whether the id is one of `special_ids` (one lookup per batch)."""
        table = np.zeros(max(self.vocab_size, max(self.special_ids, default=0) + 1), dtype=bool)
        table[sorted(self.special_ids)] = True
        return table

    @cached_property
    def ordinary_range(self) -> tuple[int, int] | None:
        """``(lo, hi)`` when the ids that are not special are exactly ``lo .. hi - 1`` (every family
        here: specials first, and NT's <eos>, <bos> last), else None."""
        ordinary = np.flatnonzero(~self.special_table[: self.vocab_size])
        if not len(ordinary) or ordinary[-1] - ordinary[0] + 1 != len(ordinary):
            return None
        return int(ordinary[0]), int(ordinary[-1]) + 1

    def ordinary(self, ids: np.ndarray) -> np.ndarray:
        """Where `ids` are not special: two comparisons in the ids' own type when the ordinary ids are
        one range (`ordinary_range`), else a table lookup."""
        span = self.ordinary_range
        if span is None:
            return ~self.special_table[ids]
        lo, hi = span
        out = ids >= lo
        out &= ids < hi
        return out

    @property
    def n_specials(self) -> int:
        """Special tokens around each sample (each packed document)."""
        return len(self.prefix) + len(self.suffix)

    @property
    def id_dtype(self) -> np.dtype:
        """The smallest integer type the vocabulary fits (ids cross from the workers in it)."""
        return id_dtype(self.vocab_size)

    def window_bases(self, room: int) -> int:
        """Bases of a window whose tokens fill `room` tokens (exact for fixed-ratio tokenizers)."""
        return max(1, int(room * self.bases_per_token))

    def pack_units(self, seq_length: int) -> tuple[int, int]:
        """(room of a packed sample, header of each document) in base units: a document of b bases
        charged ``b + header`` units never takes more than its share of `seq_length` tokens when
        the tokenizer keeps its ratio (exact for characters and k-mers without N)."""
        r = self.bases_per_token
        return int(seq_length * r), math.ceil((self.n_specials + self.edge_tokens) * r)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, vocab_size={self.vocab_size})"


def id_dtype(vocab_size: int) -> np.dtype:
    """uint8 up to 256 ids, int16 up to 32,767, else int32."""
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    if vocab_size <= 32767:
        return np.dtype(np.int16)
    return np.dtype(np.int32)


def refuse_base(tokenizer: str, byte: int, at: int, where: str) -> None:
    """The one-line error of a base a vocabulary has no token for."""
    raise SourceError(
        f"tokenizer {tokenizer!r} has no token for base {shown_byte(byte)}, first at base {at} of {where}: "
        "use a tokenizer whose vocabulary spells it (tokenizer='bytes' spells every IUPAC code), or prepare "
        "the data without it"
    )


def only_plain(bases: np.ndarray) -> bool:
    """Whether every base is upper-case A, C, G or T (the usual batch: one pass, `byte_lookup.holds_other_than`)."""
    return not holds_other_than(bases, b"ACGT")


def token_flags(bases: np.ndarray, toks: Tokens) -> np.ndarray | None:
    """Per element of ``toks.ids``: `FLAG_SOFT_MASKED` when any base it spells is lower case,
    `FLAG_DEGENERATE` when any is not A/C/G/T; None when no token has either (the usual batch: one
    pass over its bases decides it)."""
    if only_plain(bases):
        return None
    per_base = BASE_FLAGS[bases]
    if toks.starts is None and isinstance(toks.width, int):  # element j spells bases j .. j + width - 1
        count = len(toks.ids)
        flags = per_base[:count].copy()
        for j in range(1, toks.width):
            flags |= per_base[j : j + count]
        return flags
    at = np.arange(len(toks.ids), dtype=np.int64)
    starts, ends = toks.token_starts(at), toks.token_ends(at)
    flags = np.zeros(len(toks.ids), dtype=np.uint8)
    for bit in (FLAG_SOFT_MASKED, FLAG_DEGENERATE):
        where = (per_base & bit) > 0
        if where.any():
            cum = np.concatenate([[0], np.cumsum(where, dtype=np.int64)])
            flags |= np.where(cum[ends] > cum[starts], bit, 0).astype(np.uint8)
    return flags
