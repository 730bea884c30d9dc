"""The on-disk format: the only module that knows how samples and manifests look as bytes.

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

Each window's key is ``<seq_id>/<window>``; it leads back to the FASTA substring
``seq_id[start:start + length]``.

Version 2 (``--compress zstd``) adds ``codec: "zstd"`` to each record and stores ``tokens`` as one
zstd frame; everything else is as in version 1.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import msgpack
import numpy as np
from webdataset import TarWriter

FORMAT_NAME = "bionemo-wds"
FORMAT_VERSION = 1
#: Version 2 = version 1 with a compressed ``tokens`` field (``codec`` says how); written only
#: when a codec is asked for, so uncompressed datasets stay readable by version-1 readers.
COMPRESSED_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
CODECS = ("none", "zstd")
MANIFEST_NAME = "manifest.json"
RECORD_SUFFIX = "msgpack"
DEFAULT_PREFIX = "wdshards"
TAR_MTIME = 0  # fixed member time: the same windows always give the same bytes


def shard_name(index: int, prefix: str = DEFAULT_PREFIX) -> str:
    """File name of shard `index` of a split."""
    return f"{prefix}-{index:06d}.tar"


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
    bases: list[bytes], seq_ids: list[str], starts: list[int], windows: list[int], tags: list[str],
    codec: str = "none", level: int = 17,
) -> bytes:
    """Pack a block of windows into record bytes (deterministic for equal input)."""
    tokens = b"".join(bases)
    record: dict[str, Any] = {}
    if codec == "zstd":
        record["codec"] = "zstd"
        tokens = _compressor(level).compress(tokens)
    elif codec != "none":
        raise ValueError(f"unknown codec {codec!r}; use one of {CODECS}")
    record.update(tokens=tokens, lengths=[len(b) for b in bases], seq_id=seq_ids, start=starts, window=windows,
                  tag=tags)
    return msgpack.packb(record, use_bin_type=True)


def decode_record(data: bytes | dict) -> WindowBlock:
    """Unpack record bytes (or a record webdataset already unpacked, e.g. from a ``.mp`` member);
    tokens stay a zero-copy view on the record (or on the decompressed bytes)."""
    obj = data if isinstance(data, dict) else msgpack.unpackb(data, raw=False)
    tokens = obj["tokens"]
    codec = obj.get("codec", "none")
    if codec == "zstd":
        tokens = _decompressor().decompress(tokens)
    elif codec != "none":
        raise ValueError(f"record codec {codec!r} is unknown to this bionemo-wds")
    block = WindowBlock(
        tokens=np.frombuffer(tokens, dtype=np.uint8),
        lengths=np.asarray(obj["lengths"], dtype=np.int64),
        seq_id=obj["seq_id"],
        start=np.asarray(obj["start"], dtype=np.int64),
        window=np.asarray(obj["window"], dtype=np.int64),
        tag=obj["tag"],
    )
    n = len(block.seq_id)
    if not (len(block.lengths) == len(block.start) == len(block.window) == len(block.tag) == n):
        raise ValueError("record columns have different lengths")
    if int(block.lengths.sum()) != len(block.tokens) or (block.lengths < 0).any():
        raise ValueError(f"record lengths add up to {int(block.lengths.sum())} bases but it holds {len(block.tokens)}")
    return block


class _HashingWriter(io.RawIOBase):
    """File wrapper that hashes and counts what goes through, so a shard is read only once."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)


@dataclass
class ShardInfo:
    path: str  # relative to the dataset root
    n_samples: int
    n_tokens: int
    bytes: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def write_shard_atomic(final: Path, records: Iterator[tuple[str, bytes]]) -> tuple[int, str]:
    """Write records to `final` so that the name appears only when the file is complete.

    Returns (bytes, sha256). The temporary file is hidden (dot name, no ``.tar`` suffix) so shard
    globs never see it, and it is removed on any failure.
    """
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            hashing = _HashingWriter(fh)
            with TarWriter(hashing, mtime=TAR_MTIME) as writer:
                for key, data in records:
                    writer.write({"__key__": key, RECORD_SUFFIX: data})
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return hashing.size, hashing.sha.hexdigest()


class HashingReader:
    """Read-through wrapper that hashes and counts what is read; `finish` hashes the rest."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data

    def finish(self) -> tuple[int, str]:
        """(size, sha256) of the whole stream, reading what the parser left (tar end padding)."""
        while chunk := self.read(1 << 22):
            pass
        return self.size, self.sha.hexdigest()


def file_sha256(path: Path) -> tuple[int, str]:
    """(size, sha256) of a file."""
    with open(path, "rb") as fh:
        return HashingReader(fh).finish()


BLOCK = 512
_ZERO = bytes(BLOCK)


class TarStreamError(ValueError):
    """A tar stream that is truncated or whose bytes are not a valid tar header where one should be."""


def _octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # GNU base-256 for large values
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _read_exact(stream: BinaryIO, n: int, what: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise TarStreamError(f"unexpected end of data in {what} ({len(data)} of {n} bytes)")
    return data


def iter_members(stream: BinaryIO) -> Iterator[tuple[str, bytes]]:
    """(name, data) of every regular file of a tar stream, in order.

    Written here rather than with `tarfile`: tarfile builds a TarInfo and parses every field and
    dialect, ~20 us per member, a measurable part of the loader; this checks each header's
    checksum, follows GNU long names and PAX ``path`` records, reports truncation (including a
    missing end-of-archive marker) and leaves everything else alone.
    """
    long_name: str | None = None
    while True:
        header = stream.read(BLOCK)
        if not header:
            raise TarStreamError("unexpected end of data: no end-of-archive marker")
        if len(header) < BLOCK:
            raise TarStreamError(f"unexpected end of data in a header ({len(header)} of {BLOCK} bytes)")
        if header == _ZERO:
            return
        arr = np.frombuffer(header, dtype=np.uint8)
        if int(arr.sum()) - int(arr[148:156].sum()) + 8 * 32 != _octal(header[148:156]):
            raise TarStreamError("bad header checksum: the stream is corrupt here")
        size = _octal(header[124:136])
        kind = header[156:157]
        name = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        if header[257:262] == b"ustar" and header[345] != 0:
            name = header[345:500].split(b"\0", 1)[0].decode("utf-8", "replace") + "/" + name
        data = _read_exact(stream, size, f"member {name}")
        if size % BLOCK:
            _read_exact(stream, BLOCK - size % BLOCK, f"the padding of member {name}")
        if kind == b"L":  # GNU long name for the next member
            long_name = data.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind == b"x":  # PAX extended header: only `path` matters here
            for entry in data.split(b"\n"):
                _, _, keyval = entry.partition(b" ")
                if keyval.startswith(b"path="):
                    long_name = keyval[5:].decode("utf-8", "replace")
        elif kind in (b"0", b"\0", b"7"):
            yield (long_name or name), data
            long_name = None
        else:
            long_name = None


def iter_records(fileobj: BinaryIO, name: str = "<stream>") -> Iterator[tuple[str, WindowBlock]]:
    """(member key, block) for every record of a shard stream; errors name the shard."""
    try:
        for member, data in iter_members(fileobj):
            key, _, suffix = member.partition(".")
            if suffix != RECORD_SUFFIX:
                continue
            try:
                block = decode_record(data)
            except Exception as exc:
                raise ValueError(f"shard {name}: record {key} cannot be decoded: {exc}") from exc
            yield key, block
    except TarStreamError as exc:
        raise ValueError(f"shard {name} is not a complete tar file: {exc}") from exc


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so readers see the old file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of a prepared dataset; a clear error when it is missing or foreign."""
    path = Path(root) / MANIFEST_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {root} is not a prepared dataset (run `bionemo-wds prepare`)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is not a bionemo-wds manifest")
    if manifest.get("format_version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{path} has format version {manifest.get('format_version')}; this bionemo-wds reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    return manifest
