"""A sequential tar reader for the genomic hot path: (name, bytes) per member, nothing else.

Python's `tarfile` (which webdataset uses) builds a TarInfo object, parses every header field and
handles every tar dialect; for our shards (USTAR, one msgpack member per block of windows) that is
~20 us per member, a measurable part of the loader (see issue 4's levers). This reader checks
each header's checksum, follows GNU long names and PAX ``path`` records written by other tools,
and reports truncation and corruption precisely; everything else is left to the caller.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np
from webdataset.filters import pipelinefilter
from webdataset.gopen import gopen

from bionemo_wds.shard_errors import ShardErrorPolicy

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
    """(name, data) of every regular file of a tar stream, in order."""
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
        stored = _octal(header[148:156])
        if int(arr.sum()) - int(arr[148:156].sum()) + 8 * 32 != stored:
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
            for record in data.split(b"\n"):
                _, _, keyval = record.partition(b" ")
                if keyval.startswith(b"path="):
                    long_name = keyval[5:].decode("utf-8", "replace")
        elif kind in (b"0", b"\0", b"7"):
            yield (long_name or name), data
            long_name = None
        else:
            long_name = None


def _read_records(src: Iterable[dict[str, Any]], suffix: str = "msgpack",
                  policy: ShardErrorPolicy | None = None) -> Iterator[tuple[bytes, str, str]]:
    """Shard URLs (webdataset's ``{"url": ...}`` dicts) -> ``(record, key, url)`` per member."""
    policy = policy or ShardErrorPolicy()
    ending = "." + suffix
    for item in src:
        url = item["url"]
        try:
            with gopen(url, "rb") as stream:
                for name, data in iter_members(stream):
                    if name.endswith(ending):
                        yield data, name[: -len(ending)], url
        except (OSError, TarStreamError) as exc:
            policy.damaged_shard(url, exc)


read_records = pipelinefilter(_read_records)
