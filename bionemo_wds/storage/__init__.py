"""Where data lives and how its bytes are fetched: local paths and fsspec URLs (s3://, http(s)://).

- `location`: checking a location (`check_location`), URLs vs paths, opening a filesystem;
- `store`: `Store`, a dataset root's files (whole reads, ranges, listings, atomic writes);
- `shards`: byte ranges of a split's shards for the planned reader (`LocalShards`, `RemoteShards`);
- `open_files`: `OPEN_FILES`, the process's bounded table of open local shard files (LRU);
- `mapped`: `load_npy`, read-only memory maps of index files that keep no descriptor open;
- `cache`: `RangeCache`, the node-local cache of remote ranges (bounded, LRU, safe to share);
- `request_slots`: `RequestSlots`, the bound on requests in flight (per node through the cache directory);
- `retry`: `RetryPolicy`, `retrying` (jittered waits after throttling answers), `RemoteReadError`;
- `stats`: `StorageStats`, the counters of bytes, requests, cache hits and misses, retries, throttling;
- `atomic`: `atomic_write` / `atomic_path` (every file this package writes goes through them) and hashing;
- `streams`: whole remote objects as streams for webdataset's reader (the compat modules).

Modules are imported by name (nothing here imports them). The format package sits above this
one: nothing in storage imports format.
"""

from __future__ import annotations

from bionemo_wds.storage.location import check_location, is_url, join, local_path

__all__ = ["check_location", "is_url", "join", "list_shards"]


def list_shards(directory: str, prefix: str, storage_options: dict | None = None) -> list[str]:
    """Sorted shard paths or URLs ``{directory}/{prefix}-*.tar`` (a listing, then a name filter)."""
    import fnmatch
    import glob

    directory = local_path(check_location(directory))
    if not is_url(directory):
        return sorted(glob.glob(join(directory, f"{prefix}-*.tar")))
    from bionemo_wds.storage.store import Store

    store = Store(directory, storage_options)
    sizes = store.sizes("")
    names = list(sizes) if sizes is not None else store.names("")
    return sorted(join(directory, name) for name in names if fnmatch.fnmatch(name, f"{prefix}-*.tar"))
