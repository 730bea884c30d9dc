"""Sequences held as text in records (JSON lines, Parquet rows): their bases cached, cataloged, read.

`--source jsonl` (`sources.jsonl`) and `--source parquet` (`sources.parquet`) differ only in how a
record's text is found; the rest is here. Neither format has random access to a record's bases (a
gzip or zstd stream has none at all, and a JSON string or a Parquet page must be decoded whole), so
the catalog pass writes the bases of each task's records (a file, or a Parquet row group) into the
run's cache as one flat byte file (`PartWriter`), as gzip FASTA inputs are unpacked there; any
window is then one positioned read (`TextReader`). The copy costs disk the size of the bases while
the run lasts (the cache is removed when the run is done) and a small share of the catalog's time
(docs/benchmarks.md); a run resumed after a kill reuses the parts already written (`load_part`).

Each record's text, as bytes (UTF-8; a stray non-ASCII character is left for `scan` to report),
loses its Evo2 lineage tag as ``--source megatron`` documents do (`tags.strip_embedded_tag`: the tag
the text starts with becomes the sequence's control tag and every occurrence of it leaves the
bases). The record is named by ``--id-column`` when one is given, else ``<file>:<line>`` (JSON
lines, 1-based) or ``<file>:<row>`` (Parquet, 0-based in its file), where ``<file>`` is the file's
path below the directory given as input, or its name when it was given itself.

The tasks run where `prepare` runs its passes (`executors.tasks.run_tasks`) and their results are
joined in task order (`catalog_parts`), so the catalog, and every byte after it, is the same for any
number of workers and either executor.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from bionemo_wds.core.tokenizer import encode_tag
from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.format.write_errors import writing_output
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.executors.tasks import TaskPlace, run_tasks
from bionemo_wds.prepare.tags import strip_embedded_tag
from bionemo_wds.storage.atomic import atomic_write

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

#: Input bytes from which the local executor runs the catalog's tasks in a process pool (below: here).
POOL_BYTES = 64 << 20
#: Bytes a task buffers before writing to its cache file (records are often a few kb).
WRITE_BUFFER = 4 << 20
#: Cache files a reader keeps open at once (a writer reads windows of every part in a shuffled order).
MAX_OPEN = 64
#: Characters an id may not hold (the sequence table is tab-separated, one sequence per line).
ID_FORBIDDEN = ("\t", "\n", "\r")


@dataclass(frozen=True)
class InputFile:
    """One file a run reads: its path and the name its records' default ids start with."""

    path: str
    label: str


def find_inputs(inputs: Sequence[str | os.PathLike], matches: Callable[[str], bool], what: str) -> list[InputFile]:
    """The files of `inputs` in a stable order: as given, a directory expanded to the files below it
    whose names `matches` (sorted; `what` names them in messages). A file given twice, or two inputs
    whose default ids would be the same (two files of one name given apart), is refused."""
    found: list[InputFile] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and matches(p.name.lower()))
            if not inside:
                raise SourceError(f"directory {path} holds no {what} files")
            found.extend(InputFile(str(p), p.relative_to(path).as_posix()) for p in inside)
        elif path.is_file():
            if not os.access(path, os.R_OK):
                raise SourceError(f"input {path} is not readable (permission denied)")
            found.append(InputFile(str(path), path.name))
        else:
            raise SourceError(f"input {path} does not exist")
    if not found:
        raise OptionError(f"no input {what} files given")
    paths: dict[Path, str] = {}
    labels: dict[str, str] = {}
    for f in found:
        resolved = Path(f.path).resolve()
        if resolved in paths:
            raise OptionError(f"input given more than once: {f.path}")
        if f.label in labels:
            raise OptionError(
                f"inputs {labels[f.label]} and {f.path} would both name their records {f.label}:<number>: give "
                "their common directory as the input (the names below it differ), or name records with --id-column"
            )
        paths[resolved], labels[f.label] = f.path, f.path
    return found


def check_text_options(opts: PrepareOptions) -> None:
    """Refuse a ``--tags`` rule: these sources take each record's tag from its text."""
    if opts.tags != "none":
        raise OptionError(
            f"--tags {opts.tags} does not apply to --source {opts.source}: the lineage tag a record's text starts "
            "with becomes its control tag"
        )


@dataclass(frozen=True)
class TextContext:
    """What every catalog task shares: the columns, where parts go, the source's name for messages."""

    kind: str  # jsonl or parquet
    text_column: str
    id_column: str | None
    cache_dir: str


@dataclass
class TextPart:
    """The records one task found: their bases laid end to end in `bases_path` (cache)."""

    bases_path: str
    numbers: np.ndarray  # int64 per record: its line (1-based) or row (0-based) in its file
    lengths: np.ndarray  # int64 per record: bases, tags taken out
    tag_codes: np.ndarray  # int32 per record: index into `tags`
    tags: list[str]  # distinct tags, "" first
    ids: list[str] | None  # per record: the --id-column value


def part_paths(context: TextContext, task_number: int) -> tuple[Path, Path]:
    """Where task `task_number` keeps its bases and its table in the cache."""
    stem = Path(context.cache_dir) / f"{context.kind}-{task_number:06d}"
    return stem.with_suffix(".bases"), stem.with_suffix(".npz")


def _joined(texts: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(texts).encode(), dtype=np.uint8)


def _split(blob: np.ndarray) -> list[str]:
    return blob.tobytes().decode().split("\n")


def load_part(context: TextContext, task_number: int) -> TextPart | None:
    """The part an earlier run over the same request wrote (its table is written after its bases,
    and the bases must add up to it), or None."""
    bases, table = part_paths(context, task_number)
    if not (bases.is_file() and table.is_file()):
        return None
    with np.load(table, allow_pickle=False) as saved:
        ids = (_split(saved["ids"]) if saved["ids"].size else []) if bool(saved["has_ids"]) else None
        part = TextPart(str(bases), saved["numbers"], saved["lengths"], saved["tag_codes"], _split(saved["tags"]), ids)
    return part if bases.stat().st_size == int(part.lengths.sum()) else None


class PartWriter:
    """Adds one task's records to its cache file (`handle`) and keeps their table."""

    def __init__(self, context: TextContext, handle: IO[bytes], path: str) -> None:
        self.handle, self.path = handle, path
        self.unit = "line" if context.kind == "jsonl" else "row"
        self.id_column = context.id_column
        self.numbers: list[int] = []
        self.lengths: list[int] = []
        self.codes: list[int] = []
        self.tags: dict[str, int] = {"": 0}
        self.ids: list[str] | None = [] if context.id_column else None

    def where(self, number: int) -> str:
        """Record `number` as messages name it: "line 7 of FILE", "row 7 of FILE"."""
        return f"{self.unit} {number} of {self.path}"

    def add(self, number: int, text: bytes, record_id: Any) -> None:
        """One record: its line or row `number`, its text (tag still in), its id (with --id-column)."""
        tag, bases = strip_embedded_tag(text)
        code = self.tags.get(tag)
        if code is None:
            encode_tag(tag, self.where(number))  # printable ASCII, else refused naming the record
            code = self.tags[tag] = len(self.tags)
        if self.ids is not None:
            self.ids.append(checked_id(record_id, self.id_column, self.where(number)))
        self.handle.write(bases)
        self.numbers.append(number)
        self.lengths.append(len(bases))
        self.codes.append(code)

    def part(self, bases_path: Path) -> TextPart:
        return TextPart(
            str(bases_path),
            np.asarray(self.numbers, dtype=np.int64),
            np.asarray(self.lengths, dtype=np.int64),
            np.asarray(self.codes, dtype=np.int32),
            list(self.tags),
            self.ids,
        )


def write_part(context: TextContext, task_number: int, path: str, records: Callable[[PartWriter], None]) -> TextPart:
    """Task `task_number`'s part: the cached one, or a new one that `records(writer)` fills with
    records of input file `path`, written into the cache and kept there for a resumed run.
    The cache is a copy checked as it is reused (`load_part`), so its files are not fsynced."""
    cached = load_part(context, task_number)
    if cached is not None:
        return cached
    bases_path, table_path = part_paths(context, task_number)
    what = f"the bases of {path}, copied into the cache of --out"
    with writing_output(bases_path, what, context.cache_dir):
        Path(context.cache_dir).mkdir(parents=True, exist_ok=True)
        with atomic_write(bases_path, durable=False, buffering=WRITE_BUFFER) as handle:
            writer = PartWriter(context, handle, path)
            records(writer)
        part = writer.part(bases_path)
        with atomic_write(table_path, durable=False) as fh:
            np.savez(
                fh,
                numbers=part.numbers,
                lengths=part.lengths,
                tag_codes=part.tag_codes,
                tags=_joined(part.tags),
                ids=_joined(part.ids or []),
                has_ids=np.asarray(part.ids is not None),
            )
    return part


def checked_id(value: Any, column: str | None, where: str) -> str:
    """An --id-column value as the record's name: text (numbers as written); none, empty, or holding a
    tab or a line break is refused naming the record."""
    if value is None:
        raise SourceError(f"{where} has no {column!r} (--id-column)")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = value if isinstance(value, str) else str(value)
    if not text or any(c in text for c in ID_FORBIDDEN):
        raise SourceError(f"{where}: its {column!r} (--id-column) {text!r} is empty or holds a tab or a line break")
    return text


@dataclass
class TextSource:
    """Records of JSON lines or Parquet files, their bases in the run's cache (one file per task)."""

    kind: str
    files: list[str]  # per input file: its path as found
    parts: list[str]  # per task: its cache file of bases
    file_index: np.ndarray  # int64 per sequence: index into `files`
    part_index: np.ndarray  # int64 per sequence: index into `parts`
    offsets: np.ndarray  # int64 per sequence: where its bases start in its part
    numbers: np.ndarray  # int64 per sequence: its line (jsonl, 1-based) or row (parquet, 0-based)
    tagged: np.ndarray  # bool per sequence: a lineage tag was taken out of its text

    def reader(self) -> TextReader:
        return TextReader(self)

    def describe(self, seq: int) -> str:
        unit = "line" if self.kind == "jsonl" else "row"
        where = f"the text of {unit} {int(self.numbers[seq])} of {self.file_of(seq)}"
        return f"{where} (its lineage tag taken out)" if self.tagged[seq] else where

    def file_of(self, seq: int) -> str:
        return self.files[int(self.file_index[seq])]


class TextReader:
    """`BaseReader` of a `TextSource`: positioned reads of the cache files, at most `MAX_OPEN` open."""

    def __init__(self, source: TextSource) -> None:
        self.source = source
        self.layout = list(zip(source.part_index.tolist(), source.offsets.tolist()))
        self.handles: OrderedDict[int, int] = OrderedDict()

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        part, offset = self.layout[seq]
        fd = self.handles.get(part)
        if fd is None:
            if len(self.handles) >= MAX_OPEN:
                os.close(self.handles.popitem(last=False)[1])
            fd = self.handles[part] = os.open(self.source.parts[part], os.O_RDONLY)
        else:
            self.handles.move_to_end(part)
        raw = os.pread(fd, max(0, end - start), offset + start)
        return raw if table is None else raw.translate(table)

    def close(self) -> None:
        for fd in self.handles.values():
            os.close(fd)
        self.handles.clear()


def run_parts(
    fn: Callable[[TextContext, Any], TextPart],
    context: TextContext,
    tasks: Sequence[Any],
    input_bytes: int,
    place: TaskPlace,
) -> Iterator[TextPart]:
    """The tasks' parts in task order, run at `place` (the local executor uses a pool only from
    `POOL_BYTES` of input on: below, a pool costs more than it saves)."""
    if place.executor == "local" and input_bytes < POOL_BYTES:
        place = TaskPlace(progress=place.progress)
    return run_tasks(fn, context, tasks, place, "catalog", unit="task")


def catalog_parts(
    context: TextContext,
    files: Sequence[InputFile],
    parts: Sequence[tuple[int, TextPart]],
    opts: PrepareOptions,
) -> Catalog:
    """Join the tasks' parts (each with the number of its input file, in task order) into the
    catalog: names, tags, lengths, and where each sequence's bases lie. A record without bases is
    refused, or skipped with ``--on-invalid skip``; an id given twice is refused."""
    unit = "line" if context.kind == "jsonl" else "row"
    names: list[str] = []
    tags: list[str] = []
    cols: list[list[np.ndarray]] = [[], [], [], [], []]  # file, part, offset, number, length
    tagged: list[np.ndarray] = []
    skipped: list[dict] = []
    counts = {"records": 0, "tagged": 0, "empty": 0}
    for p, (f, part) in enumerate(parts):
        label, path = files[f].label, files[f].path
        starts = np.cumsum(part.lengths) - part.lengths
        keep = part.lengths > 0
        counts["records"] += len(part.lengths)
        counts["empty"] += int((~keep).sum())
        own = part.ids if part.ids is not None else [f"{label}:{n}" for n in part.numbers.tolist()]
        for i in np.flatnonzero(~keep).tolist():
            where = f"{unit} {int(part.numbers[i])} of {path}"
            reason = f"{where} holds no bases (its text is empty, or a lineage tag alone)"
            if opts.on_invalid != "skip":
                raise SourceError(f"{reason}; use --on-invalid skip to leave such records out")
            skipped.append({"seq_id": own[i], "file": path, "reason": reason})
        rows = np.flatnonzero(keep)
        codes = part.tag_codes[rows]
        names.extend(own[i] for i in rows.tolist())
        tags.extend(part.tags[c] for c in codes.tolist())
        tagged.append(codes > 0)
        counts["tagged"] += int((codes > 0).sum())
        for col, values in zip(
            cols, (np.full(len(rows), f), np.full(len(rows), p), starts[rows], part.numbers[rows], part.lengths[rows])
        ):
            col.append(np.asarray(values, dtype=np.int64))
    file_index, part_index, offsets, numbers, lengths = (
        np.concatenate(c) if c else np.zeros(0, np.int64) for c in cols
    )
    if context.id_column is not None and len(set(names)) < len(names):
        first: dict[str, int] = {}
        for seq, name in enumerate(names):
            if name in first:
                both = [f"{unit} {int(numbers[i])} of {files[int(file_index[i])].path}" for i in (first[name], seq)]
                raise SourceError(
                    f"{context.id_column!r} {name!r} (--id-column) names both {both[0]} and {both[1]}; ids must be "
                    "unique"
                )
            first[name] = seq
    source = TextSource(
        context.kind,
        [f.path for f in files],
        [part.bases_path for _, part in parts],
        file_index,
        part_index,
        offsets,
        numbers,
        np.concatenate(tagged) if tagged else np.zeros(0, bool),
    )
    catalog = Catalog(source, names, tags, lengths)
    catalog.skipped.extend(skipped)
    catalog.notes.update(counts, text_column=context.text_column, id_column=context.id_column)
    if not len(catalog) and not skipped:
        raise SourceError(f"the inputs hold no records ({', '.join(f.path for f in files[:3])})")
    return catalog
