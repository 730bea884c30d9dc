"""The ``.fai`` index of every FASTA input, built in tasks: one per file, and one per byte range of
a large plain file, run where `prepare` runs its passes (`executors.tasks.run_tasks`).

A gzip input (bgzip is gzip too) is unpacked once into the output's cache (plain gzip has no random
access), then indexed, in one task. A plain file of `RANGE_BYTES` or more is cut into byte ranges
that start at header lines (`fai.header_at_or_after`: each task finds its own ends), each indexed
alone (`fai.build_fai` with a window); their tables are joined in file order and written as the
file's ``.fai``. Whatever broke a FASTA rule is reported as a whole-file index reports it (the file
is indexed again in one piece, on that rare path), so the message and its line numbers do not
depend on the ranges. Every index goes to the cache, written atomically: inputs in read-only places
work, nothing is written beside them, and a run killed while indexing leaves no ``.fai`` to trust.
"""

from __future__ import annotations

import errno
import gzip
import shutil
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.prepare.executors.tasks import TaskPlace, run_tasks
from bionemo_wds.prepare.sources.fai import (
    FaiTable,
    FastaCharacterError,
    FastaFormatError,
    build_fai,
    header_at_or_after,
    read_fai,
    write_fai,
)
from bionemo_wds.storage.atomic import atomic_path, atomic_write

#: Suffixes of gzip inputs (taken off the name of the unpacked copy).
GZIP_SUFFIXES = (".gz", ".bgz")
#: Input bytes from which the local executor indexes in a process pool (below: in this process).
POOL_INDEX_BYTES = 256 << 20
#: A plain input of this many bytes or more is indexed in byte ranges of this size.
RANGE_BYTES = 256 << 20


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def local_copy(path: Path, number: int, cache_dir: Path) -> Path:
    """A plain-text path for `path`: itself, or its gzip content decompressed into the cache."""
    if not is_gzip(path):
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
            shutil.copyfileobj(GzipReads(src, path), dst, 1 << 22)
    except OSError as exc:
        raise BadInputError(cache_write_error(exc, target, path)) from exc
    return target


class GzipReads:
    """`read` of a gzip input whose errors (damaged or truncated input) are a `BadInputError` saying so."""

    def __init__(self, src: gzip.GzipFile, path: Path) -> None:
        self.src, self.path = src, path

    def read(self, size: int = -1) -> bytes:
        try:
            return self.src.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise SourceError(f"input {self.path} is not a readable gzip file: {exc}") from exc


def cache_write_error(exc: OSError, target: Path, path: Path) -> str:
    """One line for a failed write of the decompressed copy of `path` into the cache (`target`)."""
    if exc.errno == errno.ENOSPC:
        return (
            f"no space left on device writing {target} (gzip input {path} unpacked into the cache of --out): "
            "free space there or choose another --out"
        )
    return f"cannot write {target}, the unpacked copy of gzip input {path}: {exc.strerror or exc}"


def index_path(local: Path, number: int, cache_dir: Path) -> Path:
    """Where input `number`'s ``.fai`` is kept in the cache."""
    return cache_dir / f"{number:04d}-{local.name}.fai"


def fresh_index(local: Path, number: int, cache_dir: Path, keep_headers: bool) -> FaiTable | None:
    """The cached index of an input, when one exists and is usable (not older than its FASTA:
    samtools' rule; never when headers are needed, which a ``.fai`` does not hold)."""
    fai = index_path(local, number, cache_dir)
    if not keep_headers and fai.exists() and fai.stat().st_mtime >= local.stat().st_mtime:
        return read_fai(fai)
    return None


def save_index(table: FaiTable, origin: Path, local: Path, number: int, cache_dir: Path) -> None:
    """Write an input's index into the cache, atomically; a failed write is one line naming it."""
    fai = index_path(local, number, cache_dir)
    try:
        with atomic_path(fai) as tmp:
            write_fai(table, tmp)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise BadInputError(
                f"no space left on device writing {fai} (the index of input {origin}, in the cache of --out): "
                "free space there or choose another --out"
            ) from exc
        raise BadInputError(f"cannot write {fai}, the index of input {origin}: {exc.strerror or exc}") from exc


def indexed(origin: Path, local: Path, keep_headers: bool, start: int = 0, end: int | None = None) -> FaiTable:
    """`build_fai` of `local` (or of its window), a broken rule as a `SourceError` naming `origin`;
    a window's error is reported as the whole file's index reports it (same text, same line numbers)."""
    try:
        return build_fai(local, keep_headers, start=start, end=end)
    except FastaFormatError as exc:
        if start or end is not None:
            return indexed(origin, local, keep_headers)  # raises: the whole file breaks the same rule
        if isinstance(exc, FastaCharacterError):
            raise SourceError(
                f"sequence {exc.name!r} in {origin} {exc.detail}; replace it in the file (its extra bytes "
                "also break the file's line layout, so --on-invalid cannot skip it)"
            ) from exc
        if "binary" in str(exc):
            raise SourceError(f"input {origin} is not FASTA text ({exc})") from exc
        raise SourceError(f"input {origin} is not valid FASTA: {exc}") from exc


@dataclass(frozen=True)
class IndexContext:
    """What every indexing task shares: where copies and indexes go, whether headers are kept."""

    cache_dir: Path
    keep_headers: bool


@dataclass(frozen=True)
class IndexTask:
    """Input `number` (path `origin`); for a byte range of a plain file, the file (`local`) and the
    range's nominal ends (the task moves each to the header at or after it)."""

    number: int
    origin: str
    local: str | None = None
    lo: int = 0
    hi: int | None = None


def index_task(context: IndexContext, task: IndexTask) -> tuple[str, FaiTable]:
    """One task: a whole input (unpacked when gzip, its index read from the cache when fresh, else
    built and cached), or the records of one byte range of a plain input (not cached: joined first)."""
    origin = Path(task.origin)
    if task.local is not None:
        local = Path(task.local)
        start = header_at_or_after(local, task.lo)
        end = header_at_or_after(local, task.hi) if task.hi is not None else None
        if end is not None and end <= start:
            return task.local, FaiTable(headers=[] if context.keep_headers else None)
        return task.local, indexed(origin, local, context.keep_headers, start, end)
    local = local_copy(origin, task.number, context.cache_dir)
    table = fresh_index(local, task.number, context.cache_dir, context.keep_headers)
    if table is None:
        table = indexed(origin, local, context.keep_headers)
        save_index(table, origin, local, task.number, context.cache_dir)
    return str(local), table


def index_tasks(files: Sequence[Path], cache_dir: Path, keep_headers: bool) -> list[IndexTask]:
    """One task per input, or per `RANGE_BYTES` of a plain input that large with no fresh index."""
    tasks = []
    for number, origin in enumerate(files):
        size = origin.stat().st_size
        if size < RANGE_BYTES or is_gzip(origin) or fresh_index(origin, number, cache_dir, keep_headers) is not None:
            tasks.append(IndexTask(number, str(origin)))
            continue
        for lo in range(0, size, RANGE_BYTES):
            hi = lo + RANGE_BYTES
            tasks.append(IndexTask(number, str(origin), str(origin), lo, hi if hi < size else None))
    return tasks


def index_files(
    files: Sequence[Path], cache_dir: Path, keep_headers: bool, place: TaskPlace
) -> Iterator[tuple[str, FaiTable]]:
    """Each input's readable path and index, in input order; the tasks run at `place` (with the local
    executor in a pool only from `POOL_INDEX_BYTES` of input on)."""
    if place.executor == "local" and sum(p.stat().st_size for p in files) < POOL_INDEX_BYTES:
        place = TaskPlace(progress=place.progress)  # a pool would cost more than it saves
    tasks = index_tasks(files, cache_dir, keep_headers)
    results = run_tasks(index_task, IndexContext(cache_dir, keep_headers), tasks, place, "index", unit="task")
    parts: list[FaiTable] = []
    for task, (local, table) in zip(tasks, results):
        if task.local is None:
            yield local, table
            continue
        parts.append(table)
        if task.hi is None:  # the last range of its file: join the ranges
            origin = Path(task.origin)
            whole = join_tables(parts, keep_headers)
            if len(set(whole.names)) != len(whole.names):
                indexed(origin, origin, keep_headers)  # a name in two ranges: raises as the whole file does
            save_index(whole, origin, origin, task.number, cache_dir)
            parts = []
            yield local, whole


def join_tables(parts: list[FaiTable], keep_headers: bool) -> FaiTable:
    """The records of consecutive byte ranges of one file, in order."""
    whole = FaiTable(headers=[] if keep_headers else None)
    for part in parts:
        whole.names.extend(part.names)
        whole.lengths.extend(part.lengths)
        whole.offsets.extend(part.offsets)
        whole.line_bases.extend(part.line_bases)
        whole.line_bytes.extend(part.line_bytes)
        if whole.headers is not None and part.headers is not None:
            whole.headers.extend(part.headers)
    return whole
