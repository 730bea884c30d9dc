"""Tar shards: the one reader and the one writer of shard bytes.

The reader is written here rather than taken from `tarfile` (see `iter_members`); the writer is
webdataset's `TarWriter` with a fixed member time, so the same records always give the same bytes,
behind `atomic_write` so a shard's name appears only when the shard is complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
from webdataset import TarWriter

from bionemo_wds.format.atomic import HashingWriter, atomic_write
from bionemo_wds.format.records import RECORD_SUFFIX, WindowBlock, decode_record

TAR_MTIME = 0  # fixed member time: the same windows always give the same bytes


def write_shard(final: Path, records: Iterable[tuple[str, bytes]]) -> tuple[int, str]:
    """Write ``(key, record bytes)`` pairs as the tar shard `final`, atomically; returns (bytes, sha256)."""
    with atomic_write(final) as fh:
        hashing = HashingWriter(fh)
        with TarWriter(hashing, mtime=TAR_MTIME) as writer:
            for key, data in records:
                writer.write({"__key__": key, RECORD_SUFFIX: data})
    return hashing.size, hashing.sha.hexdigest()


BLOCK = 512
_ZERO = bytes(BLOCK)


class ByteStream(Protocol):
    """All the reader needs of a stream: ``read(n) -> bytes`` (a binary file, a `HashingReader`, ...)."""

    def read(self, size: int = ..., /) -> bytes: ...


class TarStreamError(ValueError):
    """A tar stream that is truncated or whose bytes are not a valid tar header where one should be."""


def _octal(field: bytes) -> int:
    if field and field[0] & 0x80:  # GNU base-256 for large values
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _read_exact(stream: ByteStream, n: int, what: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise TarStreamError(f"unexpected end of data in {what} ({len(data)} of {n} bytes)")
    return data


def iter_members(stream: ByteStream) -> Iterator[tuple[str, bytes]]:
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


def iter_records(fileobj: ByteStream, name: str = "<stream>") -> Iterator[tuple[str, WindowBlock]]:
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
