"""The catalog: what every input sequence is and where its bases live, without its bases.

Built by a source (FASTA today) from its index; everything downstream (splits, windows, shard
plan, writers) works from these arrays. The byte layout columns are those of a samtools ``.fai``
so a writer can read any window with one positioned read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Catalog:
    """Parallel per-sequence arrays plus the files they come from."""

    files: list[str]  # readable uncompressed FASTA per input (a cached copy for gzip inputs)
    origins: list[str]  # the input path as the user gave it, for messages and the manifest
    names: list[str]
    tags: list[str]
    file_index: np.ndarray  # int64, index into `files`
    lengths: np.ndarray  # int64 bases
    offsets: np.ndarray  # int64 byte offset of the first base
    line_bases: np.ndarray  # int64 bases per full line
    line_bytes: np.ndarray  # int64 bytes per full line, newline included
    skipped: list[dict] = field(default_factory=list)  # sequences left out, with the reason

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_bases(self) -> int:
        return int(self.lengths.sum())

    def max_tag_bytes(self) -> int:
        return max((len(t.encode("utf-8")) for t in self.tags), default=0)
