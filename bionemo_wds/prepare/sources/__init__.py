"""Input readers. Each turns its inputs into a `Catalog` (`prepare.catalog`) whose `Source` can read
any window's bases; everything after (scan, groups, split, windows, shards) is the same for all.

- `fasta`: FASTA files or directories (plain, gzip, bgzip), indexed with pyfaidx.
- `sharded_eden`: Evo2's sharded-Eden layout, one SQLite database per sample, with Parquet split
  lists and precomputed window databases.
- `hdf5`: pre-tokenized rows of an HDF5 dataset (the `[h5]` extra).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bionemo_wds.errors import OptionError
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


def input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """Every file the run reads, in a stable order (for the request fingerprint); bad inputs are refused."""
    if opts.source == "fasta":
        from bionemo_wds.prepare.sources.fasta import find_fasta_files

        return find_fasta_files(inputs)
    if opts.source == "sharded-eden":
        from bionemo_wds.prepare.sources.sharded_eden import eden_input_files

        return eden_input_files(inputs, opts)
    if opts.source == "hdf5":
        from bionemo_wds.prepare.sources.hdf5 import hdf5_input_files

        return hdf5_input_files(inputs, opts)
    raise OptionError(f"unknown --source {opts.source!r}")


def source_catalog(inputs: Sequence[str], opts: PrepareOptions, cache_dir: Path) -> Catalog:
    """The catalog of `inputs` as `opts.source` reads them, before `scan` checks the bases; the
    sequences the `--tags` rule gave no tag are counted (`tags.note_untagged`: a warning, or an
    error with `--strict-tags`)."""
    if opts.source == "fasta":
        from bionemo_wds.prepare.sources.fasta import index_fasta

        return note_untagged(index_fasta(inputs, cache_dir, opts.tags, opts.progress), opts.tags, opts.strict_tags)
    if opts.source == "sharded-eden":
        from bionemo_wds.prepare.sources.sharded_eden import catalog_sharded_eden

        return note_untagged(catalog_sharded_eden(inputs, opts), opts.tags, opts.strict_tags)
    if opts.source == "hdf5":
        from bionemo_wds.prepare.sources.hdf5 import catalog_hdf5

        return catalog_hdf5(inputs, opts)
    raise OptionError(f"unknown --source {opts.source!r}")
