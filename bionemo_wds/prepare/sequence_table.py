"""The sequence table `prepare` writes beside the manifest (`format.sequence_table`), from the catalog.

Every catalog row (a sequence, or a piece of one cut at N runs) with the split the plan gave it
(`ShardPlan.assignment`), its origin and length, its group (the cluster or group ``--group-by``
made, or its own id), tag and input file. Written on every run just before the manifest, and added
to a dataset prepared before the table existed when the same `prepare` command runs again
(`add_missing_table`: the shards are not touched).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from bionemo_wds.format.manifest import MANIFEST_NAME, dumps_manifest
from bionemo_wds.format.manifest_types import SEQUENCE_TABLE_KEY
from bionemo_wds.format.sequence_table import (
    NO_SPLIT,
    SEQUENCE_TABLE_NAME,
    SequenceRow,
    write_sequence_table,
)
from bionemo_wds.format.write_errors import writing_output
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.splits import SPLIT_NAMES
from bionemo_wds.storage.store import Store


def sequence_table_rows(catalog: Catalog, assignment: np.ndarray) -> Iterator[SequenceRow]:
    """The table's rows of `catalog`, in catalog order; `assignment`: each row's split code (-1: none)."""
    groups, group_names = catalog.groups, catalog.group_names
    files: dict[int, str] = {}
    codes = np.asarray(assignment).tolist()
    seqs, origins, lengths = catalog.seq.tolist(), catalog.origin.tolist(), catalog.lengths.tolist()
    group_of = None if groups is None or group_names is None else groups.tolist()
    for row, name in enumerate(catalog.names):
        seq = seqs[row]
        if seq not in files:
            files[seq] = catalog.source.file_of(int(seq))
        code = codes[row]
        group = name if group_of is None or group_names is None else group_names[group_of[row]]
        yield SequenceRow(
            SPLIT_NAMES[code] if code >= 0 else NO_SPLIT,
            name,
            int(origins[row]),
            int(lengths[row]),
            group,
            catalog.tags[row],
            files[seq],
        )


def write_table(store: Store, manifest: dict[str, Any], catalog: Catalog, assignment: np.ndarray) -> None:
    """Write the sequence table and list it in `manifest` (the JSON object about to be written); a
    file the OS refuses to write is an `errors.OutputWriteError` naming it."""
    with writing_output(store.url(SEQUENCE_TABLE_NAME), "the sequence table", store.root):
        manifest[SEQUENCE_TABLE_KEY] = write_sequence_table(store, sequence_table_rows(catalog, assignment))


def add_missing_table(store: Store, catalog: Catalog, assignment: np.ndarray) -> None:
    """Give a finished dataset without a sequence table (prepared before it existed) its table: write
    it, then the manifest as it was with the entry added (nothing else changes; no shard is opened)."""
    obj = store.read_json(MANIFEST_NAME)
    write_table(store, obj, catalog, assignment)
    store.write_text(MANIFEST_NAME, dumps_manifest(obj))
