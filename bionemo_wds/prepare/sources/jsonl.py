"""JSON lines as input: ``prepare --source jsonl FILE_OR_DIR ...`` (OpenGenome2's ``json/`` tree).

One record per line, a JSON object whose ``--text-column`` field (default ``text``) holds the
sequence; other fields are ignored, so files of one corpus may differ in schema (some of
OpenGenome2's carry a ``record`` field, others not). A file is plain, gzip (read with ISA-L's
``igzip`` where the ``isal`` package has a wheel, else the standard library's ``gzip``: the same
bytes, about twice as fast) or zstd (the ``zstd`` extra), told apart by its first bytes, whatever
its name; a directory stands for the files below it named ``*.jsonl`` or ``*.ndjson``, optionally
``.gz`` / ``.zst`` (sorted). Blank lines are passed over (they keep their line numbers).

Each file is one catalog task (`text_source`: its bases go to the run's cache, its tag and name
per record); a line that is not a JSON object, lacks the field or holds no text there is refused
naming file and line.
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

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

#: Names a directory's JSON lines files have (any case).
JSONL_SUFFIXES = tuple(f"{stem}{packed}" for stem in (".jsonl", ".ndjson") for packed in ("", ".gz", ".zst", ".zstd"))
#: The first bytes of a gzip and of a zstd frame.
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Bytes read from a file at a time.
READ_BYTES = 1 << 20
#: Fields a "lacks the field" message lists.
SHOWN_FIELDS = 10


def is_jsonl_name(name: str) -> bool:
    """Is `name` (lower case) a JSON lines file's name (`JSONL_SUFFIXES`)?"""
    return name.endswith(JSONL_SUFFIXES)


def jsonl_files(inputs: Sequence[str], opts: PrepareOptions) -> list[InputFile]:
    """The JSON lines files of `inputs`, in order (`text_source.find_inputs`); `--tags` refused."""
    check_text_options(opts)
    return find_inputs(inputs, is_jsonl_name, "JSON lines (*.jsonl, *.ndjson, optionally .gz or .zst)")


def jsonl_input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """Every file a run reads (for the request fingerprint and `--split-from-names`)."""
    return [Path(f.path) for f in jsonl_files(inputs, opts)]


def _zstd_reader(raw: IO[bytes]) -> IO[bytes]:
    try:
        import zstandard
    except ImportError as exc:
        raise BadInputError(
            "zstd-compressed JSON lines need the zstandard package: pip install 'bionemo-wds[zstd]'"
        ) from exc
    # every frame of the file, as the zstd command line reads it (pzstd and --long write several)
    reader = zstandard.ZstdDecompressor().stream_reader(raw, read_size=READ_BYTES, read_across_frames=True)
    return io.BufferedReader(reader, READ_BYTES)


def _gzip_reader(raw: IO[bytes]) -> IO[bytes]:
    try:
        from isal import igzip as gzip_module  # the same bytes as gzip's, faster (module docstring)
    except ImportError:  # a platform isal has no wheel for
        import gzip as gzip_module  # type: ignore[no-redef]
    return gzip_module.open(raw, "rb")


@contextmanager
def open_lines(path: str) -> Iterator[Iterator[list[bytes]]]:
    """The lines of `path` (plain, gzip or zstd by its first bytes), in lists (`_checked_lines`); a
    damaged or truncated compressed file is refused naming it."""
    with open(path, "rb", buffering=READ_BYTES) as raw:
        magic = raw.read(len(ZSTD_MAGIC))
        raw.seek(0)
        if magic.startswith(GZIP_MAGIC):
            kind, stream = "gzip", _gzip_reader(raw)
        elif magic == ZSTD_MAGIC:
            kind, stream = "zstd", _zstd_reader(raw)
        else:
            kind, stream = "plain", raw
        with stream:
            yield _checked_lines(stream, path, kind)


def _checked_lines(stream: IO[bytes], path: str, kind: str) -> Iterator[list[bytes]]:
    """The lines of `stream` in lists of about `READ_BYTES` (one call per list: the per-line work is
    the caller's loop alone); a read error is the input's, naming it."""
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
    if kind == "zstd":
        import zstandard

        errors += (zstandard.ZstdError,)
    while True:
        try:
            lines = stream.readlines(READ_BYTES)
        except errors as exc:
            raise SourceError(f"input {path} is not a readable {kind} file: {exc}") from exc
        if not lines:
            return
        yield lines


@dataclass(frozen=True)
class JsonlTask:
    """Input file `number` of the run, at `path`."""

    number: int
    path: str


def fields_of(record: dict) -> str:
    """The fields of a record, for a message: up to `SHOWN_FIELDS` of them."""
    names = [repr(k) for k in list(record)[:SHOWN_FIELDS]]
    return ", ".join(names) + (", ..." if len(record) > SHOWN_FIELDS else "") if names else "none"


def json_type(value: object) -> str:
    """What a parsed JSON value is, in JSON's words (array, number, ...)."""
    if isinstance(value, bool):
        return "boolean"
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return names.get(type(value), "null")


def bad_record(record: object, column: str, where: str) -> SourceError:
    """Why a parsed line (`where`) gives no text: not an object, no such field, not a string."""
    if not isinstance(record, dict):
        return SourceError(f"{where} is a JSON {json_type(record)}, not an object with a {column!r} field")
    if record.get(column) is None:
        said = "has null in" if column in record else "lacks"
        return SourceError(
            f"{where} {said} the field {column!r} (its fields: {fields_of(record)}); name the sequence "
            "field with --text-column"
        )
    return SourceError(f"{where}: its {column!r} is a JSON {json_type(record[column])}, not a string")


def jsonl_part(context: TextContext, task: JsonlTask) -> TextPart:
    """One file's records into the cache (`text_source.write_part`), each line checked."""
    column, id_column = context.text_column, context.id_column

    def records(writer: PartWriter) -> None:
        number = 0
        with open_lines(task.path) as batches:
            for lines in batches:
                for line in lines:
                    number += 1
                    try:
                        record = json.loads(line.decode("utf-8"))  # JSON lines are UTF-8: no encoding to detect
                    except ValueError as exc:  # JSONDecodeError; UnicodeDecodeError for bytes that are not UTF-8
                        if line.isspace():
                            continue  # a blank line
                        raise SourceError(f"{writer.where(number)} is not JSON: {exc}") from exc
                    text = record.get(column) if type(record) is dict else record
                    if type(text) is not str:
                        raise bad_record(record, column, writer.where(number))
                    record_id = record.get(id_column) if id_column is not None else None
                    writer.add(number, text.encode("utf-8", "replace"), record_id)

    return write_part(context, task.number, task.path, records)


def catalog_jsonl(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    """One catalog sequence per record of every input (module docstring), in input and line order;
    the files are read in tasks (one per file) at the run's place (`TaskPlace.of`)."""
    files = jsonl_files(inputs, opts)
    context = TextContext("jsonl", opts.text_column, opts.id_column, str(cache_dir))
    tasks = [JsonlTask(number, f.path) for number, f in enumerate(files)]
    size = sum(Path(f.path).stat().st_size for f in files)
    parts = run_parts(jsonl_part, context, tasks, size, TaskPlace.of(opts))
    return catalog_parts(context, files, [(task.number, part) for task, part in zip(tasks, parts)], opts)
