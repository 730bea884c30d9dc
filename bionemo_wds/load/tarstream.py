"""The genomic hot path's shard reader stage: shard URLs in, ``(record, key, url)`` out.

Members are read by `format.iter_members` rather than webdataset's tarfile-based expander (see
there why); damage is reported through the `ShardErrorPolicy`, naming shard and last good key.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from webdataset.filters import pipelinefilter
from webdataset.gopen import gopen

from bionemo_wds.format import TarStreamError, iter_members
from bionemo_wds.load.shard_errors import ShardErrorPolicy

def _read_records(src: Iterable[dict[str, Any]], suffix: str = "msgpack",
                  policy: ShardErrorPolicy | None = None) -> Iterator[tuple[bytes | None, str | None, str]]:
    """Shard URLs (webdataset's ``{"url": ...}`` dicts) -> ``(record, key, url)`` per member.

    A shard cut short under ``handler="warn"`` is followed by ``(None, None, url)``, so the decode
    stage knows not to hold its window count against the manifest as well.
    """
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


read_records = pipelinefilter(_read_records)
