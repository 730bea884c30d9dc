"""FASTA inputs: plain or gzip/bgzip, one or many files, or directories of them.

Indexing uses pyfaidx (a samtools-compatible ``.fai``; it also checks headers, line lengths and
duplicate names within a file). Gzip inputs (bgzip is gzip too) are decompressed once into the
output's cache, because plain gzip has no random access; every index goes to that cache, so inputs
in read-only places work and nothing is written beside them. Characters are checked in large
vectorised chunks so a bad base is reported with its sequence and position before any shard is
written.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyfaidx
from tqdm import tqdm

from bionemo_wds.errors import BadInputError
from bionemo_wds.format.atomic import atomic_path, atomic_write
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.tokenizer import encode_tag, first_invalid

FASTA_SUFFIXES = (".fa", ".fasta", ".fna", ".ffn", ".frn", ".fas", ".seq")
GZIP_SUFFIXES = (".gz", ".bgz")
TAG_MODES = ("none", "description", "lineage")
ON_INVALID = ("error", "skip", "replace-N")
_LINEAGE = re.compile(r"d__[^|\s]+")
_CHUNK_LINES = 1 << 16  # lines per validation read: a few MB, one numpy pass each


def _is_fasta_name(path: Path) -> bool:
    name = path.name.lower()
    for gz in GZIP_SUFFIXES:
        if name.endswith(gz):
            name = name[: -len(gz)]
    return name.endswith(FASTA_SUFFIXES)


def find_fasta_files(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """Input files in a stable order: as given, directories expanded (recursively, sorted)."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and _is_fasta_name(p))
            if not inside:
                raise BadInputError(
                    f"directory {path} holds no FASTA files ({', '.join(FASTA_SUFFIXES)}, optionally .gz)"
                )
            found.extend(inside)
        elif path.exists():
            if not os.access(path, os.R_OK):
                raise BadInputError(f"input {path} is not readable (permission denied)")
            found.append(path)
        else:
            raise BadInputError(f"input {path} does not exist")
    if not found:
        raise BadInputError("no input FASTA given")
    resolved = [p.resolve() for p in found]
    dupes = {p for p in resolved if resolved.count(p) > 1}
    if dupes:
        raise BadInputError(f"input given more than once: {sorted(map(str, dupes))[0]}")
    return found


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _local_copy(path: Path, number: int, cache_dir: Path) -> Path:
    """A plain-text path for `path`: itself, or its gzip content decompressed into the cache."""
    if not _is_gzip(path):
        return path
    stem = path.name
    for gz in GZIP_SUFFIXES:
        if stem.lower().endswith(gz):
            stem = stem[: -len(gz)]
    target = cache_dir / f"{number:04d}-{stem}"
    if target.exists():  # written atomically by an earlier run over the same inputs
        return target
    try:  # a failed read is the input's fault, a failed write (a full disk) the cache's: told apart
        with gzip.open(path, "rb") as src, atomic_write(target) as dst:
            shutil.copyfileobj(_GzipReads(src, path), dst, 1 << 22)
    except OSError as exc:
        raise BadInputError(_cache_write_error(exc, target, path)) from exc
    return target


class _GzipReads:
    """`read` of a gzip input whose errors (damaged or truncated input) are a `BadInputError` saying so."""

    def __init__(self, src: gzip.GzipFile, path: Path) -> None:
        self.src, self.path = src, path

    def read(self, size: int = -1) -> bytes:
        try:
            return self.src.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInputError(f"input {self.path} is not a readable gzip file: {exc}") from exc


def _cache_write_error(exc: OSError, target: Path, path: Path) -> str:
    """One line for a failed write of the decompressed copy of `path` into the cache (`target`)."""
    if exc.errno == errno.ENOSPC:
        return (
            f"no space left on device writing {target} (gzip input {path} unpacked into the cache of --out): "
            "free space there or choose another --out"
        )
    return f"cannot write {target}, the unpacked copy of gzip input {path}: {exc.strerror or exc}"


def _index(origin: Path, local: Path, number: int, cache_dir: Path) -> pyfaidx.Faidx:
    """pyfaidx's index of `local`, kept as ``<number>-<name>.fai`` in the cache.

    pyfaidx writes the file itself, so it writes to `atomic_path`'s temporary and the index is
    published under its final name only when complete: a run killed while indexing leaves no
    ``.fai`` for a later run to trust. An index under the final name that is not older than its
    FASTA is therefore whole, and is read without rebuilding.
    """
    fai = cache_dir / f"{number:04d}-{local.name}.fai"
    try:
        if fai.exists() and fai.stat().st_mtime >= local.stat().st_mtime:  # pyfaidx's own staleness rule
            return pyfaidx.Faidx(str(local), indexname=str(fai), build_index=False)
        with atomic_path(fai) as tmp:
            faidx = pyfaidx.Faidx(str(local), indexname=str(tmp))
        faidx.indexname = str(fai)  # where the index now is; pyfaidx reads it no more after building
        return faidx
    except pyfaidx.FastaIndexingError as exc:
        text = str(exc).replace(str(local), str(origin))
        raise BadInputError(f"input {origin} is not valid FASTA: {text}") from exc
    except UnicodeDecodeError as exc:  # a ValueError too: must come first
        raise BadInputError(f"input {origin} is not FASTA text (binary content)") from exc
    except ValueError as exc:  # pyfaidx reports duplicate names this way
        raise BadInputError(f"input {origin}: {exc} (sequence names must be unique)") from exc


def _header(fh, prev_end: int, offset: int) -> str:
    """The definition line (without '>') that precedes a record's first base."""
    fh.seek(prev_end)
    text = fh.read(offset - prev_end).decode("utf-8", "replace")
    lines = [ln for ln in text.splitlines() if ln.startswith(">")]
    return lines[-1][1:].strip() if lines else ""


def tag_for(header: str, mode: str) -> str:
    """Control tag text of a sequence under tag `mode`."""
    if mode == "none":
        return ""
    description = header.split(None, 1)[1] if len(header.split(None, 1)) > 1 else ""
    if mode == "description":
        return description
    if mode == "lineage":
        found = _LINEAGE.search(description)
        return f"|{found.group(0)}|" if found else ""
    raise BadInputError(f"unknown tag mode {mode!r}; use one of {', '.join(TAG_MODES)}")


def find_invalid(fh, offset: int, length: int, line_bases: int, line_bytes: int) -> int:
    """0-based position of the first non-IUPAC base of a record, or -1."""
    done = 0
    while done < length:
        n_bases = min(length - done, _CHUNK_LINES * line_bases)
        raw = read_span(fh, offset, done, done + n_bases, line_bases, line_bytes)
        bad = first_invalid(raw)
        if bad >= 0:
            return done + bad
        if len(raw) != n_bases:  # a short read means the file changed under us
            raise BadInputError(f"file {fh.name} is shorter than its index says")
        done += n_bases
    return -1


def read_span(fh, offset: int, start: int, end: int, line_bases: int, line_bytes: int) -> bytes:
    """Bases [start, end) of a record with .fai layout, newlines removed.

    Written here rather than via pyfaidx.fetch: one positioned read and one C-level newline strip,
    without pyfaidx's str round-trip and per-call objects (the writers call it once per window).
    """
    first = offset + (start // line_bases) * line_bytes + start % line_bases
    last = offset + ((end - 1) // line_bases) * line_bytes + (end - 1) % line_bases + 1
    raw = os.pread(fh.fileno(), last - first, first)
    return raw.translate(None, b"\r\n")


def catalog_fasta(
    inputs: Sequence[str | os.PathLike],
    cache_dir: Path,
    tag_mode: str = "none",
    on_invalid: str = "error",
    progress: bool = True,
) -> Catalog:
    """Index and check every input sequence; refuse bad input before anything is written."""
    if on_invalid not in ON_INVALID:
        raise BadInputError(f"--on-invalid must be one of {', '.join(ON_INVALID)}, got {on_invalid!r}")
    if tag_mode not in TAG_MODES:
        raise BadInputError(f"--tags must be one of {', '.join(TAG_MODES)}, got {tag_mode!r}")
    files = find_fasta_files(inputs)
    cache_dir.mkdir(parents=True, exist_ok=True)
    locals_: list[str] = []
    rows: list[tuple] = []
    skipped: list[dict] = []
    seen: dict[str, Path] = {}
    for number, origin in enumerate(tqdm(files, desc="index", unit="file", disable=not progress)):
        local = _local_copy(origin, number, cache_dir)
        faidx = _index(origin, local, number, cache_dir)
        locals_.append(str(local))
        if not faidx.index:
            raise BadInputError(f"input {origin} holds no sequences")
        with open(local, "rb") as fh:
            for name, rec in faidx.index.items():
                if name in seen:
                    raise BadInputError(
                        f"sequence name {name!r} appears in both {seen[name]} and {origin}; names must be unique"
                    )
                seen[name] = origin
                if rec.rlen == 0:
                    raise BadInputError(f"sequence {name!r} in {origin} is empty (length 0)")
                bad = find_invalid(fh, rec.offset, rec.rlen, rec.lenc, rec.lenb)
                if bad >= 0:
                    char = read_span(fh, rec.offset, bad, bad + 1, rec.lenc, rec.lenb)
                    where = f"sequence {name!r} in {origin} has {char!r} at position {bad} (0-based), not an IUPAC code"
                    if on_invalid == "error":
                        raise BadInputError(f"{where}; use --on-invalid skip or replace-N to proceed")
                    if on_invalid == "skip":
                        skipped.append({"seq_id": name, "file": str(origin), "reason": where})
                        continue
                tag = tag_for(_header(fh, rec.prev_bend, rec.offset), tag_mode)
                encode_tag(tag, name)
                rows.append((number, name, tag, rec.rlen, rec.offset, rec.lenc, rec.lenb))
    if not rows:
        raise BadInputError("no usable sequences in the inputs (all were skipped)")
    cols = list(zip(*rows))
    as_int = lambda col: np.asarray(col, dtype=np.int64)
    return Catalog(
        files=locals_,
        origins=[str(p) for p in files],
        names=list(cols[1]),
        tags=list(cols[2]),
        file_index=as_int(cols[0]),
        lengths=as_int(cols[3]),
        offsets=as_int(cols[4]),
        line_bases=as_int(cols[5]),
        line_bytes=as_int(cols[6]),
        skipped=skipped,
    )


def input_fingerprint(inputs: Iterable[str | os.PathLike]) -> list[dict]:
    """What identifies the inputs of a run, cheaply: path, size and modification time."""
    out = []
    for path in find_fasta_files(list(inputs)):
        st = path.stat()
        out.append({"path": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out
