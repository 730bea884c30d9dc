"""A dataset's root, local or remote: the one interface readers and `prepare` use for its files.

`Store(root)` takes a local directory or any URL `check_location` accepts and offers what the
package needs of a dataset: whole reads (the manifest), byte ranges (records), streams (verify),
listings with sizes (presence checks; one LIST per directory, never a glob on a bucket), atomic
writes (`storage.atomic`) and removal. Remote reads retry transient failures (`retry`), are
counted (`stats`) and each holds one of the node's request slots while in flight (`request_slots`;
a stream holds one for its opening request, and reads on one request at a time). The fsspec
filesystem is opened lazily in each process, so a store can be handed to loader workers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from bionemo_wds.errors import refusal_named
from bionemo_wds.storage.atomic import atomic_write
from bionemo_wds.storage.location import check_location, filesystem, is_url, join, local_path
from bionemo_wds.storage.request_slots import RequestSlots
from bionemo_wds.storage.retry import RangeIgnored, RemoteReadError, RetryPolicy, ShortRead, retrying
from bionemo_wds.storage.stats import StorageStats


def local_listing(folder: str) -> tuple[list[str], list[int]]:
    """(names, sizes) of the files directly in a local `folder`, in listing order: the names from one
    `os.scandir`, then a `stat` of each relative to the folder's descriptor where the platform has
    ``dir_fd`` (measured 2026-11-28 over 100,000 shards on our 2-core VM: 0.43 s of stats against
    0.52 s for `DirEntry.stat`, which makes an object per entry; stats from threads were slower
    there, 0.63-1.52 s)."""
    names = [entry.name for entry in os.scandir(folder) if entry.is_file()]
    if os.stat not in os.supports_dir_fd:
        return names, [os.stat(os.path.join(folder, name)).st_size for name in names]
    fd = os.open(folder, os.O_RDONLY)
    try:
        return names, [os.stat(name, dir_fd=fd).st_size for name in names]
    finally:
        os.close(fd)


class Store:
    """Files under one root (a directory or a URL prefix), addressed by paths relative to it.

    `slots` bounds the remote requests in flight: the node's (`RequestSlots` of a cache directory)
    or, by default, this process's (``$BIONEMO_WDS_MAX_REQUESTS``, else 64, per process)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        storage_options: dict[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        stats: StorageStats | None = None,
        write: bool = False,
        what: str = "location",
        slots: RequestSlots | None = None,
    ):
        self.root = local_path(check_location(root, write=write, what=what)).rstrip("/") or "/"
        self.remote = is_url(self.root)
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        self.stats = stats
        self.slots = slots or RequestSlots()
        self.writing = write
        self._fs: tuple[int, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None}  # clients do not cross processes

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (remote roots only), opened once per process."""
        if self._fs is None or self._fs[0] != os.getpid():
            self._fs = (os.getpid(), filesystem(self.root, self.storage_options, own_retries=not self.writing))
        return self._fs[1]

    def url(self, rel: str = "") -> str:
        """The full path or URL of `rel`."""
        return join(self.root, rel) if rel else self.root

    def urls(self, rels: Sequence[str]) -> list[str]:
        """`url` of each of `rels` (every shard of a split: a string join each, no call per shard)."""
        prefix = self.root.rstrip("/") + "/"
        return [prefix + rel.strip("/") if rel else self.root for rel in rels]

    def uncounted(self) -> Store:
        """This store without its storage counters, for reads of the dataset's own metadata (the
        record index file), which the counters of shard reads leave out as they leave out the manifest."""
        other = copy.copy(self)
        other.stats = None
        return other

    def count(self, **counts: int) -> None:
        """Add to the storage counters (when the store has them)."""
        if self.stats is not None:
            self.stats.add(**counts)

    def _retrying(self, call: Any, url: str) -> Any:
        """`call()` (one request) in a request slot, retried (each attempt in a slot of its own: none
        is held while waiting to retry) and counted."""

        def in_slot() -> Any:
            with self.slots.slot():
                return call()

        return retrying(
            in_slot,
            url,
            self.retry,
            on_retry=lambda: self.count(retries=1),
            on_throttled=lambda: self.count(throttled=1),
        )

    # -- reading ------------------------------------------------------------------------------------

    def exists(self, rel: str) -> bool:
        if not self.remote:
            return os.path.exists(self.url(rel))
        url = self.url(rel)
        return bool(self._retrying(lambda: self.fs.exists(url), url))

    def read_bytes(self, rel: str) -> bytes:
        """A whole file (FileNotFoundError naming it when absent); `rel` relative to the root, or
        (remote) a full URL."""
        url = rel if self.remote and is_url(rel) else self.url(rel)
        if not self.remote:
            return Path(url).read_bytes()
        data = self._retrying(lambda: self.fs.cat_file(url), url)
        self.count(bytes_fetched=len(data), requests=1)
        return bytes(data)

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_bytes(rel))

    def read_range(self, rel_or_url: str, offset: int, size: int) -> bytes:
        """`size` bytes at `offset` of a remote object (`rel_or_url` relative to the root, or a full URL)."""
        url = rel_or_url if is_url(rel_or_url) else self.url(rel_or_url)

        def call() -> bytes:
            data = self.fs.cat_file(url, start=offset, end=offset + size)
            if len(data) > size:  # the whole object, or more: retrying cannot help
                raise RemoteReadError(
                    url,
                    1,
                    RangeIgnored(
                        f"asked for {size} bytes at offset {offset}, got {len(data)}: the server "
                        "does not answer range requests; serve the dataset from one that does (S3, nginx, ...)",
                        bytes(data),
                    ),
                )
            if len(data) < size:
                raise ShortRead(f"asked for {size} bytes at offset {offset}, got {len(data)}")
            return bytes(data)

        data = self._retrying(call, url)
        self.count(bytes_fetched=size, requests=1)
        return data

    @contextlib.contextmanager
    def open(self, rel: str) -> Iterator[IO[bytes]]:
        """A binary stream of a whole file (remote: read ahead in large blocks)."""
        url = self.url(rel)
        if not self.remote:
            with open(url, "rb") as fh:
                yield fh
            return
        handle = self._retrying(lambda: self.fs.open(url, "rb", block_size=8 << 20, cache_type="readahead"), url)
        try:
            yield handle
            self.count(bytes_fetched=int(getattr(handle, "loc", 0)), requests=1)
        finally:
            handle.close()

    def sizes(self, rel_dir: str) -> dict[str, int] | None:
        """Name -> size of the files directly in `rel_dir` (one listing); {} when it does not exist;
        None when the listing gives no sizes or the protocol cannot list (HTTP index pages)."""
        found = self.listing(rel_dir)
        return None if found is None else dict(zip(*found))

    def listing(self, rel_dir: str) -> tuple[list[str], list[int]] | None:
        """(names, sizes) of the files directly in `rel_dir`, in listing order (`sizes` as two
        lists: at a million files a dictionary costs more than the listing); ([], []) when it does
        not exist; None when the listing gives no sizes or the protocol cannot list."""
        url = self.url(rel_dir)
        if not self.remote:
            if not os.path.isdir(url):
                return [], []
            with refusal_named(url):  # permission denied, too many open files: said as that, naming the folder
                return local_listing(url)
        try:
            self.fs.invalidate_cache(url)  # a listing from before our own writes is no answer
            entries = self._retrying(lambda: self.fs.ls(url, detail=True), url)
        except FileNotFoundError:
            return [], []
        except (NotImplementedError, ValueError):
            return None
        self.count(requests=1)
        files = [e for e in entries if e.get("type") == "file"]
        if any(e.get("size") is None for e in files):
            return None  # an HTTP index page names files without sizes
        return [str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in files], [int(e["size"]) for e in files]

    def size(self, rel: str) -> int:
        """The size of one file (a HEAD request when remote)."""
        url = self.url(rel)
        if not self.remote:
            return os.path.getsize(url)
        info = self._retrying(lambda: self.fs.info(url), url)
        self.count(requests=1)
        return int(info["size"])

    # -- writing ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def write(self, rel: str, mode: str = "wb") -> Iterator[IO[Any]]:
        """Write `rel` atomically: readers see the old file (or none) or the whole new one."""
        with atomic_write(self.url(rel), mode, storage_options=self.storage_options) as fh:
            yield fh

    def write_text(self, rel: str, text: str) -> None:
        """Write `rel` atomically as UTF-8 text (bytes, so local files and objects alike)."""
        with self.write(rel) as fh:
            fh.write(text.encode())

    def makedirs(self, rel: str = "") -> None:
        """Create a directory (a no-op on object stores, which have none)."""
        if not self.remote:
            os.makedirs(self.url(rel), exist_ok=True)

    def remove(self, rel: str) -> None:
        """Remove a file if it is there."""
        if not self.remote:
            Path(self.url(rel)).unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.url(rel))

    def remove_tree(self, rel: str) -> None:
        """Remove a directory and all under it, if it is there."""
        if not self.remote:
            shutil.rmtree(self.url(rel), ignore_errors=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.url(rel), recursive=True)

    def names(self, rel_dir: str = "") -> list[str]:
        """Names directly under `rel_dir` (files and directories)."""
        if not self.remote:
            path = self.url(rel_dir)
            return sorted(os.listdir(path)) if os.path.isdir(path) else []
        url = self.url(rel_dir)
        try:
            self.fs.invalidate_cache(url)
            entries = self._retrying(lambda: self.fs.ls(url, detail=False), url)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)
