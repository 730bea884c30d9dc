"""`records.unpack_record`: a record's map as msgpack gives it, its uncompressed bases a view of the
record bytes (not a copy), any other record unpacked by msgpack whole; a bin header that claims more
bytes than follow it is refused."""

from __future__ import annotations

from itertools import pairwise

import msgpack
import numpy as np
import pytest
from conftest import LAMBDA, read_fasta
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.format.records import decode_columns, decode_record, encode_record, unpack_record
from bionemo_wds.load.rows import BlockRows

#: Lengths on both sides of msgpack's bin8 / bin16 / bin32 headers.
EDGES = [0, 1, 255, 256, 65535, 65536, 70000]


def lambda_bases(total: int, parts: int) -> list[bytes]:
    """`total` bases of the lambda phage genome, cut into `parts` windows."""
    text = next(iter(read_fasta(LAMBDA).values())).encode()
    bases = (text * (total // len(text) + 1))[:total]
    cuts = np.linspace(0, total, parts + 1).astype(int).tolist()
    return [bases[a:b] for a, b in pairwise(cuts)]


def record_of(bases: list[bytes], codec: str = "none") -> bytes:
    n = len(bases)
    return encode_record(bases, [f"s{i}" for i in range(n)], list(range(n)), [0] * n, ["t"] * n, codec=codec)


@settings(max_examples=40, deadline=None)
@given(total=st.sampled_from(EDGES) | st.integers(0, 70000), parts=st.integers(1, 5))
def test_an_uncompressed_record_is_msgpack_s_map_with_its_bases_a_view(total, parts):
    data = record_of(lambda_bases(total, parts))
    got, want = unpack_record(data), msgpack.unpackb(data, raw=False)
    assert isinstance(got["tokens"], memoryview) and got["tokens"].obj is data  # no copy of the bases
    assert bytes(got["tokens"]) == want["tokens"]
    assert {k: v for k, v in got.items() if k != "tokens"} == {k: v for k, v in want.items() if k != "tokens"}
    block = decode_record(data)
    assert block.tokens.tobytes() == b"".join(lambda_bases(total, parts))


@pytest.mark.parametrize("total", [0, 300, 70000])
def test_other_records_are_unpacked_whole(total):
    """zstd records, and a map another writer ordered otherwise, are msgpack's own result."""
    pytest.importorskip("zstandard")
    bases = lambda_bases(total, 2)
    compressed = record_of(bases, "zstd")
    assert unpack_record(compressed) == msgpack.unpackb(compressed, raw=False)
    assert decode_record(compressed).tokens.tobytes() == b"".join(bases)
    plain = msgpack.unpackb(record_of(bases), raw=False)
    moved = msgpack.packb({"lengths": plain.pop("lengths"), **plain}, use_bin_type=True)
    assert unpack_record(moved) == msgpack.unpackb(moved, raw=False)
    assert decode_record(moved).tokens.tobytes() == b"".join(bases)


def test_bases_cut_short_are_refused():
    data = record_of(lambda_bases(1000, 2))
    with pytest.raises(ValueError, match="record tokens claim 1000 bytes but 9 follow their header"):
        unpack_record(data[:20])
    with pytest.raises(ValueError):
        decode_record(data[:-3])  # the columns after the bases cut: msgpack's own error


def test_columns_give_the_rows_the_arrays_give():
    """The loader's rows from the record's lists (`decode_columns`) are those from its int64 arrays."""
    data = record_of(lambda_bases(20000, 5))
    by_lists, by_arrays = BlockRows(decode_columns(data)), BlockRows(decode_record(data))
    for name in ("offsets", "seq_id", "start", "window", "tag"):
        assert getattr(by_lists, name) == getattr(by_arrays, name), name
    assert by_lists.keys == by_arrays.keys
    assert [by_lists.bases(r).tobytes() for r in range(5)] == lambda_bases(20000, 5)


def test_columns_that_disagree_are_refused():
    plain = msgpack.unpackb(record_of(lambda_bases(100, 2)), raw=False)
    for change, message in (
        ({"lengths": [60, 40, 0]}, "columns have different lengths"),
        ({"lengths": [120, -20]}, r"a negative one \(-20\)"),
        ({"lengths": [50, 40]}, "add up to 90 bases but it holds 100"),
    ):
        with pytest.raises(ValueError, match=message):
            decode_columns(msgpack.packb({**plain, **change}, use_bin_type=True))
