"""The exact BPE encoder in C (``bpe_native.c``) for Hugging Face BPE files whose tokens spell exactly
their own strings (DNABERT-2's style: `hf_file.spelled_lengths`), each document one word.

Why not the library: its BPE model runs at 2-4 Mbp per core-second on such words (docs/benchmarks.md),
which bounds a BPE file's loading far below the bytes path. The C encoder replays the library's own
merge loop (``Word::merge_all``: pairs popped by (rank, position), expired ones skipped by their new
id), so its ids are the library's, not a look-alike's. It runs only where it is exact, and the library
otherwise (`ExactBpe.of` says why not; `ExactBpe.encode` returns None for a batch holding a byte with
no one-character token, which the library turns into the unknown token or byte tokens):

- the model is a BPE without dropout and without ``ignore_merges``, and the tokenizer neither
  truncates nor pads (both change what ``encode_batch_fast`` returns);
- no added token could occur in a text we encode (its characters all have one-character tokens):
  the library would split the text there first. ``[CLS]`` and the like cannot, having brackets.

The merge table is built in C once per process (lazily: the object pickles its merges, not the table),
so forked and spawned loader workers both have it.
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from typing import Any

import numpy as np

try:
    from bionemo_wds.load.tokenize import bpe_native
except ImportError:  # built by `pip install -e .` where a C compiler is found (setup.py: optional)
    bpe_native = None  # type: ignore[assignment]


@cache
def warn_missing() -> None:
    """Say once per process that BPE files run on the slow library path, and how to get the fast one."""
    warnings.warn(
        "bionemo_wds.load.tokenize.bpe_native (the C extension that encodes DNABERT-2-style BPE tokenizer "
        "files several times faster than the tokenizers library, with the same ids) is not built: BPE files "
        "are encoded by the library. Install a C compiler and reinstall (pip install -e .), or run `python setup.py "
        "build_ext --inplace` in the checkout.",
        RuntimeWarning,
        stacklevel=3,
    )


class ExactBpe:
    """A BPE model's merge table for `bpe_native` (module docstring): `encode` gives the library's ids."""

    def __init__(self, char_ids: np.ndarray, lefts: np.ndarray, rights: np.ndarray, new_ids: np.ndarray):
        #: ``char_ids[byte]``: the id of the one-character token of an ASCII byte; -1 for none.
        self.char_ids = np.ascontiguousarray(char_ids, dtype=np.int64)
        #: Each merge in rank order: the ids of its left and right tokens and of the token they make.
        self.lefts = np.ascontiguousarray(lefts, dtype=np.int64)
        self.rights = np.ascontiguousarray(rights, dtype=np.int64)
        self.new_ids = np.ascontiguousarray(new_ids, dtype=np.int64)
        self.table: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "table": None}  # the C table is rebuilt in each process that encodes

    @classmethod
    def of(cls, tok: Any) -> tuple[ExactBpe | None, str]:
        """The encoder of `tok` (a `tokenizers.Tokenizer` whose tokens spell their own strings), or
        None and why the library must run instead."""
        if tok.truncation or tok.padding:
            return None, "it truncates or pads"
        state = json.loads(tok.to_str())
        model = state["model"]
        if model.get("type") != "BPE":
            return None, "its model is not a BPE"
        if model.get("dropout") not in (None, 0.0):
            return None, "its BPE has dropout"
        if model.get("ignore_merges"):
            return None, "its BPE has ignore_merges"
        vocab: dict[str, int] = tok.get_vocab(with_added_tokens=False)  # the model's, as merges see it
        if len(set(vocab.values())) != len(vocab):  # the C encoder's expired entries rest on one string an id
            return None, "its vocabulary gives two strings one id"
        char_ids = np.full(256, -1, dtype=np.int64)
        for byte in range(128):
            char_ids[byte] = vocab.get(chr(byte), -1)
        for added in state.get("added_tokens") or []:
            content = added["content"]
            if not content or all(ord(c) < 128 and char_ids[ord(c)] >= 0 for c in content):
                return None, f"its added token {content!r} could occur in the bases"
        merges = model["merges"]
        if merges and isinstance(merges[0], str):  # the older "left right" lines
            merges = [line.split(" ") for line in merges if not line.startswith("#version")]
        lefts = np.array([vocab[a] for a, _ in merges], dtype=np.int64)
        rights = np.array([vocab[b] for _, b in merges], dtype=np.int64)
        new_ids = np.array([vocab[a + b] for a, b in merges], dtype=np.int64)
        return cls(char_ids, lefts, rights, new_ids), ""

    def encode(self, upper: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """Every document ``upper[bounds[d]:bounds[d + 1]]`` (upper-case bases, uint8) as one word:
        ``(ids, starts, widths, counts)``, int64, each token's id, first base (in `upper`) and bases,
        `counts` per document; None when a byte has no one-character token (run the library)."""
        if self.table is None:
            self.table = bpe_native.build(self.char_ids, self.lefts, self.rights, self.new_ids)
        text = np.ascontiguousarray(upper, dtype=np.uint8)
        edges = np.ascontiguousarray(bounds, dtype=np.int64)
        ids, starts, widths = (np.empty(len(text), dtype=np.int64) for _ in range(3))
        counts = np.empty(max(0, len(edges) - 1), dtype=np.int64)
        total = bpe_native.encode(self.table, text, edges, ids, starts, widths, counts)
        if total < 0:
            return None
        return ids[:total], starts[:total], widths[:total], counts


def exact_bpe(tok: Any) -> ExactBpe | None:
    """`ExactBpe.of` where the extension is built; None (and one warning per process) where it is not."""
    encoder, _ = ExactBpe.of(tok)
    if encoder is not None and bpe_native is None:
        warn_missing()
        return None
    return encoder
