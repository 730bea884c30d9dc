"""What `verify` checks of a sequence-layout split (format version 5): its sequence index file.

The file (`format.sequence_index`) must be the one the manifest lists (size, sha256, rows), its
lengths must add up to the split's bases, its pieces (``ceil(length / window_length)`` per
sequence) to the split's samples and to the window counts of the split's records, and, as each
record is read, the lengths of the pieces the record holds must be those the index gives the same
positions of the split's run of pieces. Every disagreement names the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bionemo_wds.errors import ManifestError
from bionemo_wds.format import Manifest, read_sequence_index, sequence_pieces
from bionemo_wds.format.record_index import RecordIndex
from bionemo_wds.storage.store import Store


@dataclass(frozen=True)
class PieceLengths:
    """The lengths of a split's pieces by position, from its sequence index (no array of every piece)."""

    url: str  # the sequence index file, for messages
    lengths: np.ndarray  # int64 per sequence, storage order
    first: np.ndarray  # int64: global id of each sequence's first piece, plus the total
    window: int

    def at(self, lo: int, hi: int) -> np.ndarray:
        """Lengths of the pieces at positions ``[lo, hi)`` of the split (those past the end: -1)."""
        ids = np.arange(lo, hi, dtype=np.int64)
        inside = ids < self.first[-1]
        row = np.searchsorted(self.first, ids[inside], side="right") - 1
        start = (ids[inside] - self.first[row]) * self.window
        out = np.full(len(ids), -1, dtype=np.int64)
        out[inside] = np.minimum(self.lengths[row] - start, self.window)
        return out

    def disagreement(self, key: str, lo: int, found: np.ndarray) -> str | None:
        """What is wrong with record `key`'s piece lengths `found`, its first piece at position `lo`."""
        expected = self.at(lo, lo + len(found))
        wrong = np.flatnonzero(expected != found)
        if not len(wrong):
            return None
        n = int(wrong[0])
        return (
            f"record {key}: piece {lo + n} of the split has {int(found[n])} bases, the sequence index "
            f"{self.url} says {int(expected[n])}"
        )


def check_sequence_index(
    store: Store,
    manifest: Manifest,
    split: str,
    indexes: Sequence[RecordIndex | None] | None,
    problems: list[str],
) -> PieceLengths | None:
    """Check `split`'s sequence index file (None and nothing to check for a windows-layout dataset);
    what disagrees goes to `problems`. Returns the piece lengths to check the records against, or
    None where the file cannot be used."""
    try:
        rows = read_sequence_index(store, manifest, split, problems)
    except ManifestError as exc:
        problems.append(f"{exc}; the {split} split's pieces are checked without it")
        return None
    if rows is None:
        return None
    info = manifest.splits[split]
    entry = info.sequence_index
    assert entry is not None  # read_sequence_index refuses a split without one
    url = store.url(str(entry.path))
    window = int(manifest.params.window_length)
    lengths = np.asarray(rows["length"], dtype=np.int64)
    pieces = sequence_pieces(lengths, window)
    total = int(pieces.sum())
    if total != info.n_samples:
        problems.append(
            f"{url}: its sequences make {total} pieces, the manifest's {split} split lists {info.n_samples}"
        )
    if indexes is not None and all(index is not None for index in indexes):
        held = sum(int(index.windows.sum(dtype=np.int64)) for index in indexes if index is not None)
        if held != total:
            problems.append(f"{url}: its sequences make {total} pieces, the {split} split's records hold {held}")
    return PieceLengths(url, lengths, np.concatenate([[0], np.cumsum(pieces)]).astype(np.int64), window)
