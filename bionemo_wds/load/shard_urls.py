"""Shard URLs and what a loader knows by URL (size found, windows listed), as views over columns.

The loader names a shard by its URL (the store's root joined with the manifest's path) in every
message and lookup. A list of every URL, and dictionaries from URL to size and to window count,
cost about 290 bytes per shard on every rank, for shards the rank mostly never reads. `ShardUrls`
makes a split's URL when one is asked for (from the root and the split's `format.ShardColumns`
paths), and `UrlValues` is the mapping from URL to one number per shard over int64 columns: a
lookup strips the root and finds the path by a binary search (`format.PathColumn.position`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

import numpy as np

from bionemo_wds.format import ShardInfo
from bionemo_wds.format.shard_columns import PathColumn, ShardColumns, shard_values
from bionemo_wds.storage.store import Store

#: The value a `UrlValues` column holds for None (a shard not found).
MISSING = -1


def _root_prefix(store: Store) -> str:
    """What `Store.urls` puts before a shard's path."""
    return store.root.rstrip("/") + "/"


def _paths(shards: Sequence[ShardInfo]) -> PathColumn:
    return shards.paths if isinstance(shards, ShardColumns) else PathColumn([shard.path for shard in shards])


class ShardUrls(Sequence[str]):
    """The URL of each of a split's shards, in shard order (what `Store.urls` gives), each made when asked for."""

    def __init__(self, store: Store, shards: Sequence[ShardInfo]):
        self.root, self.prefix, self.paths = store.root, _root_prefix(store), _paths(shards)

    def _url(self, path: str) -> str:
        return self.prefix + path.strip("/") if path else self.root

    def __len__(self) -> int:
        return len(self.paths)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self._url(path) for path in self.paths[i]]
        return self._url(self.paths[i])

    def __iter__(self) -> Iterator[str]:
        return map(self._url, self.paths)


class UrlValues(Mapping[str, int | None]):
    """Shard URL -> one number per shard (None where a column holds `MISSING`), for the shards of
    the splits added (`add`); keys are the URLs `ShardUrls` makes."""

    def __init__(self, store: Store):
        self.prefix = _root_prefix(store)
        self.splits: dict[str, tuple[PathColumn, np.ndarray]] = {}

    def add(self, split: str, shards: Sequence[ShardInfo], values: np.ndarray) -> None:
        """`split`'s shards and their numbers (int64, `MISSING` for None), in shard order."""
        self.splits[split] = (_paths(shards), np.asarray(values, dtype=np.int64))

    def of_split(self, split: str) -> np.ndarray | None:
        """`split`'s column (int64, `MISSING` for None), None when it was not added."""
        held = self.splits.get(split)
        return None if held is None else held[1]

    def __getitem__(self, url: str) -> int | None:
        if isinstance(url, str) and url.startswith(self.prefix):
            rel = url[len(self.prefix) :]
            for paths, values in self.splits.values():
                number = paths.position(rel)
                if number is not None:
                    value = int(values[number])
                    return None if value == MISSING else value
        raise KeyError(url)

    def __iter__(self) -> Iterator[str]:
        for paths, _ in self.splits.values():
            yield from (self.prefix + path.strip("/") for path in paths)

    def __len__(self) -> int:
        return sum(len(paths) for paths, _ in self.splits.values())


def split_sizes(
    sizes: Mapping[str, int | None], split: str, urls: Sequence[str], shards: Sequence[ShardInfo]
) -> list[int | None]:
    """The size found of each of `split`'s shards (None: missing; a shard `sizes` does not hold: its
    listed size): the split's column of a `UrlValues`, else one lookup per URL."""
    column = sizes.of_split(split) if isinstance(sizes, UrlValues) else None
    if column is not None and len(column) == len(shards):
        return [None if size == MISSING else size for size in column.tolist()]
    return [sizes.get(url, listed) for url, listed in zip(urls, shard_values(shards, "bytes"))]


def match_listing(
    paths: PathColumn, folder: str, names: Sequence[str], sizes: Sequence[int]
) -> tuple[np.ndarray, list[str]] | None:
    """(the size found of each of `paths`, `MISSING` where the listing has no such file; the names
    listed that no path names) for a split whose every path lies directly in `folder` (``train/``),
    from one listing of it (`Store.listing`: `names`, `sizes`). The names are sorted once and each
    path's name found by a binary search, all in numpy: at a million shards a dictionary from name
    to size, and a lookup in it per shard, cost more than the listing. None where a path lies
    elsewhere or a name is not ASCII (the caller then matches names one by one)."""
    raw, prefix = paths.array, folder.encode()
    width, k = raw.dtype.itemsize, len(prefix)
    if width <= k:
        return None
    chars = raw.view(np.uint8).reshape(len(raw), width)
    rest = np.ascontiguousarray(chars[:, k:])
    if not (chars[:, :k] == np.frombuffer(prefix, dtype=np.uint8)).all() or (rest == ord("/")).any():
        return None
    base = rest.view(f"S{width - k}").ravel()
    try:
        listed = np.array(names, dtype="S") if len(names) else np.empty(0, dtype="S1")
    except UnicodeEncodeError:
        return None
    order = np.argsort(listed, kind="stable")
    ranked = listed[order]
    found = np.full(len(base), MISSING, dtype=np.int64)
    matched = np.zeros(len(listed), dtype=bool)
    if len(ranked):
        at = np.minimum(np.searchsorted(ranked, base), len(ranked) - 1)
        hit = ranked[at] == base
        found[hit] = np.asarray(sizes, dtype=np.int64)[order[at[hit]]]
        matched[order[at[hit]]] = True
    return found, [name.decode() for name in listed[~matched].tolist()]
