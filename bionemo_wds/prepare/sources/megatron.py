"""Megatron indexed datasets as input: ``prepare --source megatron PREFIX ...`` (``PREFIX.bin`` + ``.idx``).

bionemo's ``preprocess_evo2`` writes Evo2's training data as Megatron indexed datasets: byte-level
token ids (a base is its ASCII byte), one document per FASTA record, an end-of-document id 0 after
each. It can also bake in what bionemo-wds does at load, seeded and afresh every epoch: a lineage
tag ``|d__...;s__...|`` at the start of a document and again every ``prompt_spacer_length`` tokens,
and a reverse-complement copy of each record as the next document. Read as bases, those would be
trained as sequence; here they are found and reported instead:

- **documents** become catalog sequences; the trailing end-of-document id (0) is dropped; any
  other id that is not a base is left to `prepare.scan`, which refuses it (or skips the document,
  ``--on-invalid``) like a bad FASTA base;
- **names**: with ``PREFIX.documents.tsv`` beside the pair (``export-megatron`` writes it: document,
  seq_id, start, length), each document is named by it: by its ``seq_id`` when every document of the
  file is a whole sequence (each seq_id once, at start 0: a sequence-layout export), else by
  ``seq_id:start`` (a windows-layout export, whose documents are overlapping windows, several of one
  sequence); the file must agree with the ``.idx`` (as many rows as documents, each row's length that
  document's ids, end-of-document id not counted), else it is refused naming it. Without it a document
  is named ``<prefix name>/<document>``. A name given twice (two inputs) is refused;
- **embedded lineage tags**: every occurrence of the document's first ``|d__...|`` tag is taken
  out of its bases and the tag becomes the sequence's control tag (the loader puts it between BOS
  and SEP of every window, and drops its ranks with ``tag_dropout``);
- **reverse-complement copies**: a document equal to the reverse complement of the one before it
  is left out (``skipped`` in the manifest, with the document it copies): the loader reverse-
  complements at load (``rc_prob``).

The counts go to the manifest (``params.source``). The files are read with megatron-core's own
`IndexedDataset` (the ``megatron`` extra; megatron-core installs with ``--no-deps``); without it
the source says what to install. Token dtypes uint8 and uint16 are read (ids above 255 are refused
naming the document); others are refused naming the file, as is a ``.bin`` whose size is not what
its ``.idx`` describes.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from bionemo_wds.core.tokenizer import COMPLEMENT
from bionemo_wds.errors import BadInputError, SourceError
from bionemo_wds.format.megatron_indexed import EOD_ID, indexed_dataset_module
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.tags import strip_embedded_tag

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

#: The file beside a pair that names its documents (`export.megatron` writes it), and its header.
NAMES_SUFFIX = ".documents.tsv"
NAMES_HEADER = ("document", "seq_id", "start", "length")
#: Token dtypes a document may be stored in.
DTYPES = (np.uint8, np.uint16)


def indexed_dataset_class() -> Any:
    """megatron-core's `IndexedDataset`, or an error saying how to install it."""
    return indexed_dataset_module("--source megatron").IndexedDataset


def prefix_of(given: str) -> Path:
    """The path prefix of an input given as ``PREFIX``, ``PREFIX.bin`` or ``PREFIX.idx``."""
    path = Path(given)
    return path.with_suffix("") if path.suffix in (".bin", ".idx") else path


def megatron_input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """Both files of every input, checked to exist in pairs."""
    if not inputs:
        raise BadInputError("--source megatron needs at least one PREFIX (of PREFIX.bin and PREFIX.idx)")
    files = []
    for given in inputs:
        prefix = prefix_of(given)
        bin_path, idx_path = Path(f"{prefix}.bin"), Path(f"{prefix}.idx")
        if not bin_path.is_file() and not idx_path.is_file():
            raise BadInputError(f"{given}: neither {bin_path} nor {idx_path} exists (a Megatron indexed dataset)")
        for path, other in ((bin_path, idx_path), (idx_path, bin_path)):
            if not path.is_file():
                raise BadInputError(f"{other} has no {path.name} beside it: a Megatron indexed dataset is a pair")
        files += [idx_path, bin_path]
        if names_path(str(prefix)).is_file():  # it names the documents: a changed one is a new request
            files.append(names_path(str(prefix)))
    return files


def names_path(prefix: str) -> Path:
    """``PREFIX.documents.tsv``: where `export-megatron` names the documents of ``PREFIX.bin``."""
    return Path(f"{prefix}{NAMES_SUFFIX}")


@dataclass(frozen=True)
class DocumentNames:
    """What ``PREFIX.documents.tsv`` says of each document: its name here and its length in bases."""

    path: Path
    names: list[str]
    lengths: list[int]


def read_document_names(prefix: str) -> DocumentNames | None:
    """The documents' names from ``PREFIX.documents.tsv`` (module docstring: ``seq_id``, or
    ``seq_id:start`` for windows), or None when there is no such file; a malformed file is refused
    naming it and the line."""
    path = names_path(prefix)
    if not path.is_file():
        return None
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path} cannot be read: {exc}") from exc
    if not lines or tuple(lines[0].split("\t")) != NAMES_HEADER:
        raise SourceError(
            f"{path}: the first line must be the header {'<TAB>'.join(NAMES_HEADER)} (as export-megatron writes it)"
        )
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        try:
            document, start, length = int(fields[0]), int(fields[2]), int(fields[3])
            ok = len(fields) == 4 and fields[1] != "" and document == number - 2 and start >= 0 and length >= 0
        except (ValueError, IndexError):
            ok = False
        if not ok:
            raise SourceError(
                f"{path} line {number}: expected {number - 2}<TAB>SEQ_ID<TAB>START<TAB>LENGTH (document "
                f"{number - 2}), got {line!r}"
            )
        rows.append((fields[1], start, length))
    whole = all(start == 0 for _, start, _ in rows) and len({seq for seq, _, _ in rows}) == len(rows)
    names = [seq if whole else f"{seq}:{start}" for seq, start, _ in rows]
    if not whole and len(set(names)) < len(names):
        twice = next(name for name, n in Counter(names).items() if n > 1)
        raise SourceError(f"{path} names two documents {twice} (the same sequence and first base)")
    return DocumentNames(path, names, [length for _, _, length in rows])


def check_names(names: DocumentNames | None, documents: int, prefix: str) -> None:
    """Refuse a ``documents.tsv`` whose rows are not the ``.idx``'s documents, one each."""
    if names is not None and len(names.names) != documents:
        raise SourceError(
            f"{names.path} names {len(names.names)} documents but {prefix}.idx holds {documents}: the files are "
            "not one export's (remove the .documents.tsv to name documents <prefix name>/<document>)"
        )


def check_length(names: DocumentNames | None, document: int, ids: np.ndarray, prefix: str) -> None:
    """Refuse a ``documents.tsv`` row whose length is not its document's (end-of-document id not counted)."""
    if names is not None and names.lengths[document] != len(ids):
        raise SourceError(
            f"{names.path}: document {document} is {names.lengths[document]} bases long by it but {len(ids)} in "
            f"{prefix}.bin: the files are not one export's"
        )


@dataclass
class MegatronSource:
    """Documents of indexed datasets: per catalog sequence, its file and document, and the tag taken out."""

    prefixes: list[str]
    file: np.ndarray  # int64 per sequence: index into `prefixes`
    document: np.ndarray  # int64 per sequence: document number in its file
    embedded: list[str]  # per sequence: the tag taken out of its bases ("" for none)
    kind: str = "megatron"

    def reader(self) -> MegatronReader:
        return MegatronReader(self)

    def describe(self, seq: int) -> str:
        return f"document {int(self.document[seq])} of {self.prefixes[int(self.file[seq])]}"

    def file_of(self, seq: int) -> str:
        return f"{self.prefixes[int(self.file[seq])]}.bin"


def document_ids(dataset: Any, document: int) -> np.ndarray:
    """A document's token ids: its sequences joined, the trailing EOD dropped."""
    lo, hi = int(dataset.document_indices[document]), int(dataset.document_indices[document + 1])
    ids = np.concatenate([np.asarray(dataset[i]) for i in range(lo, hi)]) if hi > lo else np.empty(0, np.uint8)
    return ids[:-1] if len(ids) and ids[-1] == EOD_ID else ids


def as_bases(ids: np.ndarray, tag: str) -> bytes:
    """Token ids (every one below 256: the catalog checked) as bases, every occurrence of `tag` taken out."""
    data = ids.astype(np.uint8).tobytes()
    return data.replace(tag.encode(), b"") if tag else data


class MegatronReader:
    """`BaseReader` of a `MegatronSource`: opens each file in the process that reads, keeps the
    current document's bases (a sequence's windows and `scan`'s chunks read it once)."""

    def __init__(self, source: MegatronSource) -> None:
        self.source = source
        self.datasets: dict[int, Any] = {}
        self.seq, self.bases = -1, b""

    def read(self, seq: int, start: int, end: int, table: bytes | None = None) -> bytes:
        if seq != self.seq:
            f = int(self.source.file[seq])
            if f not in self.datasets:
                self.datasets[f] = indexed_dataset_class()(self.source.prefixes[f])
            ids = document_ids(self.datasets[f], int(self.source.document[seq]))
            self.bases = as_bases(ids, self.source.embedded[seq])
            self.seq = seq
        span = self.bases[start:end]
        return span if table is None else span.translate(table)

    def close(self) -> None:
        self.datasets, self.seq, self.bases = {}, -1, b""


def is_reverse_complement(bases: bytes, previous: bytes | None) -> bool:
    """Whether `bases` is the reverse complement of `previous` (case kept, IUPAC codes)."""
    if previous is None or len(previous) != len(bases) or not bases:
        return False
    return COMPLEMENT[np.frombuffer(previous, dtype=np.uint8)[::-1]].tobytes() == bases


def catalog_megatron(inputs: Sequence[str], opts: PrepareOptions) -> Catalog:
    """One catalog sequence per document of every input (module docstring): tags found in the bases
    become control tags, reverse-complement copies are left out, both counted in the notes."""
    indexed = indexed_dataset_class()
    prefixes = [str(prefix_of(given)) for given in inputs]
    names, tags, lengths, files, documents, embedded, skipped = [], [], [], [], [], [], []
    counts = {"documents": 0, "tagged": 0, "reverse_complement_copies": 0, "empty": 0}
    seen: dict[str, str] = {}  # name -> the input that gave it
    for f, prefix in enumerate(prefixes):
        dataset = indexed(prefix)
        dtype = np.dtype(dataset.index.dtype)
        if dtype not in [np.dtype(d) for d in DTYPES]:
            raise SourceError(
                f"{prefix}.idx stores tokens as {dtype}: --source megatron reads uint8 or uint16 token ids"
            )
        check_pair(dataset, prefix, dtype)
        n_docs = len(dataset.document_indices) - 1
        named = read_document_names(prefix)
        check_names(named, n_docs, prefix)
        previous: bytes | None = None
        for d in tqdm(range(n_docs), desc=f"catalog {Path(prefix).name}", unit="doc", disable=not opts.progress):
            name = f"{Path(prefix).name}/{d}" if named is None else named.names[d]
            if seen.setdefault(name, prefix) != prefix:
                raise SourceError(
                    f"document name {name!r} is given by both {seen[name]} and {prefix}; names must be unique"
                )
            ids = document_ids(dataset, d)
            check_length(named, d, ids, prefix)
            if dtype != np.uint8:  # ids of 256 and more are not bytes
                check_ids(ids, d, prefix)
            tag, bases = strip_embedded_tag(as_bases(ids, ""))
            counts["documents"] += 1
            if is_reverse_complement(bases, previous):
                counts["reverse_complement_copies"] += 1
                reason = (
                    f"document {d} of {prefix} is the reverse complement of document {d - 1} (preprocess_evo2's "
                    "embed_reverse_complement): left out, the loader reverse-complements at load (rc_prob)"
                )
                skipped.append({"seq_id": name, "file": f"{prefix}.bin", "reason": reason})
                previous = None
                continue
            previous = bases
            if not bases:
                counts["empty"] += 1
                reason = f"document {d} of {prefix} holds no bases (after its end-of-document id and tags)"
                if opts.on_invalid != "skip":
                    raise SourceError(f"{reason}; use --on-invalid skip to leave such documents out")
                skipped.append({"seq_id": name, "file": f"{prefix}.bin", "reason": reason})
                continue
            counts["tagged"] += bool(tag)
            names.append(name)
            tags.append(tag)
            lengths.append(len(bases))
            files.append(f)
            documents.append(d)
            embedded.append(tag)
    if counts["tagged"] and opts.tags != "none":
        warnings.warn(
            f"{counts['tagged']} documents carry lineage tags in their tokens: taken out of the bases and used as "
            f"their control tags (--tags {opts.tags} does not apply to --source megatron)",
            stacklevel=2,
        )
    source = MegatronSource(prefixes, np.asarray(files, np.int64), np.asarray(documents, np.int64), embedded)
    catalog = Catalog(source, names, tags, np.asarray(lengths, dtype=np.int64))
    catalog.skipped.extend(skipped)
    catalog.notes.update(counts)
    return catalog


def check_pair(dataset: Any, prefix: str, dtype: np.dtype) -> None:
    """Refuse a ``.bin`` whose size is not what its ``.idx`` describes (files of two datasets)."""
    index = dataset.index
    described = 0
    if len(index.sequence_lengths):
        described = int(index.sequence_pointers[-1]) + int(index.sequence_lengths[-1]) * dtype.itemsize
    held = Path(f"{prefix}.bin").stat().st_size
    if held != described:
        raise SourceError(
            f"{prefix}.bin holds {held} bytes but {prefix}.idx describes {described}: the two files are not one "
            "indexed dataset's pair"
        )


def check_ids(ids: np.ndarray, document: int, prefix: str) -> None:
    """Refuse a document holding a token id that is not a byte, naming it and the position."""
    bad = np.flatnonzero(ids > 255)
    if len(bad):
        at = int(bad[0])
        raise SourceError(
            f"document {document} of {prefix} has token id {int(ids[at])} at position {at}: ids must be 0-255, "
            "a base's byte (byte-level tokens, as preprocess_evo2 writes them)"
        )
