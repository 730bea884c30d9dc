"""A split's records in the order its shards store them, decoded, for tools that read a whole split.

`show` (a split's first windows as text) and `export-megatron` (every window or sequence as a
document) read shards front to back through `storage.Store` (a directory or a URL alike) with the
format's own tar reader and record decoder; a damaged shard is named here as the loaders name it
(`TruncatedShardError`, `CorruptShardError`: a user error, exit 2). Only the bytes up to the last
record taken are read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from bionemo_wds.errors import CorruptShardError, TruncatedShardError
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
