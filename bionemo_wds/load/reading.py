"""Shard bytes to decoded records: the first stages of every loader of prepared shards.

`read_records` reads tar members with `format.iter_members` (not webdataset's tarfile-based
expander: see there why) and hands ``(record, key, url)`` on, so later errors can name shard and
key; `decode_blocks` decodes them and holds each finished shard's window count against the
manifest. Damage of any kind is judged by one `ShardErrorPolicy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from webdataset.filters import pipelinefilter
from webdataset.gopen import gopen

from bionemo_wds.format import RECORD_SUFFIX, TarStreamError, WindowBlock, decode_record, iter_members
from bionemo_wds.load.shard_errors import ShardErrorPolicy

#: What `read_records` yields: record bytes, its key and its shard; ``(None, None, url)`` marks a
#: shard that could not be read to its end (under ``handler="warn"``).
RecordItem = tuple[bytes | None, str | None, str]


def _read_records(
    src: Iterable[dict[str, Any]], suffix: str = RECORD_SUFFIX, policy: ShardErrorPolicy | None = None
) -> Iterator[RecordItem]:
    """Shard URLs (webdataset's ``{"url": ...}`` dicts) -> ``(record, key, url)`` per member."""
    policy = policy or ShardErrorPolicy()
    ending = "." + suffix
    for item in src:
        url = item["url"]
        last = None
        try:
            with gopen(url, "rb") as stream:
                for name, data in iter_members(stream):
                    if name.endswith(ending):
                        last = name[: -len(ending)]
                        yield data, last, url
        except (OSError, TarStreamError) as exc:
            policy.damaged_shard(url, exc, last)
            yield None, None, url


def iter_blocks(src: Iterable[Any], policy: ShardErrorPolicy | None = None) -> Iterator[WindowBlock]:
    """Records (bytes or unpacked dicts, bare or as ``(record, key, url)``) -> decoded blocks.

    A record that cannot be decoded raises an error naming shard and key, or is skipped and counted
    under ``handler="warn"``. A shard read to its end must hold the windows the manifest lists
    (the policy knows them); the count lives in this generator, so an abandoned pass leaves
    nothing behind.
    """
    policy = policy or ShardErrorPolicy()
    current, count, cut = None, 0, set()
    for item in src:
        record, key, url = ((*item, None, None))[:3] if isinstance(item, tuple) else (item, None, None)
        if url != current:
            if current is not None and current not in cut:
                policy.check_count(current, count)
            current, count = url, 0
        if record is None:  # the reader's mark for a shard it could not finish
            cut.add(url)
            continue
        try:
            block = decode_record(record)
        except Exception as exc:
            policy.bad_record(url, key, exc)
            cut.add(url)  # reported once: its window count can no longer match the manifest
            continue
        count += len(block)
        yield block
    if current is not None and current not in cut:
        policy.check_count(current, count)


read_records = pipelinefilter(_read_records)
