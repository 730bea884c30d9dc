"""Types of the C extension key_hashes.c (`seeds.keyed_hashes`)."""

from typing import Any

def keyed_hashes(keys: Any, salt: int, out: Any, /) -> None:
    """splitmix64(crc32(key) ^ salt) of each key (a sequence of str), written into `out` (uint64, one a key)."""
