"""Unpacked rows of plain bases by characters and overlapping k-mers (`tokens.plain_batch`): the
batch equals each document's ids by its family's rule (written again in `test_tokenizers`) and the
general layout's batch (`tokens.laid_out_batch`) field for field; a base that is not plain (lower
case, N, or a U, refused on either strand though it complements to A), or a document whose tokens
do not fit, leaves the batch to the general path, which flags, spells, refuses or counts it."""

from __future__ import annotations

import numpy as np
import pytest
from test_tokenizers import SAMPLE, char_reference, dnabert_reference

from bionemo_wds.errors import SourceError
from bionemo_wds.load.batch.tokens import TokenDoc, laid_out_batch, plain_batch, tokenized_batch
from bionemo_wds.load.tokenize import resolve_tokenizer

NAMES = ["caduceus", "hyenadna", "dnabert3", "dnabert4", "dnabert5", "dnabert6"]
SEQ_LENGTH = 300


def as_bases(seq: str) -> np.ndarray:
    return np.frombuffer(seq.encode(), dtype=np.uint8)


def strand(seq: str, rc: bool) -> str:
    return seq[::-1].translate(str.maketrans("ACGTacgt", "TGCAtgca")) if rc else seq


def reference(name: str, seq: str) -> list[int]:
    if name.startswith("dnabert"):
        k = int(name[-1])
        return dnabert_reference(seq, k) if len(seq) >= k else [2, 3]
    return char_reference(seq)


def rows_of(name: str) -> list[list[TokenDoc]]:
    """A full row (its tokens fill seq_length exactly), filler, a reverse-strand document in three
    pieces, one shorter than a k-mer, one without bases, and a reverse-strand full row."""
    tok = resolve_tokenizer(name)
    full = tok.window_bases(SEQ_LENGTH - tok.n_specials)
    pieces = (as_bases(SAMPLE[500:560]), as_bases(SAMPLE[560:561]), as_bases(SAMPLE[561:700]))
    return [
        [TokenDoc(as_bases(SAMPLE[:full]), False, "s:0")],
        [],
        [TokenDoc(pieces, True, "s:500")],
        [TokenDoc(as_bases(SAMPLE[900:902]), False, "s:900")],
        [TokenDoc(as_bases(""), True, "s:1000")],
        [TokenDoc(as_bases(SAMPLE[1000 : 1000 + full]), True, "s:1000")],
    ]


def bases_of(doc: TokenDoc) -> str:
    part = doc.bases if isinstance(doc.bases, tuple) else (doc.bases,)
    return strand(b"".join(p.tobytes() for p in part).decode(), doc.rc)


def assert_same_batch(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
        assert np.array_equal(got[key], want[key]), key


@pytest.mark.parametrize("name", NAMES)
def test_plain_rows_equal_each_document_by_its_rule_and_the_general_layout(name, table_pass):
    tok = resolve_tokenizer(name)
    rows = rows_of(name)
    batch = plain_batch(rows, tok, SEQ_LENGTH)
    assert batch is not None  # the rows are plain: this path made them
    for i, row in enumerate(rows):
        want = reference(name, bases_of(row[0])) if row else []
        assert batch["tokens"][i].tolist() == want + [tok.pad_id] * (SEQ_LENGTH - len(want)), (name, i)
    assert len(reference(name, bases_of(rows[0][0]))) == SEQ_LENGTH
    assert batch["lengths"].tolist() == [sum(len(bases_of(d)) for d in row) for row in rows]
    assert_same_batch(batch, laid_out_batch(rows, tok, SEQ_LENGTH, False))
    assert_same_batch(tokenized_batch(rows, tok, SEQ_LENGTH, False), batch)


@pytest.mark.parametrize("name", ["caduceus", "dnabert6"])
@pytest.mark.parametrize("odd", ["lower", "N", "U", "long"])
def test_a_row_that_is_not_plain_or_does_not_fit_takes_the_general_path(name, odd, table_pass):
    tok = resolve_tokenizer(name)
    rows = rows_of(name)
    seq = SAMPLE[1200:1300]
    odds = {"lower": seq[:50] + seq[50:60].lower() + seq[60:], "N": seq[:50] + "N" + seq[51:], "long": SAMPLE}
    seq = odds.get(odd, seq[:50] + "U" + seq[51:])
    rows[3] = [TokenDoc(as_bases(seq), True, "s:1200")]
    assert plain_batch(rows, tok, SEQ_LENGTH) is None
    if odd == "U":  # on the reverse strand too (its complement, A, is spelled): refused, named
        with pytest.raises(SourceError, match=r"no token for base 'U', first at base 50 of sample s:1200"):
            tokenized_batch(rows, tok, SEQ_LENGTH, False)
        return
    assert_same_batch(tokenized_batch(rows, tok, SEQ_LENGTH, False), laid_out_batch(rows, tok, SEQ_LENGTH, False))
