"""The sequence layout's part of a plan (``prepare --layout sequences``, format version 5).

A sequence-layout split stores its sequences (catalog rows) in a seeded order, each cut into pieces
of the window length (`windows.PIECE`), the pieces in that order: `sequence_order` gives the order,
`sequence_index_rows` what the split's ``sequence-index.npy`` holds (`format.sequence_index`), and
`check_layout` refuses a source whose windows are fixed, which the layout cannot honour.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.core.permutation import SeededPermutation
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import SEQUENCE_INDEX_DTYPE
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.options import PrepareOptions
from bionemo_wds.prepare.splits import SPLIT_NAMES
from bionemo_wds.prepare.windows import OrderedWindows

#: The largest control tag the sequence index can describe (its ``tag_bytes`` column is 16 bits).
MAX_INDEXED_TAG_BYTES = int(np.iinfo(SEQUENCE_INDEX_DTYPE["tag_bytes"]).max)


def check_layout(catalog: Catalog, opts: PrepareOptions) -> None:
    """Refuse the sequence layout for a source that fixed its windows (Eden window databases)."""
    if opts.layout == "sequences" and catalog.windows:
        raise BadInputError(
            f"--layout sequences stores whole sequences, but the {catalog.source.kind} source fixes the windows of "
            f"the {', '.join(catalog.windows)} split(s) (a window database): use --layout windows"
        )


def sequence_order(seed: int, split: str, n_rows: int) -> np.ndarray:
    """The seeded order of a sequence-layout split's `n_rows` sequences (positions into its rows
    in catalog order): shards mix sequences, each sequence's pieces stay together."""
    return SeededPermutation(n_rows, seed, "sequence_order", SPLIT_NAMES.index(split)).all()


def sequence_index_rows(catalog: Catalog, windows: OrderedWindows) -> np.ndarray:
    """The sequence index of a sequence-layout split (`format.sequence_index`): per row of
    `windows`, in storage order, its length and the bytes of its control tag as records store it."""
    out = np.empty(len(windows.rows), dtype=SEQUENCE_INDEX_DTYPE)
    out["length"] = windows.lengths
    tag_bytes = {tag: len(tag.encode()) for tag in set(catalog.tags)}
    out["tag_bytes"] = np.fromiter(
        (tag_bytes[catalog.tags[row]] for row in windows.rows.tolist()), dtype=np.int64, count=len(windows.rows)
    )
    return out
