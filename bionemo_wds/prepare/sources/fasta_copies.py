"""Plain, positioned-read copies of FASTA inputs that cannot be read in place, in the output's cache.

The index (`fasta_index`) and the readers need plain FASTA text whose lines are equally long per
sequence (the ``.fai`` layout: any base is one positioned read). What is not, gets a copy in the
cache, written atomically once (a resumed run finds it):

- gzip (and bgzip) files and gzip tar members are decompressed (plain gzip has no random access);
- a split file's parts are joined in order and, when gzip, decompressed (`gunzip`);
- a FASTA text whose lines differ in width (concatenated or hand-edited files) is written anew in
  lines of `REWRAP_WIDTH` bases (`rewrap`): the same headers and the same bases, so every window
  equals the input's sequence.

A plain file, and a plain tar member (contiguous bytes at an offset in the archive), are read in place.
A failed read is the input's fault and a failed write (a full disk) the cache's: the messages tell them apart.
"""

from __future__ import annotations

import errno
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.prepare.sources.fasta_inputs import FastaInput
from bionemo_wds.storage.atomic import atomic_write

#: Bases per line of a rewrapped copy.
REWRAP_WIDTH = 80
#: Bytes a copy reads at a time.
COPY_BYTES = 1 << 22
GZIP_MAGIC = b"\x1f\x8b"


def file_chunks(path: str | os.PathLike, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of `path` (to its end when `end` is None), `COPY_BYTES` at a time, by
    positioned reads (a tar member's bytes within its archive)."""
    with open(path, "rb") as fh:
        at = start
        while end is None or at < end:
            try:  # an input that cannot be read is the input's fault, not the cache's (a write)
                data = os.pread(fh.fileno(), COPY_BYTES if end is None else min(COPY_BYTES, end - at), at)
            except OSError as exc:
                raise SourceError(f"cannot read input {path}: {exc.strerror or exc}") from exc
            if not data:
                return
            at += len(data)
            yield data


def gunzip(chunks: Iterable[bytes], origin: str, hint: str = "") -> Iterator[bytes]:
    """The decompressed bytes of the gzip stream `chunks` (one member or several, as bgzip and joined
    gzip files are; zero padding after a member is allowed, as the gzip module allows it). Written
    with zlib rather than `gzip.GzipFile` because the stream is a tar member's bytes or several
    files' in a row, which GzipFile would want as one seekable file. A damaged or truncated stream
    is a `SourceError` naming input `origin` (`hint`: what may be the cause)."""
    inflate, begun = zlib.decompressobj(wbits=31), False
    for chunk in chunks:
        while chunk:
            if not begun:
                chunk = chunk.lstrip(b"\x00")
                if not chunk:
                    break
            begun = True
            try:
                out = inflate.decompress(chunk)
            except zlib.error as exc:
                raise SourceError(f"input {origin} is not a readable gzip file: {exc}{hint}") from exc
            yield out
            chunk = b""
            if inflate.eof:  # a member ended; the next may start in what it left
                chunk, inflate, begun = inflate.unused_data, zlib.decompressobj(wbits=31), False
    if begun:
        raise SourceError(f"input {origin} is not a readable gzip file: its gzip stream ends early{hint}")


def starts_gzip(path: str | os.PathLike, offset: int = 0) -> bool:
    """Do the bytes of `path` at `offset` start a gzip stream?"""
    with open(path, "rb") as fh:
        return os.pread(fh.fileno(), 2, offset) == GZIP_MAGIC


def cache_write_error(exc: OSError, target: Path, origin: str, what: str = "the unpacked copy of gzip input") -> str:
    """One line for a failed write of a copy of input `origin` into the cache (`target`)."""
    if exc.errno == errno.ENOSPC:
        return (
            f"no space left on device writing {target} ({what} {origin}, in the cache of --out): "
            "free space there or choose another --out"
        )
    return f"cannot write {target}, {what} {origin}: {exc.strerror or exc}"


def readable(unit: FastaInput, number: int, cache_dir: Path) -> tuple[Path, int, int | None]:
    """Where input `unit` (number `number`) is plain FASTA text: (file, first byte, end or None for
    the file's end): the input itself, a tar member's bytes in its archive, or a copy in the cache."""
    first = unit.paths[0]
    if unit.kind == "member":
        if not starts_gzip(first, unit.offset):
            return Path(first), unit.offset, unit.offset + unit.size
    elif unit.kind == "file" and not starts_gzip(first):
        return Path(first), 0, None
    target = cache_dir / f"{number:04d}-{unit.stem}"
    if target.exists():  # written atomically by an earlier run over the same inputs
        return target, 0, None
    what = "the joined parts of split input" if unit.kind == "parts" else "the unpacked copy of gzip input"
    if unit.kind == "member":
        chunks = file_chunks(first, unit.offset, unit.offset + unit.size)
    else:
        chunks = (chunk for path in unit.paths for chunk in file_chunks(path))
    if unit.kind != "parts" or starts_gzip(first):
        hint = f" (is a part after {Path(unit.paths[-1]).name} missing?)" if unit.kind == "parts" else ""
        chunks = gunzip(chunks, unit.origin, hint)
    try:
        with atomic_write(target) as dst:
            for chunk in chunks:
                dst.write(chunk)
    except OSError as exc:
        raise BadInputError(cache_write_error(exc, target, unit.origin, what)) from exc
    return target, 0, None


def rewrapped_path(unit: FastaInput, number: int, cache_dir: Path) -> Path:
    """Where input `number`'s rewrapped copy is kept in the cache."""
    return cache_dir / f"{number:04d}-rewrapped-{unit.stem}"


def blocks(path: Path, start: int, end: int | None) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of `path` in blocks of about `COPY_BYTES` that each end at a line end
    (or at `end`)."""
    size = COPY_BYTES
    left = None if end is None else end - start
    carry = b""
    with open(path, "rb") as fh:
        fh.seek(start)
        while True:
            chunk = fh.read(size if left is None else min(size, left))
            if left is not None:
                left -= len(chunk)
            if not chunk:
                if carry:
                    yield carry
                return
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                yield data[:cut]


def next_header(body: bytes, at: int) -> int:
    """Where the first header line of `body` at or after `at` (a line start) begins, or -1. (A bytes
    search, not a regular expression: `rewrap` ran at 50 MB/s with ``re.finditer`` over each block.)"""
    if body.startswith(b">", at):
        return at
    found = body.find(b"\n>", at)
    return found + 1 if found >= 0 else -1


def rewrap(unit: FastaInput, src: Path, start: int, end: int | None, target: Path, width: int = REWRAP_WIDTH) -> None:
    """Write bytes ``[start, end)`` of `src` (FASTA text of input `unit` that breaks no rule but line
    width: `fai.build_fai` with ``ragged=True`` passed) to `target` with each header line as it is
    and each sequence's bases in lines of `width`, line ends ``\\n``."""
    pending = b""  # bases of the open record not yet written (fewer than `width`)

    def put(dst: IO[Any], text: bytes) -> None:
        nonlocal pending
        bases = pending + text.replace(b"\r\n", b"\n").translate(None, b"\n")
        full = len(bases) // width * width
        if full:
            lines = np.empty((full // width, width + 1), dtype=np.uint8)
            lines[:, :width] = np.frombuffer(bases, dtype=np.uint8, count=full).reshape(-1, width)
            lines[:, width] = ord("\n")
            dst.write(lines.tobytes())
        pending = bases[full:]

    def end_record(dst: IO[Any]) -> None:
        nonlocal pending
        if pending:
            dst.write(pending + b"\n")
        pending = b""

    try:
        with atomic_write(target) as dst:
            for body in blocks(src, start, end):
                at, head = 0, next_header(body, 0)
                while head >= 0:
                    put(dst, body[at:head])
                    end_record(dst)
                    at = body.find(b"\n", head) + 1 or len(body)
                    dst.write(body[head:at].rstrip(b"\r\n") + b"\n")
                    head = next_header(body, at)
                put(dst, body[at:])
            end_record(dst)
    except OSError as exc:
        raise BadInputError(cache_write_error(exc, target, unit.origin, "the rewrapped copy of input")) from exc
