"""Tar shards: the one reader and the one writer of shard bytes.

The reader is written here rather than taken from `tarfile` (see `iter_members`); the writer
(`write_tar`, which `write_shard` and the compat pickle shards use) is webdataset's `TarWriter`
with a fixed member time, so the same records always give the same bytes, behind `atomic_write` so
a shard's name appears only when the shard is complete. `write_shard` also returns the shard's
record index (`format.record_index`): where each record's data lies, its size, window count and crc32.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, NamedTuple, Protocol

import numpy as np

from bionemo_wds.format.record_index import RecordIndex, RecordIndexBuilder
from bionemo_wds.format.records import RECORD_SUFFIX, WindowBlock, decode_record
from bionemo_wds.storage.atomic import HashingReader, HashingWriter, atomic_write

TAR_MTIME = 0  # fixed member time: the same windows always give the same bytes
BLOCK = 512
_ZERO = bytes(BLOCK)
#: Longest member name a plain USTAR header holds; a longer one would make `tarfile` write an
#: extended (PAX) header before the member, and the offsets below would not hold.
_USTAR_NAME = 100
#: Largest member size a USTAR header holds (11 octal digits).
_USTAR_SIZE = 8**11 - 1


def padded(size: int, to: int = BLOCK) -> int:
    """`size` rounded up to a multiple of `to` (tar pads member data to 512-byte blocks)."""
    return -(-size // to) * to


class WrittenShard(NamedTuple):
    """What `write_shard` wrote: the shard's size and sha256, and its record index."""

    bytes: int
    sha256: str
    records: RecordIndex


def write_tar(
    final: str | os.PathLike[str],
    samples: Iterable[dict[str, Any]],
    storage_options: dict | None = None,
    *,
    encoder: bool = True,
    expected_size: Callable[[], int] | None = None,
) -> tuple[int, str]:
    """Write `samples` (webdataset sample dicts: ``__key__`` and one entry per member suffix) as the
    tar file `final`, atomically, with the fixed member time `TAR_MTIME`; returns its (size, sha256).

    The one place that writes tar bytes: shards (`write_shard`) and the compat pickle shards
    (`compat.pickles`). `encoder` is webdataset's (False: every value must be bytes, written as
    they are). `expected_size`, called once the archive is complete and before it is published,
    gives the size the file must have (a RuntimeError otherwise).
    """
    from webdataset import TarWriter  # here, not at the top: webdataset imports torch (2 s per CLI start)

    with atomic_write(final, storage_options=storage_options) as fh:
        hashing = HashingWriter(fh)
        with TarWriter(hashing, encoder=encoder, mtime=TAR_MTIME) as writer:
            for sample in samples:
                writer.write(sample)
        if expected_size is not None and hashing.size != expected_size():
            raise RuntimeError(
                f"{final}: TarWriter wrote {hashing.size} bytes, the record index layout expects {expected_size()}"
            )
    return hashing.size, hashing.sha.hexdigest()


def write_shard(
    final: str | os.PathLike[str], records: Iterable[tuple[str, bytes, int]], storage_options: dict | None = None
) -> WrittenShard:
    """Write ``(key, record bytes, windows in it)`` triples as the tar shard `final`, atomically
    (`write_tar`).

    Each record is one member ``<key>.msgpack``: a 512-byte USTAR header, then its data padded to
    512 bytes, so record `n`'s data starts ``512 * (n + 1) + sum of the padded sizes before it``
    into the file. `TarWriter` (stream mode) ends the archive with two zero blocks and pads it to a
    multiple of `tarfile.RECORDSIZE`; the file size is checked against that layout before the shard
    is published, and names that would need an extended header are refused, so the index always
    describes the bytes written.
    """
    index = RecordIndexBuilder()
    end = 0  # end of the last member (header + padded data) in the tar

    def samples() -> Iterator[dict[str, Any]]:
        nonlocal end
        for key, data, windows in records:
            name = f"{key}.{RECORD_SUFFIX}"
            if len(name) > _USTAR_NAME or not name.isascii() or len(data) > _USTAR_SIZE:
                raise ValueError(f"record {name} ({len(data)} bytes) does not fit a plain USTAR header")
            yield {"__key__": key, RECORD_SUFFIX: data}
            index.append(end + BLOCK, data, windows)
            end += BLOCK + padded(len(data))

    size, sha = write_tar(
        final, samples(), storage_options, expected_size=lambda: padded(end + 2 * BLOCK, tarfile.RECORDSIZE)
    )
    return WrittenShard(size, sha, index.build())


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
    for name, _, data in iter_member_spans(stream):
        yield name, data


def iter_member_spans(stream: ByteStream) -> Iterator[tuple[str, int, bytes]]:
    """(name, offset of its data in the stream, data) of every regular file, as `iter_members`."""
    long_name: str | None = None
    pos = 0  # bytes of the stream consumed so far
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
        offset, pos = pos + BLOCK, pos + BLOCK + padded(size)
        if kind == b"L":  # GNU long name for the next member
            long_name = data.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind == b"x":  # PAX extended header: only `path` matters here
            for entry in data.split(b"\n"):
                _, _, keyval = entry.partition(b" ")
                if keyval.startswith(b"path="):
                    long_name = keyval[5:].decode("utf-8", "replace")
        elif kind in (b"0", b"\0", b"7"):
            yield (long_name or name), offset, data
            long_name = None
        else:
            long_name = None


def iter_record_members(fileobj: ByteStream, name: str = "<stream>") -> Iterator[tuple[str, int, bytes]]:
    """(member key, offset of its data, record bytes) for every record of a shard stream, undecoded;
    a stream that is not a complete tar is a ValueError naming the shard."""
    try:
        for member, offset, data in iter_member_spans(fileobj):
            key, _, suffix = member.partition(".")
            if suffix == RECORD_SUFFIX:
                yield key, offset, data
    except TarStreamError as exc:
        raise ValueError(f"shard {name} is not a complete tar file: {exc}") from exc


def decode_named(data: bytes, key: str, name: str = "<stream>") -> WindowBlock:
    """`decode_record`, with errors naming the shard and the record."""
    try:
        return decode_record(data)
    except Exception as exc:
        raise ValueError(f"shard {name}: record {key} cannot be decoded: {exc}") from exc


def iter_records(fileobj: ByteStream, name: str = "<stream>") -> Iterator[tuple[str, WindowBlock]]:
    """(member key, block) for every record of a shard stream; errors name the shard."""
    for key, _, data in iter_record_members(fileobj, name):
        yield key, decode_named(data, key, name)


def index_shard(path: str | os.PathLike[str], stream: IO[bytes] | None = None) -> tuple[int, str, RecordIndex]:
    """(size, sha256, record index) of a shard file, from one read of it (ValueError when damaged).

    `stream` reads the shard from an open stream (a remote object) instead; `path` then names it."""
    if stream is None:
        with open(path, "rb") as fh:
            return index_shard(path, fh)
    index = RecordIndexBuilder()
    reader = HashingReader(stream)
    for key, offset, data in iter_record_members(reader, str(path)):
        index.append(offset, data, len(decode_named(data, key, str(path))))
    size, sha = reader.finish()
    return size, sha, index.build()
