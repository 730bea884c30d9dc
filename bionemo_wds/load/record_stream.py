"""Shard bytes to decoded records: the first stages of every loader of prepared shards.

`read_records` reads tar members with `format.iter_members` (not webdataset's tarfile-based
expander: see there why) and hands ``(record, key, url)`` on, so later errors can name shard and
key; `iter_blocks` decodes them, checks each record's crc32 and window count against the
manifest's record index (format version 3; by the record's position in its shard, so the check
costs one `record_crc32` of the record's bytes and a list lookup) and holds each finished shard's
window count against the manifest. Damage of any kind is judged by one `ShardErrorPolicy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from webdataset.filters import pipelinefilter
from webdataset.gopen import gopen

from bionemo_wds.errors import refusal_named
from bionemo_wds.format import RECORD_SUFFIX, TarStreamError, WindowBlock, decode_record, iter_members, record_crc32
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
            with refusal_named(url), gopen(url, "rb") as stream:  # the system refusing the file is not damage
                for name, data in iter_members(stream):
                    if name.endswith(ending):
                        last = name[: -len(ending)]
                        yield data, last, url
        except (OSError, TarStreamError) as exc:
            policy.damaged_shard(url, exc, last)
            yield None, None, url


def iter_blocks(src: Iterable[Any], policy: ShardErrorPolicy | None = None) -> Iterator[WindowBlock]:
    """Records (bytes or unpacked dicts, bare or as ``(record, key, url)``) -> decoded blocks.

    A record that cannot be decoded, or whose crc32 or window count differs from the record index
    the policy holds for its shard (the n-th record of a shard against the index's n-th entry),
    raises an error naming shard and key, or is skipped and counted under ``handler="warn"``. A
    shard read to its end must hold the windows the manifest lists (the policy knows them); the
    counts live in this generator, so an abandoned pass leaves nothing behind.
    """
    policy = policy or ShardErrorPolicy()
    current, count, cut = None, 0, set()
    # the record's number in its shard; the shard's index columns (None: no index, no checks)
    position, crcs, windows = 0, None, None
    for item in src:
        record, key, url = ((*item, None, None))[:3] if isinstance(item, tuple) else (item, None, None)
        if url != current:
            if current is not None and current not in cut:
                policy.check_count(current, count)
            current, count, position = url, 0, 0
            checks = policy.records.get(url) if url is not None else None
            crcs, windows = (checks.crc32.tolist(), checks.windows.tolist()) if checks is not None else (None, None)
        if record is None:  # the reader's mark for a shard it could not finish
            cut.add(url)
            continue
        n, position = position, position + 1
        try:
            block = decode_record(record)
        except Exception as exc:
            policy.bad_record(url, key, exc)
            cut.add(url)  # reported once: its window count can no longer match the manifest
            continue
        if crcs is not None and windows is not None and isinstance(record, bytes):
            # a failing record is reported once and skipped (under "warn"); the shard's window
            # count can then no longer match the manifest, so it is not reported again
            if n >= len(crcs):
                policy.unindexed_record(url, key, n, len(crcs))
                cut.add(url)
                continue
            crc = record_crc32(record)
            if crc != crcs[n]:
                policy.bad_checksum(url, key, crc, crcs[n])
                cut.add(url)
                continue
            if len(block) != windows[n]:
                policy.bad_window_count(url, key, len(block), windows[n])
                cut.add(url)
                continue
        count += len(block)
        yield block
    if current is not None and current not in cut:
        policy.check_count(current, count)


read_records = pipelinefilter(_read_records)
