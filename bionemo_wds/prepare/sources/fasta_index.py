"""The ``.fai`` index of every FASTA input (`fasta_inputs.FastaInput`), built in tasks: one per
input, and one per byte range of a large plain file, run where `prepare` runs its passes
(`executors.tasks.run_tasks`).

A plain file is indexed in place, a plain tar member in place within its archive; a gzip file or
member and a split file's parts are first copied into the output's cache as plain text
(`fasta_copies.readable`), in the same task. A plain file of `RANGE_BYTES` or more is cut into byte
ranges that start at header lines (`fai.header_at_or_after`: each task finds its own ends), each
indexed alone (`fai.build_fai` with a window); their tables are joined in file order and written as
the file's ``.fai``. Whatever broke a FASTA rule is reported as a whole-file index reports it (the
file is indexed again in one piece, on that rare path), so the message and its line numbers do not
depend on the ranges.

An input whose lines differ in width is not refused: it is indexed without the width rule (every
other rule holds, with the input's own line numbers), then written anew in lines of one width into
the cache (`fasta_copies.rewrap`) by a second round of tasks, one per such input, and the copy is
indexed. Every index goes to the cache, written atomically: inputs in read-only places work,
nothing is written beside them, and a run killed while indexing leaves no ``.fai`` to trust.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.prepare.executors.tasks import TaskPlace, run_tasks
from bionemo_wds.prepare.sources.fai import (
    FaiTable,
    FastaCharacterError,
    FastaFormatError,
    FastaLineWidthError,
    build_fai,
    header_at_or_after,
    read_fai,
    write_fai,
)
from bionemo_wds.prepare.sources.fasta_copies import readable, rewrap, rewrapped_path, starts_gzip
from bionemo_wds.prepare.sources.fasta_inputs import FastaInput
from bionemo_wds.storage.atomic import atomic_path

#: Input bytes from which the local executor indexes in a process pool (below: in this process).
POOL_INDEX_BYTES = 256 << 20
#: A plain input of this many bytes or more is indexed in byte ranges of this size.
RANGE_BYTES = 256 << 20


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


def save_index(table: FaiTable, origin: str, local: Path, number: int, cache_dir: Path) -> None:
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


def source_error(origin: str, exc: FastaFormatError) -> SourceError:
    """A broken FASTA rule of input `origin`, as the one line the user sees."""
    if isinstance(exc, FastaCharacterError):
        return SourceError(
            f"sequence {exc.name!r} in {origin} {exc.detail}; replace it in the file (its extra bytes "
            "also break the file's line layout, so --on-invalid cannot skip it)"
        )
    if "binary" in str(exc):
        return SourceError(f"input {origin} is not FASTA text ({exc})")
    return SourceError(f"input {origin} is not valid FASTA: {exc}")


def whole_table(
    origin: str, local: Path, keep_headers: bool, start: int = 0, end: int | None = None
) -> tuple[FaiTable, bool]:
    """The index of a whole input (bytes ``[start, end)`` of `local`) and whether its lines differ
    in width (then the table's layout cannot be read through: the input needs a `rewrap`); any other
    broken rule is a `SourceError` naming `origin`, with the input's own line numbers."""
    try:
        return build_fai(local, keep_headers, start=start, end=end), False
    except FastaLineWidthError:
        pass
    except FastaFormatError as exc:
        raise source_error(origin, exc) from exc
    try:
        return build_fai(local, keep_headers, start=start, end=end, ragged=True), True
    except FastaFormatError as exc:
        raise source_error(origin, exc) from exc


def range_table(origin: str, local: Path, keep_headers: bool, start: int, end: int | None) -> tuple[FaiTable, bool]:
    """`whole_table` of a byte range of a plain file; a broken rule other than line width is reported
    as the whole file's index reports it (same text, same line numbers)."""
    try:
        return build_fai(local, keep_headers, start=start, end=end), False
    except FastaLineWidthError:
        try:
            return build_fai(local, keep_headers, start=start, end=end, ragged=True), True
        except FastaFormatError:
            pass
    except FastaFormatError:
        pass
    whole_table(origin, local, keep_headers)  # raises: the whole file breaks the same rule
    raise AssertionError(f"a byte range of {origin} breaks a FASTA rule that the whole file does not")


@dataclass(frozen=True)
class IndexContext:
    """What every indexing task shares: where copies and indexes go, whether headers are kept."""

    cache_dir: Path
    keep_headers: bool


@dataclass(frozen=True)
class IndexTask:
    """Input `number`; for a byte range of a plain file, the range's nominal ends (the task moves
    each to the header at or after it)."""

    number: int
    unit: FastaInput
    ranged: bool = False
    lo: int = 0
    hi: int | None = None


@dataclass(frozen=True)
class Indexed:
    """An index task's result: the plain text it read, its ends there, its table, whether ragged."""

    local: str
    table: FaiTable
    ragged: bool = False
    start: int = 0
    end: int | None = None


def index_task(context: IndexContext, task: IndexTask) -> Indexed:
    """One task: a whole input (copied into the cache when it must be, its index read from the cache
    when fresh, else built and cached unless ragged), or the records of one byte range of a plain
    file (not cached: joined first)."""
    unit, keep = task.unit, context.keep_headers
    if task.ranged:
        local = Path(unit.paths[0])
        start = header_at_or_after(local, task.lo)
        end = header_at_or_after(local, task.hi) if task.hi is not None else None
        if end is not None and end <= start:
            return Indexed(str(local), FaiTable(headers=[] if keep else None))
        return Indexed(str(local), *range_table(unit.origin, local, keep, start, end))
    local, start, end = readable(unit, task.number, context.cache_dir)
    table = fresh_index(local, task.number, context.cache_dir, keep)
    ragged = False
    if table is None:
        table, ragged = whole_table(unit.origin, local, keep, start, end)
        if not ragged:
            save_index(table, unit.origin, local, task.number, context.cache_dir)
    return Indexed(str(local), table, ragged, start, end)


def rewrap_task(context: IndexContext, task: tuple[int, FastaInput, Indexed]) -> Indexed:
    """Write a ragged input anew in lines of one width into the cache and index the copy (its names
    and lengths are the ragged index's, checked)."""
    number, unit, ragged = task
    target = rewrapped_path(unit, number, context.cache_dir)
    table = fresh_index(target, number, context.cache_dir, context.keep_headers) if target.exists() else None
    if table is None:
        if not target.exists():  # written atomically by an earlier run over the same inputs
            rewrap(unit, Path(ragged.local), ragged.start, ragged.end, target)
        table, still = whole_table(unit.origin, target, context.keep_headers)
        if still or (table.names, table.lengths) != (ragged.table.names, ragged.table.lengths):
            raise SourceError(f"input {unit.origin}: its rewrapped copy {target} does not index as the input does")
        save_index(table, unit.origin, target, number, context.cache_dir)
    return Indexed(str(target), table)


def index_tasks(units: Sequence[FastaInput], cache_dir: Path, keep_headers: bool) -> list[IndexTask]:
    """One task per input, or per `RANGE_BYTES` of a plain file that large with no fresh index."""
    tasks = []
    for number, unit in enumerate(units):
        size = unit.nbytes
        path = Path(unit.paths[0])
        if (
            unit.kind != "file"
            or size < RANGE_BYTES
            or starts_gzip(path)
            or fresh_index(path, number, cache_dir, keep_headers) is not None
        ):
            tasks.append(IndexTask(number, unit))
            continue
        for lo in range(0, size, RANGE_BYTES):
            hi = lo + RANGE_BYTES
            tasks.append(IndexTask(number, unit, True, lo, hi if hi < size else None))
    return tasks


def index_files(
    units: Sequence[FastaInput], cache_dir: Path, keep_headers: bool, place: TaskPlace
) -> list[tuple[str, FaiTable]]:
    """Each input's readable plain text and index, in input order; the tasks run at `place` (with
    the local executor in a pool only from `POOL_INDEX_BYTES` of input on)."""
    if place.executor == "local" and sum(unit.nbytes for unit in units) < POOL_INDEX_BYTES:
        place = TaskPlace(progress=place.progress)  # a pool would cost more than it saves
    context = IndexContext(cache_dir, keep_headers)
    tasks = index_tasks(units, cache_dir, keep_headers)
    results = run_tasks(index_task, context, tasks, place, "index", unit="task")
    done: list[Indexed] = []
    parts: list[Indexed] = []
    for task, result in zip(tasks, results):
        if not task.ranged:
            done.append(result)
            continue
        parts.append(result)
        if task.hi is None:  # the last range of its file: join the ranges
            done.append(joined(task, parts, keep_headers, cache_dir))
            parts = []
    ragged = [(number, unit, result) for number, (unit, result) in enumerate(zip(units, done)) if result.ragged]
    if ragged:
        for (number, _, _), result in zip(
            ragged, run_tasks(rewrap_task, context, ragged, place, "rewrap", unit="task")
        ):
            done[number] = result
    return [(result.local, result.table) for result in done]


def joined(task: IndexTask, parts: list[Indexed], keep_headers: bool, cache_dir: Path) -> Indexed:
    """The index of a plain file from its ranges' (`parts`), in order; cached unless ragged."""
    whole = FaiTable(headers=[] if keep_headers else None)
    for part in (p.table for p in parts):
        whole.names.extend(part.names)
        whole.lengths.extend(part.lengths)
        whole.offsets.extend(part.offsets)
        whole.line_bases.extend(part.line_bases)
        whole.line_bytes.extend(part.line_bytes)
        if whole.headers is not None and part.headers is not None:
            whole.headers.extend(part.headers)
    local = Path(task.unit.paths[0])
    if len(set(whole.names)) != len(whole.names):
        whole_table(task.unit.origin, local, keep_headers)  # a name in two ranges: raises as the whole file does
    ragged = any(p.ragged for p in parts)
    if not ragged:
        save_index(whole, task.unit.origin, local, task.number, cache_dir)
    return Indexed(str(local), whole, ragged)
