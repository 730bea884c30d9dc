"""Plain, positioned-read copies of FASTA inputs that cannot be read in place, in the output's cache.

The index (`fasta_index`) and the readers need plain FASTA text whose lines are equally long per
sequence (the ``.fai`` layout: any base is one positioned read). What is not, gets a copy in the
cache, written atomically once (a resumed run finds it):

- gzip (and bgzip) files and gzip tar members are decompressed (plain gzip has no random access);
- a split file's parts are joined in order and, when gzip, decompressed (`JoinedParts`);
- a FASTA text whose lines differ in width (concatenated or hand-edited files) is written anew in
  lines of `REWRAP_WIDTH` bases (`rewrap`): the same headers and the same bases, so every window
  equals the input's sequence.

A plain file, and a plain tar member (contiguous bytes at an offset in the archive), are read in place.
A failed read is the input's fault and a failed write (a full disk) the cache's: the messages tell them apart.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.prepare.sources.fasta_inputs import FastaInput
from bionemo_wds.storage.atomic import atomic_write

#: Bases per line of a rewrapped copy.
REWRAP_WIDTH = 80
#: Bytes a copy reads at a time.
COPY_BYTES = 1 << 22
#: A header line (a block handed to `rewrap` ends at a line end, so no header is cut).
HEADER_LINE = re.compile(rb"^>[^\n]*(?:\n|$)", re.MULTILINE)
GZIP_MAGIC = b"\x1f\x8b"


class FileWindow:
    """`read` of bytes ``[offset, offset + size)`` of an open file (a tar member), by positioned reads."""

    def __init__(self, fh: BinaryIO, offset: int, size: int) -> None:
        self.fh, self.at, self.end = fh, offset, offset + size

    def read(self, size: int = -1) -> bytes:
        want = self.end - self.at if size < 0 else min(size, self.end - self.at)
        data = os.pread(self.fh.fileno(), want, self.at) if want > 0 else b""
        self.at += len(data)
        return data


class JoinedParts:
    """`read` of files one after another (a split file's parts) as one stream."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths, self.next, self.fh = list(paths), 0, None

    def read(self, size: int = -1) -> bytes:
        out = []
        while size != 0:
            if self.fh is None:
                if self.next == len(self.paths):
                    break
                self.fh = open(self.paths[self.next], "rb")  # noqa: SIM115 - closed when read to its end
                self.next += 1
            data = self.fh.read(size)
            if not data or (size < 0):
                self.fh.close()
                self.fh = None
            out.append(data)
            if size > 0:
                size -= len(data)
        return b"".join(out)


class GzipReads:
    """`read` of a gzip input whose errors (damaged or truncated input) are a `SourceError` saying so."""

    def __init__(self, src: gzip.GzipFile, origin: str, hint: str = "") -> None:
        self.src, self.origin, self.hint = src, origin, hint

    def read(self, size: int = -1) -> bytes:
        try:
            return self.src.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise SourceError(f"input {self.origin} is not a readable gzip file: {exc}{self.hint}") from exc


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
    try:
        with open(first, "rb") as fh, atomic_write(target) as dst:
            if unit.kind == "member":
                stream = GzipReads(gzip.GzipFile(fileobj=FileWindow(fh, unit.offset, unit.size)), unit.origin)
                shutil.copyfileobj(stream, dst, COPY_BYTES)
            elif unit.kind == "file":
                shutil.copyfileobj(GzipReads(gzip.GzipFile(fileobj=fh), unit.origin), dst, COPY_BYTES)
            elif starts_gzip(first):
                last = Path(unit.paths[-1]).name
                hint = f" (is a part after {last} missing?)"
                stream = GzipReads(gzip.GzipFile(fileobj=JoinedParts(unit.paths)), unit.origin, hint)
                shutil.copyfileobj(stream, dst, COPY_BYTES)
            else:
                shutil.copyfileobj(JoinedParts(unit.paths), dst, COPY_BYTES)
    except OSError as exc:
        raise BadInputError(cache_write_error(exc, target, unit.origin, what)) from exc
    return target, 0, None


def rewrapped_path(unit: FastaInput, number: int, cache_dir: Path) -> Path:
    """Where input `number`'s rewrapped copy is kept in the cache."""
    return cache_dir / f"{number:04d}-rewrapped-{unit.stem}"


def blocks(path: Path, start: int, end: int | None, size: int = COPY_BYTES) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of `path` in blocks that each end at a line end (or at `end`)."""
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


def rewrap(unit: FastaInput, src: Path, start: int, end: int | None, target: Path, width: int = REWRAP_WIDTH) -> None:
    """Write bytes ``[start, end)`` of `src` (FASTA text of input `unit` that breaks no rule but line
    width: `fai.build_fai` with ``ragged=True`` passed) to `target` with each header line as it is
    and each sequence's bases in lines of `width`, line ends ``\\n``."""
    pending = b""  # bases of the open record not yet written (fewer than `width`)

    def put(dst: BinaryIO, text: bytes) -> None:
        nonlocal pending
        bases = pending + text.replace(b"\r\n", b"\n").translate(None, b"\n")
        full = len(bases) // width * width
        if full:
            lines = np.empty((full // width, width + 1), dtype=np.uint8)
            lines[:, :width] = np.frombuffer(bases, dtype=np.uint8, count=full).reshape(-1, width)
            lines[:, width] = ord("\n")
            dst.write(lines.tobytes())
        pending = bases[full:]

    def end_record(dst: BinaryIO) -> None:
        nonlocal pending
        if pending:
            dst.write(pending + b"\n")
        pending = b""

    try:
        with atomic_write(target) as dst:
            for body in blocks(src, start, end):
                at = 0
                for header in HEADER_LINE.finditer(body):
                    put(dst, body[at : header.start()])
                    end_record(dst)
                    dst.write(header.group().rstrip(b"\r\n") + b"\n")
                    at = header.end()
                put(dst, body[at:])
            end_record(dst)
    except OSError as exc:
        raise BadInputError(cache_write_error(exc, target, unit.origin, "the rewrapped copy of input")) from exc
