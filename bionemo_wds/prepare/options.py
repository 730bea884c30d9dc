"""`PrepareOptions`: every option of `bionemo-wds prepare`, in one place.

The command line, the YAML config keys and the help text are all derived from this dataclass, so
they cannot drift from what `prepare` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from bionemo_wds.format import DEFAULT_PREFIX

#: Default shard size in token bytes (about 256 MB: 32k windows at 8 kb).
SHARD_TARGET_BYTES = 256 << 20
#: Default record size in token bytes (16 windows at 8 kb; see format/records.py for why blocks).
RECORD_TARGET_BYTES = 128 << 10


@dataclass
class PrepareOptions:
    """Everything that shapes the output (except `workers`, `overwrite`, `progress`, which do not)."""

    seq_length: int = 8192
    stride: int = 7992
    tail: str = "end"
    split: Sequence[float] = (0.8, 0.1, 0.1)
    split_lists: dict[str, str] | None = None  # split name -> file with one sequence name per line
    seed: int = 42
    tags: str = "none"
    on_invalid: str = "error"
    samples_per_shard: int | None = None  # None: about SHARD_TARGET_BYTES per shard
    windows_per_record: int | None = None  # None: about RECORD_TARGET_BYTES per record
    prefix: str = DEFAULT_PREFIX
    compress: str = "none"  # record codec: "none" or "zstd" (format version 2)
    compress_level: int = 17  # zstd level: 17 stores DNA at ~2 bits/base and decompresses fast
    workers: int | None = None
    overwrite: bool = False
    progress: bool = True


