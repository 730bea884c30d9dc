"""Whole remote objects as streams, for webdataset's own shard reader (the compat `WebDataModule`).

webdataset opens each shard URL with its ``gopen``, which dispatches on the URL's scheme through
its ``gopen_schemes`` table (its documented extension point); it knows http(s) (through curl) but
not s3. `register_webdataset_opener` adds fsspec protocols it lacks, opened with retries.
"""

from __future__ import annotations

import importlib
from typing import IO, Any

from bionemo_wds.storage.location import filesystem, protocol_of
from bionemo_wds.storage.retry import RetryPolicy, retrying


def open_url(url: str, mode: str = "rb", bufsize: int = 8192, **kwargs: Any) -> IO[bytes]:
    """A remote object opened for reading (webdataset's gopen handler signature)."""
    if mode != "rb":
        raise ValueError(f"{url}: only reading is supported here, not mode {mode!r}")
    fs = filesystem(url)
    return retrying(lambda: fs.open(url, "rb", block_size=8 << 20, cache_type="readahead"), url, RetryPolicy())


def register_webdataset_opener(url: str) -> None:
    """Let webdataset open URLs of `url`'s protocol, unless it already can."""
    protocol = protocol_of(url)
    if not protocol:
        return
    gopen = importlib.import_module("webdataset.gopen")  # the module (the package exports a function of that name)
    gopen.gopen_schemes.setdefault(protocol, open_url)
