"""Parquet files as input: ``prepare --source parquet FILE_OR_DIR ...`` (Evo 1's OpenGenome, reshuffled corpora).

One record per row; the ``--text-column`` column (default ``text``; string or binary) holds the
sequence, other columns are ignored, so files of one corpus may differ in schema. A directory
stands for the files below it named ``*.parquet`` (sorted). Read with pyarrow (the ``parquet``
extra).

Each row group of each file is one catalog task (`text_source`: its bases go to the run's cache,
its tag and name per row); the calling process reads only the files' footers, which is where a file
without the column is refused, naming the columns it has. A row whose text is null is refused
naming file and row (0-based in its file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.sources.text_source import (
    InputFile,
    PartWriter,
    TextContext,
    TextPart,
    catalog_parts,
    check_text_options,
    find_inputs,
    run_parts,
    write_part,
)

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

PARQUET_SUFFIXES = (".parquet",)


def pyarrow_modules() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or a `BadInputError` saying to install the ``parquet`` extra."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise BadInputError("--source parquet needs pyarrow: pip install 'bionemo-wds[parquet]'") from exc
    return pa, pq


def is_parquet_name(name: str) -> bool:
    """Is `name` (lower case) a Parquet file's name?"""
    return name.endswith(PARQUET_SUFFIXES)


def parquet_files(inputs: Sequence[str], opts: PrepareOptions) -> list[InputFile]:
    """The Parquet files of `inputs`, in order (`text_source.find_inputs`); `--tags` refused."""
    check_text_options(opts)
    return find_inputs(inputs, is_parquet_name, "Parquet (*.parquet)")


def parquet_input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """Every file a run reads (for the request fingerprint and `--split-from-names`)."""
    return [Path(f.path) for f in parquet_files(inputs, opts)]


def is_text_type(pa: Any, kind: Any) -> bool:
    """Can a column of arrow type `kind` hold a sequence (string or binary, of any offset width)?"""
    checks = ("is_string", "is_large_string", "is_binary", "is_large_binary", "is_string_view", "is_binary_view")
    return any(getattr(pa.types, check, lambda _: False)(kind) for check in checks)


def row_groups(path: str, opts: PrepareOptions) -> list[int]:
    """Rows per row group of `path`, from its footer; a file pyarrow cannot read, or without the
    columns the options name (listing the columns it has), or whose text column is not text, is refused."""
    pa, pq = pyarrow_modules()
    try:
        with pq.ParquetFile(path) as handle:
            names = handle.schema_arrow.names
            for column, option in ((opts.text_column, "--text-column"), (opts.id_column, "--id-column")):
                if column is not None and column not in names:
                    raise SourceError(
                        f"{path} has no column {column!r} ({option}); its columns: {', '.join(map(repr, names))}"
                    )
            kind = handle.schema_arrow.field(opts.text_column).type
            if not is_text_type(pa, kind):
                raise SourceError(f"column {opts.text_column!r} of {path} holds {kind}, not text (string or binary)")
            return [handle.metadata.row_group(g).num_rows for g in range(handle.num_row_groups)]
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"input {path} is not a readable Parquet file: {exc}") from exc


@dataclass(frozen=True)
class ParquetTask:
    """Row group `group` of input file `file` (at `path`), whose first row is row `first_row` of the file."""

    number: int  # the task's number in the run
    file: int
    path: str
    group: int
    first_row: int


def parquet_part(context: TextContext, task: ParquetTask) -> TextPart:
    """One row group's rows into the cache (`text_source.write_part`)."""
    pa, pq = pyarrow_modules()
    columns = [context.text_column] + ([context.id_column] if context.id_column else [])

    def records(writer: PartWriter) -> None:
        try:
            with pq.ParquetFile(task.path, memory_map=True) as handle:  # a task is one process's work: one thread
                table = handle.read_row_group(task.group, columns=columns, use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(f"row group {task.group} of {task.path} cannot be read: {exc}") from exc
        text = table.column(context.text_column)
        ids = table.column(context.id_column).to_pylist() if context.id_column else None
        if text.null_count:
            row = task.first_row + int(np.flatnonzero(text.is_null().to_numpy(zero_copy_only=False))[0])
            raise SourceError(f"row {row} of {task.path} has no text (null in column {context.text_column!r})")
        row = 0
        for chunk in text.cast(pa.large_binary()).chunks:  # zero copy of the bases: one buffer per chunk
            offsets = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset : chunk.offset + len(chunk) + 1]
            data = chunk.buffers()[2]
            view = memoryview(data) if data is not None else memoryview(b"")
            for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
                number = task.first_row + row
                record_id = ids[row] if ids is not None else None
                writer.add(number, bytes(view[lo:hi]), record_id)
                row += 1

    return write_part(context, task.number, task.path, records)


def catalog_parquet(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    """One catalog sequence per row of every input (module docstring), in input and row order; the
    row groups are read in tasks at the run's place (`TaskPlace.of`)."""
    files = parquet_files(inputs, opts)
    context = TextContext("parquet", opts.text_column, opts.id_column, str(cache_dir))
    tasks: list[ParquetTask] = []
    for f, found in enumerate(files):
        first = 0
        for group, rows in enumerate(row_groups(found.path, opts)):
            tasks.append(ParquetTask(len(tasks), f, found.path, group, first))
            first += rows
    size = sum(Path(f.path).stat().st_size for f in files)
    parts = run_parts(parquet_part, context, tasks, size, TaskPlace.of(opts))
    return catalog_parts(context, files, [(task.file, part) for task, part in zip(tasks, parts)], opts)
