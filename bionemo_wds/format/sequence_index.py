"""The sequence index of a sequence-layout split (format version 5): its sequences in storage order.

``prepare --layout sequences`` stores every base of a split once, as *pieces*: each sequence (a
catalog row: a FASTA record, or a piece of one cut at runs of N) cut every ``window_length`` bases
(the last piece shorter), the split's sequences in a seeded order, each one's pieces consecutive and
in order, records and shards cut from that run of pieces as in the windows layout. The split's
``<split>/sequence-index.npy`` (a NumPy ``.npy`` file, `numpy.load` reads it) has one row per
sequence in that storage order, of `SEQUENCE_INDEX_DTYPE`: its ``length`` in bases and
``tag_bytes``, the bytes of its control tag as stored in its records. Sequence ``s`` owns the
pieces ``[sum(pieces of rows before s), + ceil(length_s / window_length))`` of the split (global
piece ids, in shard order = record order = piece order), so a loader knows where every sequence
lies, and can cut windows of any length across records, from this file and the record index alone.

The manifest's split entry lists it as
``"sequence_index": {"path": "train/sequence-index.npy", "sequences": n, "bytes": ..., "sha256": ...}``.
`write_sequence_index` writes it (atomically, one object on an object store), `read_sequence_index`
reads it (None for a windows-layout dataset), checked against that entry and the split's bases.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bionemo_wds.errors import ManifestError
from bionemo_wds.format.manifest_types import SEQUENCE_ENTRY_KEYS, Manifest
from bionemo_wds.format.split_index_file import load_npy_rows
from bionemo_wds.storage.atomic import HashingWriter
from bionemo_wds.storage.store import Store

#: A split's sequence index file, in the split's folder.
SEQUENCE_INDEX_NAME = "sequence-index.npy"
#: One row per sequence, in storage order (little-endian, packed: 10 bytes).
SEQUENCE_INDEX_DTYPE = np.dtype([("length", "<u8"), ("tag_bytes", "<u2")])


def sequence_index_path(split: str) -> str:
    """Where a split's sequence index file lies, relative to the dataset root."""
    return f"{split}/{SEQUENCE_INDEX_NAME}"


def sequence_pieces(lengths: np.ndarray, window_length: int) -> np.ndarray:
    """Pieces per sequence of `lengths` bases: ``ceil(length / window_length)``, at least one."""
    return np.maximum(1, -(-np.asarray(lengths, dtype=np.int64) // int(window_length)))


def write_sequence_index(store: Store, split: str, rows: np.ndarray) -> dict[str, Any]:
    """Write `split`'s sequence index file (`rows` of `SEQUENCE_INDEX_DTYPE`, in storage order)
    atomically; returns the manifest's ``sequence_index`` entry for it. The bytes are exactly
    `numpy.save`'s of `rows`."""
    rel = sequence_index_path(split)
    rows = np.ascontiguousarray(rows, dtype=SEQUENCE_INDEX_DTYPE)
    header = {"descr": np.lib.format.dtype_to_descr(SEQUENCE_INDEX_DTYPE), "fortran_order": False, "shape": rows.shape}
    with store.write(rel) as fh:
        out = HashingWriter(fh)
        np.lib.format.write_array_header_1_0(out, header)
        out.write(rows.tobytes())
    return {"path": rel, "sequences": len(rows), "bytes": out.size, "sha256": out.sha.hexdigest()}


def read_sequence_index(
    store: Store | str | os.PathLike[str], manifest: Manifest, split: str, problems: list[str] | None = None
) -> np.ndarray | None:
    """`split`'s sequence index: rows of `SEQUENCE_INDEX_DTYPE` in storage order (memory-mapped when
    local; fetched whole and its sha256 checked when remote), None for a windows-layout dataset.

    A file missing, of another size or row count than listed, not of these rows, or whose lengths
    do not add up to the split's ``n_bases`` is a `ManifestError` naming it. `problems` (what
    `verify` passes) collects a differing sha256 (then checked for a local file too) instead of
    raising it.
    """
    if manifest.params.layout != "sequences":
        return None
    store = store if isinstance(store, Store) else Store(store)
    info = manifest.splits[split]
    entry = info.sequence_index
    if entry is None:
        raise ManifestError(
            f"{store.url('manifest.json')} is damaged: its {split} split has no complete sequence_index entry "
            f"({', '.join(SEQUENCE_ENTRY_KEYS)}); prepare the dataset again"
        )
    rel = str(entry.path)
    rows = load_npy_rows(
        store, rel, int(entry.bytes), str(entry.sha256), SEQUENCE_INDEX_DTYPE, problems, "sequence index", "sequence"
    )
    url = store.url(rel)
    if len(rows) != int(entry.sequences):
        raise ManifestError(
            f"{url} holds {len(rows)} sequences, but the manifest lists {entry.sequences} "
            "(sequence_index.sequences): the sequence index file disagrees with the manifest "
            "(run `bionemo-wds verify`, or prepare again)"
        )
    bases = int(rows["length"].sum(dtype=np.uint64))
    if info.n_bases is not None and bases != int(info.n_bases):
        raise ManifestError(
            f"{url}: its sequences hold {bases} bases, but the manifest's {split} split has {info.n_bases} "
            "(n_bases): the sequence index file disagrees with the manifest (run `bionemo-wds verify`, "
            "or prepare again)"
        )
    return rows
