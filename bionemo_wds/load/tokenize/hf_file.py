"""Any Hugging Face tokenizer (a ``tokenizer.json`` path, a `tokenizers.Tokenizer` or a
`PreTrainedTokenizerFast`): the BPE vocabularies of DNABERT-2, GENA-LM and GROVER.

Ids come from the Rust `tokenizers` library in the loader workers, one call for a batch's documents
(``encode_batch``, no Python per base or token): each document's bases as an upper-case string,
without special tokens; the offsets it returns are the bases each token spells. A BPE whose tokens
spell exactly their own strings (no normalizer, pre-tokenizer or sub-word affixes, as DNABERT-2's)
is encoded without offsets (``encode_batch_fast``) and the bases summed from its tokens' lengths,
checked against each document's length; where that BPE's merges can be replayed exactly in C
(`exact_bpe`), the library is not called at all. How the family frames a sample is read from the tokenizer's own
post-processor: the specials ``encode("A", add_special_tokens=True)`` puts before and after the base
(DNABERT-2: ``[CLS]`` .. ``[SEP]``). A base the vocabulary cannot spell (it becomes the unknown token,
or, without one, the library drops it) is refused, naming it.

`bases_per_token` is measured once, on 64 kb of seeded uniform A/C/G/T: genomes compress better under
a BPE trained on genomes, so windows planned by it rarely hold more tokens than fit; a window that
does has its last tokens left out, and the batch counts the bases they spell (``left_out``).
"""

from __future__ import annotations

import itertools
import os
import warnings
from typing import Any

import numpy as np

from bionemo_wds.errors import OptionError
from bionemo_wds.load.tokenize.base import UPPER, Tokenizer, Tokens, first_tokens, refuse_base
from bionemo_wds.load.tokenize.exact_bpe import ExactBpe, exact_bpe

#: Bases the planning ratio is measured on, and the seed they are drawn with.
PROBE_BASES = 1 << 16
PROBE_SEED = 0
#: Names of the pad and mask tokens in the vocabularies we know (BERT's and RoBERTa's styles).
PAD_NAMES = ("[PAD]", "<pad>")
MASK_NAMES = ("[MASK]", "<mask>")
UNK_NAMES = ("[UNK]", "<unk>")


def load_tokenizer(spec: Any) -> Any:
    """A `tokenizers.Tokenizer` from a path to a tokenizer.json (or a directory holding one), a
    `tokenizers.Tokenizer`, or a `transformers` fast tokenizer; an `OptionError` otherwise."""
    from tokenizers import Tokenizer as RustTokenizer

    if isinstance(spec, RustTokenizer):
        return spec
    backend = getattr(spec, "backend_tokenizer", None)
    if isinstance(backend, RustTokenizer):
        return backend
    if not isinstance(spec, (str, os.PathLike)):
        raise OptionError(
            f"tokenizer must be a name, a path to a tokenizer.json, a tokenizers.Tokenizer or a "
            f"PreTrainedTokenizerFast, got {type(spec).__name__}"
        )
    path = os.fspath(spec)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise OptionError(f"tokenizer file {path} does not exist")
    try:
        return RustTokenizer.from_file(path)
    except Exception as err:  # the library raises a bare Exception for a file it cannot parse
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise OptionError(f"{path} is not a Hugging Face tokenizer file ({first})") from None


class HfTokenizer(Tokenizer):
    """A Hugging Face tokenizer run by the Rust library (module docstring)."""

    def __init__(self, spec: Any, name: str | None = None):
        tok = load_tokenizer(spec)
        self.tok = tok
        self.name = name or (os.fspath(spec) if isinstance(spec, (str, os.PathLike)) else "hf-tokenizer")
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        specials = {i for i, added in tok.get_added_tokens_decoder().items() if added.special}
        self.unk_id = first_id(tok, UNK_NAMES)
        pad = tok.padding["pad_id"] if tok.padding else first_id(tok, PAD_NAMES)
        if pad is None:
            raise OptionError(f"tokenizer {self.name} has no padding token ([PAD] or <pad>): samples cannot be padded")
        self.pad_id, self.mask_id = int(pad), first_id(tok, MASK_NAMES)
        self.special_ids = frozenset(specials | {self.pad_id} | ({self.unk_id} if self.unk_id is not None else set()))
        self.prefix, self.suffix = framing(tok)
        self.alphabet = b""
        probe = np.random.default_rng(PROBE_SEED).choice(np.frombuffer(b"ACGT", np.uint8), PROBE_BASES)
        # `encode`, not `encode_batch`: a batch call here would start the library's thread pool, which
        # it then turns off (with a warning) in every loader worker forked after it
        probe_ids = tok.encode(probe.tobytes().decode("ascii"), add_special_tokens=False).ids
        self.bases_per_token = PROBE_BASES / max(1, len(probe_ids))
        self.spelled = spelled_lengths(tok, self.vocab_size)
        self.exact = checked_exact(tok, self.name, probe, probe_ids) if self.spelled is not None else None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["tok"] = self.tok.to_str()  # the Rust object travels to spawned workers as its JSON
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        state = dict(state)
        state["tok"] = RustTokenizer.from_str(state["tok"])
        self.__dict__.update(state)

    def tokenize(self, bases: np.ndarray, bounds: np.ndarray, wheres: list[str], plain: bool | None = None) -> Tokens:
        """Every document's tokens in one call: into the exact C encoder where it takes this file and
        batch (`exact_bpe`: the library's ids, and each token's bases from its merges), else into the
        library (``encode_batch`` of the upper-case documents); then a base no token spells, or
        spelled by the unknown token, is refused."""
        upper_bases = UPPER[bases]
        if self.exact is not None:
            found = self.exact.encode(upper_bases, bounds)
            if found is not None and not (self.unk_id is not None and (found[0] == self.unk_id).any()):
                ids, starts, widths, counts = found
                return Tokens(ids, first_tokens(counts), counts, starts, widths)
        upper = upper_bases.tobytes().decode("ascii")
        edges = bounds.tolist()
        texts = [upper[s:e] for s, e in itertools.pairwise(edges)]
        if self.spelled is not None and hasattr(self.tok, "encode_batch_fast"):
            toks = self.tokenize_fast(texts, bounds)
            if toks is not None:
                return toks
        encodings = self.tok.encode_batch(texts, add_special_tokens=False)
        counts = np.array([len(enc.ids) for enc in encodings], dtype=np.int64)
        empty = [np.empty(0, dtype=np.int64)]  # the lists to arrays in C, one call per document
        ids = np.concatenate([np.asarray(enc.ids, dtype=np.int64) for enc in encodings] or empty)
        pairs = [np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2) for enc in encodings]
        offsets = np.concatenate(pairs or [empty[0].reshape(0, 2)])
        first = first_tokens(counts)
        shift = np.repeat(bounds[:-1], counts)  # offsets are within each document
        toks = Tokens(ids, first, counts, offsets[:, 0] + shift, offsets[:, 1] - offsets[:, 0])
        self.check_spelled(bases, bounds, toks, wheres)
        return toks

    def tokenize_fast(self, texts: list[str], bounds: np.ndarray) -> Tokens | None:
        """`tokenize` by ``encode_batch_fast`` (the library leaves offsets out), for a BPE whose
        tokens spell exactly their own strings (`spelled_lengths`): each token's bases are the running
        sum of their lengths. None when a document's tokens do not spell exactly its bases or one is
        unknown: then `tokenize` encodes again with offsets, to name the base."""
        assert self.spelled is not None
        encodings = self.tok.encode_batch_fast(texts, add_special_tokens=False)
        counts = np.array([len(enc.ids) for enc in encodings], dtype=np.int64)
        ids = np.concatenate([np.asarray(enc.ids, dtype=np.int64) for enc in encodings] or [np.empty(0, np.int64)])
        width = self.spelled[ids]
        ends = np.cumsum(width)
        first = first_tokens(counts)
        last = first + counts - 1
        spelled = np.where(counts > 0, ends[np.maximum(last, 0)] if len(ids) else 0, 0)
        spelled = np.maximum.accumulate(spelled) if len(spelled) else spelled
        if not np.array_equal(spelled, bounds[1:] - bounds[0]) or (
            self.unk_id is not None and (ids == self.unk_id).any()
        ):
            return None
        return Tokens(ids, first, counts, ends - width, width)

    def spell(self, bases: np.ndarray, bounds: np.ndarray, plain: bool) -> Tokens:
        return self.tokenize(bases, bounds, ["the data"] * (len(bounds) - 1), plain)

    def check_spelled(self, bases: np.ndarray, bounds: np.ndarray, toks: Tokens, wheres: list[str]) -> None:
        """Every base is spelled by a token that is not the unknown token: else refuse the first one.
        The usual batch is decided in a few whole-batch comparisons (its tokens follow one another
        from its first base to its last, none unknown)."""
        at = np.arange(len(toks.ids), dtype=np.int64)
        starts, ends = toks.token_starts(at), toks.token_ends(at)
        if len(at):
            chained = starts[0] == 0 and ends[-1] == len(bases) and bool((starts[1:] == ends[:-1]).all())
        else:
            chained = not len(bases)
        unknown = self.unk_id is not None and bool((toks.ids == self.unk_id).any())
        if chained and not unknown:
            return
        missing = np.ones(len(bases), dtype=bool)  # the first base no known token spells, for the message
        known = toks.ids != self.unk_id if self.unk_id is not None else np.ones(len(toks.ids), dtype=bool)
        for s, e in zip(starts[known].tolist(), ends[known].tolist()):
            missing[s:e] = False
        first = int(np.argmax(missing))
        doc = int(np.searchsorted(bounds, first, side="right")) - 1
        refuse_base(self.name, int(UPPER[bases[first]]), first - int(bounds[doc]), wheres[doc])


def checked_exact(tok: Any, name: str, probe: np.ndarray, probe_ids: list[int]) -> ExactBpe | None:
    """`exact_bpe` of `tok`, if its ids on the planning probe equal the library's `probe_ids` (a
    guard: they always have; a difference is warned about and leaves the library in charge)."""
    exact = exact_bpe(tok)
    if exact is None:
        return None
    found = exact.encode(probe, np.array([0, len(probe)], dtype=np.int64))
    if found is None or found[0].tolist() != probe_ids:
        warnings.warn(
            f"tokenizer {name}: the built-in BPE encoder disagrees with the library on a probe; the library encodes",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return exact


def spelled_lengths(tok: Any, vocab_size: int) -> np.ndarray | None:
    """``lengths[id]``: the bases token `id` spells, for a BPE model with neither normalizer nor
    pre-tokenizer nor sub-word affixes (then a token spells exactly its own string: DNABERT-2's style);
    None for any other tokenizer (its offsets come from the library)."""
    from tokenizers import models

    model = tok.model
    if tok.normalizer is not None or tok.pre_tokenizer is not None or not isinstance(model, models.BPE):
        return None
    if model.continuing_subword_prefix or model.end_of_word_suffix:
        return None
    lengths = np.zeros(vocab_size, dtype=np.int64)
    for token, i in tok.get_vocab(with_added_tokens=True).items():
        if i < vocab_size:
            lengths[i] = len(token)
    return lengths


def first_id(tok: Any, names: tuple[str, ...]) -> int | None:
    """The id of the first of `names` the vocabulary has."""
    for name in names:
        found = tok.token_to_id(name)
        if found is not None:
            return int(found)
    return None


def framing(tok: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The special ids the tokenizer's post-processor puts before and after a sequence."""
    enc = tok.encode("A", add_special_tokens=True)
    special = enc.special_tokens_mask
    inner = [i for i, s in enumerate(special) if not s]
    if not inner:
        return (), ()
    first, last = inner[0], inner[-1]
    return tuple(enc.ids[:first]), tuple(enc.ids[last + 1 :])
