"""A split's records in the order its shards store them, decoded, for tools that read a whole split.

`show` (a split's first windows as text), `export-megatron` (every window or sequence as a
document) and `contains` / `leakage` (every sequence's k-mers) read shards front to back through
`storage.Store` (a directory or a URL alike) with the format's own tar reader and record decoder;
a damaged shard is named here as the loaders name it (`TruncatedShardError`, `CorruptShardError`:
a user error, exit 2). Only the bytes up to the last record taken are read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from bionemo_wds.errors import CorruptShardError, TruncatedShardError
from bionemo_wds.format.manifest import read_manifest
from bionemo_wds.format.manifest_types import ShardInfo
from bionemo_wds.format.records import RECORD_SUFFIX, WindowBlock, decode_record
from bionemo_wds.format.tar import TarStreamError, iter_members


def stored_records(store: Any, shards: Sequence[ShardInfo]) -> Iterator[tuple[ShardInfo, str, WindowBlock]]:
    """(shard, record name, decoded record) of every record of `shards`, in stored order."""
    ending = f".{RECORD_SUFFIX}"
    for shard in shards:
        url = store.url(shard.path)
        with store.open(shard.path) as stream:
            for name, data in members(stream, url):
                if not name.endswith(ending):
                    continue
                try:
                    block = decode_record(data)
                except ValueError as exc:
                    raise CorruptShardError(f"shard {url}: record {name} cannot be decoded: {exc}") from exc
                yield shard, name[: -len(ending)], block


def members(stream: Any, url: str) -> Iterator[tuple[str, bytes]]:
    """`iter_members`, a damaged tar named as the loaders name it."""
    try:
        yield from iter_members(stream)
    except TarStreamError as exc:
        raise TruncatedShardError(f"shard {url} is truncated or corrupt: {exc}") from exc


def stored_documents(
    store: Any, split: str, sequences: bool, desc: str, progress: bool
) -> Iterator[tuple[str, int, np.ndarray]]:
    """(sequence, first base, bases) of every document of `split`, in stored order: whole sequences
    (their pieces joined) when `sequences`, else every stored window (`joined_documents`)."""
    shards = read_manifest(store).splits[split].shards
    with tqdm(total=len(shards), desc=desc, unit="shard", disable=not progress) as bar:
        yield from joined_documents(counted(stored_records(store, shards), bar), sequences)


def counted(
    records: Iterable[tuple[ShardInfo, str, WindowBlock]], bar: tqdm
) -> Iterator[tuple[ShardInfo, str, WindowBlock]]:
    """`records` as they are, `bar` moved on by one as each shard's last record has gone by."""
    last = None
    for record in records:
        if record[0] is not last:
            bar.update(last is not None)
            last = record[0]
        yield record
    bar.update(last is not None)


def joined_documents(
    records: Iterable[tuple[ShardInfo, str, WindowBlock]], sequences: bool
) -> Iterator[tuple[str, int, np.ndarray]]:
    """(sequence, first base, bases) of the documents of `records` (`stored_records`' output) in
    stored order: every window, or with `sequences` each run of a sequence's consecutive pieces,
    joined (a new name, or a piece at base 0, opens a document)."""
    current: tuple[str, int] | None = None
    parts: list[np.ndarray] = []
    for _, _, block in records:
        for i in range(len(block)):
            seq_id, start, bases = block.seq_id[i], int(block.start[i]), block.bases(i)
            if not sequences:
                yield seq_id, start, bases
                continue
            if current is not None and (seq_id != current[0] or start == 0):
                yield current[0], current[1], np.concatenate(parts)
                current, parts = None, []
            if current is None:
                current = (seq_id, start)
            parts.append(bases)
    if current is not None:
        yield current[0], current[1], np.concatenate(parts)
