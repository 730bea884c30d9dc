"""`seeds.keyed_hashes` and `seeds.salted_key_flips`: the C extension's hashes (`key_hashes.c`) are the
Python forms' (`zlib.crc32` of the key's UTF-8, then `splitmix64`), for any key and salt, and the coins
are `salted_flip`'s, with and without the extension."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core import seeds

M64 = (1 << 64) - 1


@pytest.fixture(params=["extension", "python"])
def hashing(request, monkeypatch):
    """Run a test with the C extension and with the numpy form."""
    if request.param == "extension" and seeds.key_hashes is None:
        pytest.skip("the C extension is not built")
    if request.param == "python":
        monkeypatch.setattr(seeds, "key_hashes", None)
    return request.param


KEYS = st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80), max_size=40)


@settings(max_examples=80, deadline=None)
@given(keys=KEYS, salt=st.integers(-(1 << 70), 1 << 70))
def test_keyed_hashes_are_splitmix_of_the_crc(keys, salt):
    want = [seeds.splitmix64(zlib.crc32(k.encode()) ^ (salt & M64)) for k in keys]
    for native in (seeds.key_hashes, None):
        original = seeds.key_hashes
        seeds.key_hashes = native
        try:
            got = seeds.keyed_hashes(keys, salt)
        finally:
            seeds.key_hashes = original
        assert got.dtype == np.uint64 and got.tolist() == want


@settings(max_examples=60, deadline=None)
@given(keys=KEYS, salt=st.integers(0, M64), p=st.sampled_from([0.0, 1e-12, 0.3, 0.5, 0.999, 1.0, 1.5]))
def test_key_flips_are_salted_flip_of_each_key(keys, salt, p):
    want = [seeds.salted_flip(k, p, salt) for k in keys]
    assert seeds.salted_key_flips(keys, p, salt).tolist() == want
    assert seeds.salted_flips(seeds.key_crcs(keys), p, salt).tolist() == want


def test_genome_keys_both_ways(hashing):
    """Document keys of the bundled assemblies' style, with and without the extension."""
    keys = [f"NODE_{i}_length_{1000 + i}_cov_0.57:{i * 97}+{5000 - i}" for i in range(500)]
    salt = seeds.flip_salt(1234, 3)
    assert seeds.keyed_hashes(keys, salt).tolist() == [seeds.splitmix64(zlib.crc32(k.encode()) ^ salt) for k in keys]
    flips = seeds.salted_key_flips(keys, 0.5, salt)
    assert 200 < int(flips.sum()) < 300


def test_bad_keys_are_refused():
    if seeds.key_hashes is None:
        pytest.skip("the C extension is not built")
    with pytest.raises(TypeError, match="key 1 is not a str"):
        seeds.keyed_hashes(["a", b"b"], 1)  # type: ignore[list-item]
    with pytest.raises(UnicodeEncodeError):
        seeds.keyed_hashes(["\ud800"], 1)
    with pytest.raises(UnicodeEncodeError):
        "\ud800".encode()  # as str.encode refuses it


@settings(max_examples=40, deadline=None)
@given(keys=KEYS, data=st.data(), p=st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_a_salt_per_key_is_each_key_by_its_own_salt(keys, data, p):
    """A blend's documents draw by streams of their own: one salt per key gives each key's hash and
    coin with its own salt alone."""
    salts = data.draw(st.lists(st.integers(0, M64), min_size=len(keys), max_size=len(keys)))
    by_key = np.array(salts, dtype=np.uint64)
    assert seeds.keyed_hashes(keys, by_key).tolist() == [
        seeds.keyed_hashes([k], s).tolist()[0] for k, s in zip(keys, salts)
    ]
    assert seeds.salted_key_flips(keys, p, by_key).tolist() == [seeds.salted_flip(k, p, s) for k, s in zip(keys, salts)]
