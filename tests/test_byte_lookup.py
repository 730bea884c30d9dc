"""`core.byte_lookup`: the byte-table passes (reverse complement, codes, the A/C/G/T check) by the C
extension give what `bytes.translate` gives, for any bytes and table, and the fallback without the
extension is the same function."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bionemo_wds.core import byte_lookup
from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE
from bionemo_wds.load.batch.labels import NOT_DEGENERATE

built = pytest.mark.skipif(byte_lookup.byte_tables is None, reason="the byte_tables extension is not built")

tables = st.binary(min_size=256, max_size=256)
matrices = st.tuples(st.integers(0, 6), st.integers(0, 40)).flatmap(
    lambda shape: st.binary(min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]).map(
        lambda raw: np.frombuffer(raw, dtype=np.uint8).reshape(shape).copy()
    )
)


def random_bytes(length: int, seed: int, letters: bool) -> tuple[bytes, bytes]:
    """`length` random bytes (letters only: 0x40-0x7F, the rows the vector blocks look up) and a random
    table (hypothesis' own binaries are mostly shorter than one 32-byte block)."""
    rng = np.random.default_rng(seed)
    low = 0x40 if letters else 0
    raw = rng.integers(low, low + (0x40 if letters else 256), size=length, dtype=np.uint8).tobytes()
    return raw, rng.integers(0, 256, size=256, dtype=np.uint8).tobytes()


def expected(matrix: np.ndarray, table: bytes) -> np.ndarray:
    return np.frombuffer(matrix.tobytes().translate(table), dtype=np.uint8).reshape(matrix.shape)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(matrix=matrices, table=tables, data=st.data())
def test_in_place_and_rows_equal_bytes_translate(table_pass, matrix, table, data):
    whole = matrix.copy()
    byte_lookup.translate_in_place(whole, table)
    assert np.array_equal(whole, expected(matrix, table))
    rows = data.draw(st.lists(st.integers(0, max(len(matrix) - 1, 0)), unique=True) if len(matrix) else st.just([]))
    some = matrix.copy()
    byte_lookup.translate_rows(some, sorted(rows), table)
    want = matrix.copy()
    want[sorted(rows)] = expected(matrix[sorted(rows)], table)
    assert np.array_equal(some, want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(matrix=matrices, kept=st.binary(max_size=40))
def test_holds_other_than_is_what_deleting_the_kept_bytes_leaves(table_pass, matrix, kept):
    assert byte_lookup.holds_other_than(matrix, kept) is (len(matrix.tobytes().translate(None, kept)) > 0)


def test_a_real_genome_batch_complements_and_holds_only_real_bases(table_pass, lambda_seq):
    bases = np.frombuffer(lambda_seq[:4096].upper().encode(), dtype=np.uint8).reshape(4, 1024).copy()
    assert not byte_lookup.holds_other_than(bases, NOT_DEGENERATE)
    flipped = bases.copy()
    byte_lookup.translate_rows(flipped, [1, 3], COMPLEMENT_TABLE)
    assert flipped[1].tobytes() == bases[1].tobytes().translate(bytes.maketrans(b"ACGT", b"TGCA"))
    assert np.array_equal(flipped[[0, 2]], bases[[0, 2]])
    bases[2, 7] = ord("N")
    assert byte_lookup.holds_other_than(bases, NOT_DEGENERATE)


def test_a_strided_view_takes_the_translate_path_and_is_still_right(table_pass):
    matrix = np.arange(64, dtype=np.uint8).reshape(8, 8)
    view = matrix[:, ::2]  # not contiguous: never handed to the extension
    byte_lookup.translate_in_place(view, COMPLEMENT_TABLE)
    assert np.array_equal(view, expected(np.arange(64, dtype=np.uint8).reshape(8, 8)[:, ::2], COMPLEMENT_TABLE))
    assert np.array_equal(matrix[:, 1::2], np.arange(64, dtype=np.uint8).reshape(8, 8)[:, 1::2])


@built
def test_a_table_of_the_wrong_size_or_too_many_kept_bytes_are_refused():
    with pytest.raises(ValueError, match="256 bytes, this one 255"):
        byte_lookup.byte_tables.apply(np.zeros(4, np.uint8), bytes(255))
    with pytest.raises(ValueError, match="at most 32 kept bytes, not 33"):
        byte_lookup.byte_tables.any_outside(np.zeros(4, np.uint8), bytes(range(33)))
    many = bytes(range(40))  # more than the extension compares with: bytes.translate decides
    assert not byte_lookup.holds_other_than(np.arange(40, dtype=np.uint8), many)
    assert byte_lookup.holds_other_than(np.arange(41, dtype=np.uint8), many)


def split(raw: bytes, seed: int) -> list[np.ndarray]:
    """`raw` as up to four pieces (cut where the seed says), as a window cut at load spans pieces."""
    rng = np.random.default_rng(seed + 1)
    cuts = sorted(rng.integers(0, len(raw) + 1, size=int(rng.integers(0, 4))).tolist())
    return [np.frombuffer(raw[a:b], dtype=np.uint8) for a, b in zip([0, *cuts], [*cuts, len(raw)])]


@built
@settings(max_examples=80, deadline=None)
@given(length=st.integers(0, 200), seed=st.integers(0, 2**32 - 1), letters=st.booleans(), spare=st.integers(0, 3))
def test_pieces_backward_are_the_table_of_the_reversed_bytes(length, seed, letters, spare):
    """Every byte through any table, written backwards (the last piece first): letters only (the 32-byte
    vector blocks of the complement table's letter rows) or any byte (blocks done byte by byte), at
    every length around a block; the bytes after them untouched."""
    raw, table = random_bytes(length, seed, letters)
    out = np.full(len(raw) + spare, 7, dtype=np.uint8)
    assert byte_lookup.pieces_into(out, split(raw, seed), table, backward=True)
    assert out[: len(raw)].tobytes() == raw[::-1].translate(table)
    assert (out[len(raw) :] == 7).all()


@built
def test_pieces_into_refuses_an_output_too_short():
    with pytest.raises(ValueError, match="5 bytes do not fit in 4"):
        byte_lookup.pieces_into(np.zeros(4, np.uint8), [np.zeros(5, np.uint8)], COMPLEMENT_TABLE, backward=True)
    with pytest.raises(ValueError, match="256 bytes, this one 3"):
        byte_lookup.pieces_into(np.zeros(4, np.uint8), [np.zeros(2, np.uint8)], b"abc", backward=True)


def test_without_the_extension_nothing_is_written_and_the_caller_is_told(monkeypatch):
    monkeypatch.setattr(byte_lookup, "byte_tables", None)
    out = np.zeros(4, np.uint8)
    assert not byte_lookup.pieces_into(out, [np.ones(4, np.uint8)], COMPLEMENT_TABLE, backward=True)
    assert not out.any()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(length=st.integers(0, 200), seed=st.integers(0, 2**32 - 1), letters=st.booleans())
def test_translate_bytes_and_pieces_forward_are_the_table_of_each_byte(table_pass, length, seed, letters):
    """Forwards through any table: letters only (the vector blocks) or any byte, at every length
    around a block; `pieces_into` writes only where the extension is built, and says so."""
    raw, table = random_bytes(length, seed, letters)
    array = np.frombuffer(raw, dtype=np.uint8)
    assert byte_lookup.translate_bytes(array, table).tobytes() == raw.translate(table)
    out = np.full(len(raw) + 2, 7, dtype=np.uint8)
    if byte_lookup.pieces_into(out, split(raw, seed), table, backward=False):
        assert out[: len(raw)].tobytes() == raw.translate(table) and (out[len(raw) :] == 7).all()
    else:
        assert table_pass == "translate" and (out == 7).all()
