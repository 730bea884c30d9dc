"""Records: a block of windows as the bytes of one tar member (format versions 1, 2 and 3).

Format version 1. A shard is a plain (USTAR) tar file written by webdataset's `TarWriter`. Each tar
member ``<key>.msgpack`` is a *record*: a block of up to ``windows_per_record`` windows, stored
column-wise as a msgpack map:

    tokens   bin     the windows' bases back to back, uint8 byte-level ids, no specials
    lengths  [int]   bases per window (slices `tokens`)
    seq_id   [str]   sequence each window comes from
    start    [int]   0-based offset of the window in its sequence
    window   [int]   window number within its sequence
    tag      [str]   control-tag text per window ("" when none)

Why blocks and not one member per window: a tar member costs a 512-byte header plus padding to
512 bytes, about 9% of an 8 kb window, so one-member-per-window shards need about 1.15 bytes per
input base at the default stride, and the loader pays tar parsing per window. A block of 16
windows brings the overhead under 1% and parsing cost per window down 16x. ``--windows-per-record
1`` gives exactly one member per window. Nothing is pickled: shards load with ``WDS_SECURE=1``.

Records are named ``<shard:06d>-<record:06d>`` (`record_key`). Each window's key is
``<seq_id>/<window>``; it leads back to the FASTA substring
``seq_id[start:start + length]``.

Version 2 (``--compress zstd``) adds ``codec: "zstd"`` to each record and stores ``tokens`` as one
zstd frame; everything else is as in version 1.

Version 3 leaves records and shards byte for byte as in versions 1 and 2 (either codec; the
manifest's ``params.codec`` says which) and adds a record index per shard to the manifest: each
record's data offset in the tar, its size, window count and ``zlib.crc32`` of these bytes (see
`format.record_index`), so a reader can fetch one record without reading what precedes it and check
every record it decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from bionemo_wds.errors import OptionError

#: Tar member suffix of a record.
RECORD_SUFFIX = "msgpack"
#: Record codecs: "none" (format version 1, or 3 with ``params.codec`` "none") or "zstd" (2, or 3 with "zstd").
CODECS = ("none", "zstd")


@dataclass
class WindowBlock:
    """Decoded record: windows as one uint8 buffer plus per-window columns."""

    tokens: np.ndarray  # uint8, all windows back to back (a view on the record bytes)
    lengths: np.ndarray  # int64
    seq_id: list[str]
    start: np.ndarray  # int64
    window: np.ndarray  # int64
    tag: list[str]

    def __len__(self) -> int:
        return len(self.seq_id)

    @property
    def offsets(self) -> np.ndarray:
        """Start of each window in `tokens` (length n + 1)."""
        return np.concatenate([[0], np.cumsum(self.lengths)])

    def bases(self, i: int) -> np.ndarray:
        """Bases of window `i` (a view, no copy)."""
        off = self.offsets
        return self.tokens[off[i] : off[i + 1]]


def record_key(shard: int, record: int) -> str:
    """The key of record `record` of shard `shard` (``<shard:06d>-<record:06d>``): its tar member is
    ``<key>.msgpack``. Defined here once: the writer names records by it, the loader names them by it
    in its errors and finds them by it."""
    return f"{shard:06d}-{record:06d}"


def window_key(seq_id: str, window: int) -> str:
    """Identity of a window across the whole dataset."""
    return f"{seq_id}/{window}"


_ZSTD: dict[str, Any] = {}


def _zstd():
    try:
        import zstandard
    except ImportError as exc:  # optional dependency
        raise ImportError("zstd records need the zstandard package: pip install 'bionemo-wds[zstd]'") from exc
    return zstandard


def _compressor(level: int):
    key = f"c{level}"
    if key not in _ZSTD:
        _ZSTD[key] = _zstd().ZstdCompressor(level=level)
    return _ZSTD[key]


def _decompressor():
    if "d" not in _ZSTD:
        _ZSTD["d"] = _zstd().ZstdDecompressor()
    return _ZSTD["d"]


def encode_record(
    bases: list[bytes],
    seq_ids: list[str],
    starts: list[int],
    windows: list[int],
    tags: list[str],
    codec: str = "none",
    level: int = 17,
) -> bytes:
    """Pack a block of windows into record bytes (deterministic for equal input)."""
    tokens = b"".join(bases)
    record: dict[str, Any] = {}
    if codec == "zstd":
        record["codec"] = "zstd"
        tokens = _compressor(level).compress(tokens)
    elif codec != "none":
        raise OptionError(f"unknown codec {codec!r}; use one of {CODECS}")
    record.update(
        tokens=tokens, lengths=[len(b) for b in bases], seq_id=seq_ids, start=starts, window=windows, tag=tags
    )
    return msgpack.packb(record, use_bin_type=True)


#: How a record without a codec begins (`encode_record`: a map of six, ``tokens`` first), and the bin
#: headers its tokens can have: (marker, bytes of length after it).
_PLAIN_HEAD = b"\x86\xa6tokens"
_BIN_HEADS = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def unpack_record(data: bytes | memoryview) -> dict[str, Any]:
    """A record's msgpack map, its ``tokens`` a zero-copy memoryview of `data` where the record is
    uncompressed as `encode_record` writes it (``tokens`` first). msgpack copies every bin it unpacks,
    which for the bases is a second copy of each record read (measured: docs/benchmarks.md); so the
    bases are found by their bin header here and only the small columns after them go to msgpack.
    Any other record (zstd, another writer's key order) is unpacked by msgpack as a whole."""
    view = memoryview(data)
    head = len(_PLAIN_HEAD)
    size_bytes = _BIN_HEADS.get(view[head], 0) if len(view) > head else 0
    if not size_bytes or view[:head] != _PLAIN_HEAD:
        return msgpack.unpackb(data, raw=False)
    at = head + 1 + size_bytes
    size = int.from_bytes(view[head + 1 : at], "big")
    if at + size > len(view):
        raise ValueError(f"record tokens claim {size} bytes but {len(view) - at} follow their header")
    obj = msgpack.unpackb(b"\x85" + view[at + size :], raw=False)  # the other five columns
    obj["tokens"] = view[at : at + size]
    return obj


@dataclass
class RecordColumns:
    """A decoded record's columns as msgpack gives them (Python lists), its bases a uint8 view: what
    the loader turns into rows (`load.rows.BlockRows`) without a numpy array per column and back."""

    tokens: np.ndarray  # uint8, all windows back to back (a view on the record bytes)
    lengths: list[int]
    seq_id: list[str]
    start: list[int]
    window: list[int]
    tag: list[str]

    def __len__(self) -> int:
        return len(self.seq_id)


def decode_columns(data: bytes | dict) -> RecordColumns:
    """Unpack record bytes (or a record webdataset already unpacked, e.g. from a ``.mp`` member) and
    check its columns agree: as many of each, lengths that add up to its bases, none negative;
    tokens stay a zero-copy view on the record (or on the decompressed bytes)."""
    obj = data if isinstance(data, dict) else unpack_record(data)
    tokens = obj["tokens"]
    codec = obj.get("codec", "none")
    if codec == "zstd":
        tokens = _decompressor().decompress(tokens)
    elif codec != "none":
        raise ValueError(f"record codec {codec!r} is unknown to this bionemo-wds")
    columns = RecordColumns(
        np.frombuffer(tokens, dtype=np.uint8),
        *(list(obj[k]) for k in ("lengths", "seq_id", "start", "window", "tag")),
    )
    n = len(columns.seq_id)
    if not (len(columns.lengths) == len(columns.start) == len(columns.window) == len(columns.tag) == n):
        raise ValueError("record columns have different lengths")
    total = sum(columns.lengths)
    if total != len(columns.tokens):
        raise ValueError(f"record lengths add up to {total} bases but it holds {len(columns.tokens)}")
    if n and min(columns.lengths) < 0:
        raise ValueError(f"record lengths include a negative one ({min(columns.lengths)})")
    return columns


def decode_record(data: bytes | dict) -> WindowBlock:
    """`decode_columns`, the numbers as int64 arrays (`WindowBlock`)."""
    c = decode_columns(data)
    return WindowBlock(
        tokens=c.tokens,
        lengths=np.asarray(c.lengths, dtype=np.int64),
        seq_id=c.seq_id,
        start=np.asarray(c.start, dtype=np.int64),
        window=np.asarray(c.window, dtype=np.int64),
        tag=c.tag,
    )
