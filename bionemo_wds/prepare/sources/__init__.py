"""Input readers. Each turns its inputs into a `Catalog` (`prepare.catalog`) whose `Source` can read
any window's bases; everything after (scan, groups, split, windows, shards) is the same for all.

`SOURCES` is the registry: ``--source NAME`` -> a `SourceReader` (the files a run reads, its
catalog, and a predicate that tells whether an input looks like this kind). A reader's module is
imported only when it is used (``hdf5`` and ``sharded-eden`` need optional extras). A refused
input that looks like another kind says so (``--source fasta`` given an Eden directory).

- `fasta`: FASTA files or directories (plain, gzip, bgzip; split gzip parts; tar archives of FASTA),
  indexed as samtools does (`fasta_inputs`, `fasta_index`).
- `sharded_eden`: Evo2's sharded-Eden layout, one SQLite database per sample, with Parquet split
  lists and precomputed window databases.
- `hdf5`: pre-tokenized rows of an HDF5 dataset (the `[h5]` extra).
- `bed`: intervals of BED files (``chrom start end [split]``) over a ``--reference`` FASTA, each a
  sequence (HyenaDNA's and Caduceus' hg38 intervals).
- `megatron`: Megatron indexed datasets (``PREFIX.bin`` / ``.idx``, as bionemo's ``preprocess_evo2``
  writes them), read with megatron-core (the `[megatron]` extra).
- `jsonl`, `parquet`: records whose text field or column holds the sequence (OpenGenome2's JSON
  lines, Evo 1's Parquet), their bases copied into the run's cache (`text_source`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bionemo_wds.errors import BadInputError, OptionError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.tags import note_untagged

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions


def file_fingerprint(paths: Sequence[str | os.PathLike]) -> list[dict[str, Any]]:
    """What identifies a run's input files, cheaply: path, size and modification time of each."""
    out = []
    for path in paths:
        st = Path(path).stat()
        out.append({"path": str(Path(path).resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


@dataclass(frozen=True)
class SourceReader:
    """One ``--source`` kind."""

    #: Every file a run reads, in a stable order (for the request fingerprint); bad inputs are refused.
    input_files: Callable[[Sequence[str], PrepareOptions], list[Path]]
    #: The inputs' catalog, before `scan` checks the bases (`cache_dir`: where a reader may keep copies).
    catalog: Callable[[Sequence[str], PrepareOptions, Path], Catalog]
    #: Does this input (a path) look like this kind? (Only for hints: ``--source`` decides.)
    detect: Callable[[Path], bool]


def _fasta_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.fasta_inputs import find_fasta_files

    return find_fasta_files(inputs)


def _fasta_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.executors.tasks import TaskPlace
    from bionemo_wds.prepare.sources.fasta import index_fasta

    catalog = index_fasta(inputs, cache_dir, opts.tags, opts.progress, opts.tag_map, TaskPlace.of(opts))
    return note_untagged(catalog, opts.tags, opts.strict_tags)


def _is_fasta(path: Path) -> bool:
    from bionemo_wds.prepare.sources.fasta_inputs import is_fasta_input_name

    return is_fasta_input_name(path) or (path.is_dir() and any(map(_is_fasta, path.glob("*.*"))))


def _eden_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.sharded_eden import eden_input_files

    return eden_input_files(inputs, opts)


def _eden_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.sources.sharded_eden import catalog_sharded_eden

    return note_untagged(catalog_sharded_eden(inputs, opts), opts.tags, opts.strict_tags)


def _is_sharded_eden(path: Path) -> bool:
    """A SEQUENCE_DB_DIR: some ``<sample>/glm_dataset_<sample>.sqlite`` inside."""
    return path.is_dir() and any(path.glob("*/glm_dataset_*.sqlite"))


def _hdf5_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.hdf5 import hdf5_input_files

    return hdf5_input_files(inputs, opts)


def _hdf5_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.sources.hdf5 import catalog_hdf5

    return catalog_hdf5(inputs, opts)


#: The first bytes of every HDF5 file (its superblock signature at offset 0).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _is_hdf5(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except OSError:
        return False


def _megatron_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.megatron import megatron_input_files

    return megatron_input_files(inputs, opts)


def _megatron_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.sources.megatron import catalog_megatron

    return catalog_megatron(inputs, opts)


def _is_megatron(path: Path) -> bool:
    """``PREFIX``, ``PREFIX.bin`` or ``PREFIX.idx`` of an existing pair."""
    prefix = path.with_suffix("") if path.suffix in (".bin", ".idx") else path
    return Path(f"{prefix}.bin").is_file() and Path(f"{prefix}.idx").is_file()


def _bed_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.bed import bed_input_files

    return bed_input_files(inputs, opts)


def _bed_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.executors.tasks import TaskPlace
    from bionemo_wds.prepare.sources.bed import catalog_bed

    return catalog_bed(inputs, opts, cache_dir, TaskPlace.of(opts))


def _is_bed(path: Path) -> bool:
    from bionemo_wds.prepare.sources.bed import is_bed_name

    return is_bed_name(path) or (path.is_dir() and any(map(is_bed_name, path.glob("*.*"))))


def _jsonl_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.jsonl import jsonl_input_files

    return jsonl_input_files(inputs, opts)


def _jsonl_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.sources.jsonl import catalog_jsonl

    return catalog_jsonl(inputs, opts, cache_dir)


def _is_jsonl(path: Path) -> bool:
    from bionemo_wds.prepare.sources.jsonl import is_jsonl_name

    return is_jsonl_name(path.name.lower()) or (path.is_dir() and any(_is_jsonl(p) for p in path.glob("*.*")))


def _parquet_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    from bionemo_wds.prepare.sources.parquet import parquet_input_files

    return parquet_input_files(inputs, opts)


def _parquet_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    from bionemo_wds.prepare.sources.parquet import catalog_parquet

    return catalog_parquet(inputs, opts, cache_dir)


def _is_parquet(path: Path) -> bool:
    from bionemo_wds.prepare.sources.parquet import is_parquet_name

    return is_parquet_name(path.name.lower()) or (path.is_dir() and any(_is_parquet(p) for p in path.glob("*.*")))


#: ``--source`` name -> its reader (`options.SOURCE_KINDS` lists the same names).
SOURCES: dict[str, SourceReader] = {
    "fasta": SourceReader(_fasta_files, _fasta_catalog, _is_fasta),
    "sharded-eden": SourceReader(_eden_files, _eden_catalog, _is_sharded_eden),
    "hdf5": SourceReader(_hdf5_files, _hdf5_catalog, _is_hdf5),
    "megatron": SourceReader(_megatron_files, _megatron_catalog, _is_megatron),
    "bed": SourceReader(_bed_files, _bed_catalog, _is_bed),
    "jsonl": SourceReader(_jsonl_files, _jsonl_catalog, _is_jsonl),
    "parquet": SourceReader(_parquet_files, _parquet_catalog, _is_parquet),
}


def detect_source(inputs: Sequence[str | os.PathLike]) -> str | None:
    """The one ``--source`` kind every input looks like, or None (none, or several)."""
    kinds = {name for name, reader in SOURCES.items() if inputs and all(reader.detect(Path(p)) for p in inputs)}
    return kinds.pop() if len(kinds) == 1 else None


def reader_of(opts: PrepareOptions) -> SourceReader:
    """The reader of ``--source`` (`opts.source`)."""
    if opts.source not in SOURCES:
        raise OptionError(f"unknown --source {opts.source!r}; one of {', '.join(SOURCES)}")
    return SOURCES[opts.source]


def add_hint(exc: BadInputError, inputs: Sequence[str], opts: PrepareOptions) -> None:
    """Add a hint to `exc` (a refused input) when the inputs look like another ``--source`` kind."""
    other = detect_source(inputs)
    if other is not None and other != opts.source and len(exc.args) == 1:
        exc.args = (f"{exc.args[0]}; the input looks like --source {other}",)


def input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """Every file the run reads, in a stable order (for the request fingerprint); bad inputs are refused."""
    reader = reader_of(opts)
    try:
        return reader.input_files(inputs, opts)
    except BadInputError as exc:
        add_hint(exc, inputs, opts)
        raise


def source_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    """The catalog of `inputs` as `opts.source` reads them, before `scan` checks the bases; for
    FASTA and sharded Eden the sequences the `--tags` rule gave no tag are counted
    (`tags.note_untagged`: a warning, or an error with `--strict-tags`)."""
    reader = reader_of(opts)
    try:
        return reader.catalog(inputs, opts, cache_dir)
    except BadInputError as exc:
        add_hint(exc, inputs, opts)
        raise
