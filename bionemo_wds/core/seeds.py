"""Every random choice of the package, as named streams of one seed.

A stream is a name plus the integers that identify one use of it (epoch, rank, worker, bucket...).
Its numbers are a pure function of (seed, name, parts), stable across processes and Python versions
(blake2b, never `hash`), so a choice never depends on scheduling, and two streams never share
numbers by accident. This module is the only place that turns a seed into random numbers.

The ``longest-first`` split rule keeps the derivation of the first release (`numpy.random.default_rng`
over a fixed entropy list), because the bytes of datasets prepared by it depend on it; the
``seeded`` split draws per sequence identity (`identity_keys`); prepare's window order
is a computed permutation (`permutation_keys`, request key ``window_order``).
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
import zlib
from collections.abc import Sequence

import numpy as np

try:
    from bionemo_wds.core import key_hashes
except ImportError:  # built by `pip install -e .` where a C compiler is found (setup.py: optional)
    key_hashes = None  # type: ignore[assignment]

_M64 = (1 << 64) - 1

#: The load-side streams, by name (the value is mixed into the seed, so renaming one is harmless).
LOAD_STREAMS = ("shard_order", "shuffle", "reverse_complement", "tag_dropout", "masked_lm")


def stream_seed(seed: int, stream: str, *parts: int) -> int:
    """A 64-bit seed for one use of a named stream."""
    h = hashlib.blake2b(stream.encode(), digest_size=8)
    # any integer: taken modulo 2**64 (two's complement for negatives, as a signed pack would give)
    h.update(struct.pack(f"<{len(parts) + 1}Q", *(x & _M64 for x in (seed, *parts))))
    return int.from_bytes(h.digest(), "little")


def python_rng(seed: int, stream: str, *parts: int) -> random.Random:
    """A `random.Random` for one use of a named stream (fast scalar draws in per-window loops)."""
    return random.Random(stream_seed(seed, stream, *parts))


def numpy_rng(seed: int, stream: str, *parts: int) -> np.random.Generator:
    """A numpy Generator for one use of a named stream (whole-array permutations)."""
    return np.random.default_rng(stream_seed(seed, stream, *parts))


def identity_keys(seed: int, stream: str, ids: Sequence[str]) -> np.ndarray:
    """A uint64 per id, a pure function of (seed, stream, id) alone: not of the id's position or
    of the other ids, so reordering the inputs or running with more workers draws the same.
    A 64-bit keyed blake2b of the id's UTF-8 bytes (a 32-bit hash such as crc32 would give equal
    keys to some ids of a million)."""
    salted = hashlib.blake2b(digest_size=8, key=stream_seed(seed, stream).to_bytes(8, "little"))

    def key(identity: str) -> int:
        h = salted.copy()
        h.update(identity.encode())
        return int.from_bytes(h.digest(), "little")

    return np.fromiter(map(key, ids), dtype=np.uint64, count=len(ids))


# --- prepare: the derivations prepared datasets were written with ------------------------------


def split_rng(seed: int, bucket: int) -> np.random.Generator:
    """Tie order of the ``longest-first`` split rule within one length bucket (the rule before
    ``seeded``, kept so datasets made by it are made again the same)."""
    return np.random.default_rng([seed, 0x5E11, bucket])


# --- reverse complement: a per-window coin, computed without any generator state -----------------


def splitmix64(x: int) -> int:
    """SplitMix64's finaliser: a cheap, well-mixing 64-bit bijection."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def flip_salt(seed: int, epoch: int) -> int:
    """The per-(seed, epoch) salt of `salted_flip`; compute once per pass, not per window."""
    return splitmix64(splitmix64(seed & _M64) ^ (epoch & _M64))


def salted_flip(key: str, p: float, salt: int) -> bool:
    """Whether the window `key` is reverse-complemented, given the pass's salt.

    crc32 of the key mixed with the salt through SplitMix64: about a quarter of the cost of a
    keyed blake2b, which matters once per window; the mixing keeps epochs independent.
    """
    return splitmix64(zlib.crc32(key.encode()) ^ salt) < p * 2.0**64


def key_crcs(keys: list[str]) -> np.ndarray:
    """crc32 of each window key, as uint64: the per-window half of `salted_flip`, which a record
    computes once for all its windows (`salted_flips` adds the pass's salt)."""
    return np.fromiter(map(zlib.crc32, map(str.encode, keys)), dtype=np.uint64, count=len(keys))


#: SplitMix64's constants as numpy scalars (its increment, the finaliser's shifts and multipliers).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX_M1, MIX_M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (`splitmix64` without its increment) of every element of a uint64
    array (numpy's uint64 arithmetic wraps modulo 2**64, as the scalar form's masks do): the round
    function of `permutation.SeededPermutation` and the hash of `splitmix64_array`."""
    x = (x ^ (x >> _S30)) * MIX_M1
    x = (x ^ (x >> _S27)) * MIX_M2
    return x ^ (x >> _S31)


def splitmix64_array(x: np.ndarray) -> np.ndarray:
    """`splitmix64` of every element of a uint64 array."""
    return mix64(x + GOLDEN)


def salted_flips(crcs: np.ndarray, p: float, salt: int) -> np.ndarray:
    """`salted_flip` of many windows at once, given their `key_crcs`: the same coins, as a bool array."""
    return coins(splitmix64_array(crcs ^ np.uint64(salt & _M64)), p)


def keyed_hashes(keys: Sequence[str], salt: int | np.ndarray) -> np.ndarray:
    """``splitmix64(crc32(key) ^ salt)`` of each key, as uint64: what `salted_flip` compares with its
    bound, and a masked-LM row's salt. `salt`: one for every key, or one per key (a uint64 array: a
    blend's rows draw by streams of their own). One salt in C where the extension is built
    (`key_hashes.c`: for the two dozen keys of a batch, `key_crcs` and the array operations of
    `splitmix64_array` cost more than the hashing); else those, the same numbers."""
    if isinstance(salt, np.ndarray):
        return splitmix64_array(key_crcs(list(keys)) ^ salt.astype(np.uint64, copy=False))
    if key_hashes is None:
        return splitmix64_array(key_crcs(list(keys)) ^ np.uint64(salt & _M64))
    out = np.empty(len(keys), dtype=np.uint64)
    key_hashes.keyed_hashes(keys, salt & _M64, out)
    return out


def salted_key_flips(keys: Sequence[str], p: float, salt: int | np.ndarray) -> np.ndarray:
    """`salted_flip` of each key with probability `p` in the pass of `salt` (one, or one per key), as
    a bool array."""
    return coins(keyed_hashes(keys, salt), p)


def coins(hashes: np.ndarray, p: float) -> np.ndarray:
    """Which uint64 `hashes` fall below ``p * 2**64``: `salted_flip`'s comparison, for many at once.

    The scalar form compares a Python int with the float ``p * 2**64`` exactly; here the bound is the
    smallest integer not below it (an integer is below a number exactly when it is below that
    number's ceiling), compared in uint64 so no hash is rounded to a float.
    """
    bound = math.ceil(p * 2.0**64)
    if bound <= 0:
        return np.zeros(len(hashes), dtype=bool)
    if bound > _M64:
        return np.ones(len(hashes), dtype=bool)
    return hashes < np.uint64(bound)


def flips(key: str, p: float, seed: int, epoch: int) -> bool:
    """Whether the window `key` is reverse-complemented in `epoch`: a pure function of its inputs."""
    if p <= 0:
        return False
    if p >= 1:
        return True
    return salted_flip(key, p, flip_salt(seed, epoch))


def salted_ints(ids: np.ndarray, bounds: np.ndarray, salt: int) -> np.ndarray:
    """One integer in ``[0, bounds[i])`` for each id (int64 arrays; bounds >= 1), a pure function
    of (id, bound, salt): the per-sequence draws of load-time window offsets."""
    h = splitmix64_array(np.asarray(ids, dtype=np.int64).astype(np.uint64) ^ np.uint64(salt & _M64))
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # 53 uniform bits in [0, 1)
    bounds = np.asarray(bounds, dtype=np.int64)
    return np.minimum((u * bounds).astype(np.int64), bounds - 1)


# --- tag dropout: per-window uniform draws, also without generator state --------------------------


def tag_salt(seed: int, epoch: int) -> int:
    """The per-(seed, epoch) salt of `salted_uniforms` for tag dropout (a stream of its own, so a
    window's dropout draws are independent of its reverse-complement coin)."""
    return stream_seed(seed, "tag_dropout", epoch)


def salted_uniforms(key: str, n: int, salt: int) -> list[float]:
    """`n` uniform numbers in [0, 1) for the window `key`, given the pass's salt: a pure function of
    (key, salt), so a resumed or re-scheduled pass draws the same numbers for the same window."""
    h = splitmix64(zlib.crc32(key.encode()) ^ salt)
    return [splitmix64(h + i) / 2.0**64 for i in range(n)]


def mlm_salt(seed: int, epoch: int) -> int:
    """The per-(seed, epoch) salt of masked-LM draws (`batch.mlm.row_salts`): a stream of its own, so a
    sample's masks are independent of its strand and tag draws."""
    return stream_seed(seed, "masked_lm", epoch)


# --- computed permutations (prepare's window order, the loader's epoch order) ---------------------


def permutation_keys(seed: int, stream: str, rounds: int, *parts: int) -> list[int]:
    """The round keys of `permutation.SeededPermutation` for one use of a named stream."""
    return [stream_seed(seed, stream, *parts, r) for r in range(rounds)]
