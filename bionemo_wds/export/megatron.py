"""`export-megatron`: a prepared split as a Megatron indexed dataset (``PREFIX.bin`` / ``PREFIX.idx``).

Megatron-Bridge's Evo2 recipe trains from `megatron.core.datasets.indexed_dataset.IndexedDataset`
files, which bionemo's ``preprocess_evo2`` writes with byte-level token ids (a base is its ASCII
byte, as in our shards), dtype uint8, one document per sequence and EOD (id 0) after each. The
export writes the same kind of files with megatron-core's own `IndexedDatasetBuilder`, so what it
writes is what Megatron reads:

- **Documents**: a sequence-layout dataset (``prepare --layout sequences``) stores every base once,
  so each document is one whole sequence, its pieces joined in storage order, equal to the FASTA
  sequence. A windows-layout dataset stores overlapping windows (and with ``--tail drop`` leaves
  bases out), so its documents are its windows, one each: what it holds, not a sequence it lost.
- Bases are written as stored (soft-masked lower case kept unless prepared with ``--case upper``);
  control tags and reverse complements are not written into documents (our loaders add them at
  load time, seeded, where ``preprocess_evo2`` bakes them in).
- ``PREFIX.documents.tsv`` beside them names each document: index, sequence, first base, length.
- The three files are written under hidden temporary names and renamed when complete; the
  directory of the prefix is made when it does not exist (as ``prepare --out`` makes its directory).

``prepare --source megatron PREFIX`` reads the pair back, named by ``PREFIX.documents.tsv``
(`prepare/sources/megatron.py`), so an export per split followed by ``prepare --split-from-names``
gives back the splits, the sequence names and the bases.

Error messages name what is wrong, not the command: the command line puts
``bionemo-wds export-megatron: error:`` before them (`cli.exit_codes.report_error`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_wds.errors import BadInputError, OptionError
from bionemo_wds.format import read_manifest
from bionemo_wds.format.megatron_indexed import EOD_ID, indexed_dataset_module
from bionemo_wds.format.stored_records import stored_documents
from bionemo_wds.load.spans import is_sequence_layout
from bionemo_wds.storage.atomic import temporary_name
from bionemo_wds.storage.store import Store


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote."""

    bin_path: Path
    idx_path: Path
    names_path: Path
    documents: int
    tokens: int
    unit: str  # "sequence" or "window"


def export_megatron(
    dataset: str,
    out_prefix: str | os.PathLike[str],
    split: str = "train",
    append_eod: bool = True,
    storage_options: dict[str, Any] | None = None,
    progress: bool = True,
) -> ExportReport:
    """Write `split` of `dataset` as ``out_prefix.bin`` / ``.idx`` (uint8 byte-level tokens, one
    document per sequence or window: module docstring) and ``out_prefix.documents.tsv``."""
    if "://" in str(out_prefix):
        raise OptionError(
            f"OUT_PREFIX {out_prefix} is a URL: the export writes local files (Megatron's builder opens them)"
        )
    indexed_dataset = indexed_dataset_module("the export")
    store = Store(dataset, storage_options)
    manifest = read_manifest(store)
    if split not in manifest.splits:
        raise BadInputError(f"{store.root} has no {split!r} split; it has {', '.join(manifest.splits) or 'none'}")
    prefix = Path(out_prefix)
    made = make_directory(prefix.parent)
    final = [Path(indexed_dataset.get_bin_path(str(prefix))), Path(indexed_dataset.get_idx_path(str(prefix)))]
    final.append(prefix.with_name(prefix.name + ".documents.tsv"))
    temporary = [temporary_name(path) for path in final]
    sequences = is_sequence_layout(manifest.params)
    count = tokens = 0
    done = False
    try:
        builder = indexed_dataset.IndexedDatasetBuilder(str(temporary[0]), dtype=np.uint8)
        eod = np.array([EOD_ID] if append_eod else [], dtype=np.uint8)
        with open(temporary[2], "w") as names:
            names.write("document\tseq_id\tstart\tlength\n")
            for seq_id, start, bases in stored_documents(store, split, sequences, f"export {split}", progress):
                doc = np.concatenate([bases, eod])
                builder.add_document(doc, [len(doc)])
                names.write(f"{count}\t{seq_id}\t{start}\t{len(bases)}\n")
                count, tokens = count + 1, tokens + len(doc)
        builder.finalize(str(temporary[1]))
        for tmp, path in zip(temporary, final):
            os.replace(tmp, path)
        done = True
    finally:
        for tmp in temporary:
            tmp.unlink(missing_ok=True)
        for directory in made if not done else ():  # a failed export leaves no directory it made
            with contextlib.suppress(OSError):
                directory.rmdir()
    return ExportReport(final[0], final[1], final[2], count, tokens, "sequence" if sequences else "window")


def make_directory(directory: Path) -> list[Path]:
    """Make the directory the export writes into, and its parents; returns those it made, deepest
    first (removed again when the export fails). One that cannot be made (a file on the way, no
    permission) is a `BadInputError` naming it."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise BadInputError(f"cannot make the directory {directory}: a file is in the way ({exc.filename})") from exc
    except OSError as exc:
        raise BadInputError(f"cannot make the directory {directory}: {exc.strerror or exc}") from exc
    return missing
