"""A prepared dataset's manifest, checked before any loader reads it.

The manifest is the list of what to read: it must agree with itself (split totals), with the
request (``seq_length``), and with the shards it names (present, of the listed size). Shards found
but not listed are ignored with a warning. The checks use one listing per split directory (never a
glob on a bucket), or a size request per shard where the protocol cannot list.

A shard missing or of another size than listed is an error here under ``handler="raise"``; under
``handler="warn"`` its size found goes on to the reader (`planned.SplitRecords`), which warns about
it, counts it and reads its records past the end of the file as filler when its split is read.
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bionemo_wds.errors import OptionError
from bionemo_wds.format import MANIFEST_NAME, Manifest, read_manifest, unlisted_shards
from bionemo_wds.format.shard_columns import ShardColumns, ShardInfo, shard_values
from bionemo_wds.load.shard_errors import (
    CorruptShardError,
    Handler,
    ShardErrorPolicy,
    ShardSizeError,
    raise_on_error,
    resolve_handler,
    size_problem,
)
from bionemo_wds.load.shard_urls import MISSING, UrlValues, match_listing
from bionemo_wds.storage.cache import RangeCache
from bionemo_wds.storage.stats import StorageStats
from bionemo_wds.storage.store import Store


def read_checked_manifest(
    store: Store, seq_length: int | None, handler: str | Handler = "raise", warn_strays: bool = True
) -> tuple[Manifest, Mapping[str, int | None]]:
    """(manifest, shard URL -> size found, None for a missing shard) of the dataset at `store`; clear
    errors for disagreements (a shard's size only under ``handler="raise"``). `warn_strays`: warn
    about shard files the manifest does not list (one rank does)."""
    manifest, sizes, _ = _read_checked(store, seq_length, handler, warn_strays)
    return manifest, sizes


def _read_checked(
    store: Store, seq_length: int | None, handler: str | Handler, warn_strays: bool
) -> tuple[Manifest, UrlValues, UrlValues]:
    """`read_checked_manifest`, and shard URL -> windows the manifest lists (both columns over the
    manifest's shard paths: no URL string or dictionary entry per shard)."""
    manifest = read_manifest(store)
    params = manifest.params
    where = store.url(MANIFEST_NAME)
    if (
        seq_length is not None
        and seq_length != params.seq_length
        and getattr(params, "layout", "windows") != "sequences"
    ):
        raise OptionError(
            f"{store.root} was cut for seq_length {params.seq_length} (windows of {params.window_length} "
            f"bases); seq_length={seq_length} was asked for. Use seq_length={params.seq_length}, or prepare "
            f"again with --seq-length {seq_length}, or with --layout sequences (which serves any seq_length)"
        )
    sizes, expected = UrlValues(store), UrlValues(store)
    for name, info in manifest.splits.items():
        counts = shard_values(info.shards, "n_samples")
        held = int(counts.sum()) if isinstance(counts, np.ndarray) else sum(counts)
        if info.n_samples != held:
            raise CorruptShardError(
                f"{where} disagrees with itself: the {name} split lists n_samples "
                f"{info.n_samples} but its shards hold {held} (run `bionemo-wds verify`, or prepare again)"
            )
        raises = resolve_handler(handler) is raise_on_error
        listing = store.listing(name)  # None: the protocol cannot list; each shard is asked for its size
        matched, columns = None, info.shards
        if listing is not None and isinstance(columns, ShardColumns):
            matched = match_listing(columns.paths, f"{name}/", *listing)
        if matched is not None and isinstance(columns, ShardColumns):  # every path in the split's folder
            found_sizes, unlisted = matched
            listed = shard_values(columns, "bytes")
            if isinstance(listed, np.ndarray):
                odd = (found_sizes == MISSING) | (found_sizes != listed)
            else:  # sizes that are not all integers (a damaged manifest): compared as they are
                odd = np.array([size == MISSING or size != want for size, want in zip(found_sizes.tolist(), listed)])
            _warn_strays(store, name, unlisted if warn_strays else [], params.prefix)
            if raises and odd.any():
                number = int(np.flatnonzero(odd)[0])
                size = None if found_sizes[number] == MISSING else int(found_sizes[number])
                url = store.urls([columns.paths[number]])[0]
                raise ShardSizeError(size_problem(url, size, listed[number], where))
        else:
            found_sizes = _sizes_one_by_one(store, name, info.shards, listing, raises, warn_strays, params.prefix)
        sizes.add(name, info.shards, found_sizes)
        expected.add(name, info.shards, np.asarray(counts, dtype=np.int64))
    return manifest, sizes, expected


def _warn_strays(store: Store, split: str, names: list[str], prefix: str) -> None:
    """Warn about the shard files among `names` (found in `split`'s folder, listed by no path)."""
    strays = unlisted_shards(split, names, prefix, ())
    if strays:  # the manifest is the list: a stray copy is never read
        warnings.warn(
            f"{store.root}: ignoring {len(strays)} file(s) not listed in manifest.json: "
            f"{', '.join(strays[:3])}{', ...' if len(strays) > 3 else ''}",
            stacklevel=4,
        )


def _sizes_one_by_one(
    store: Store,
    split: str,
    shards: Sequence[ShardInfo],
    listing: tuple[list[str], list[int]] | None,
    raises: bool,
    warn_strays: bool,
    prefix: str,
) -> np.ndarray:
    """The size found of each shard (`MISSING`: none), by its file name in the listing, or asked
    for one by one where the protocol cannot list (each checked before the next is asked for)."""
    paths, listed = shard_values(shards, "path"), shard_values(shards, "bytes")
    where = store.url(MANIFEST_NAME)
    found = None if listing is None else dict(zip(*listing))
    if warn_strays:  # one rank looks for files the manifest does not list
        folder = f"{split}/"  # the names found that no path of the split names, as a set difference
        listed_names = {path[len(folder) :] for path in paths if path.startswith(folder)}
        _warn_strays(store, split, sorted((found or {}).keys() - listed_names), prefix)
    if found is not None:
        split_sizes = [found.get(path.rsplit("/", 1)[-1]) for path in paths]
        if raises:
            odd = [n for n, (size, want) in enumerate(zip(split_sizes, listed)) if size != want][:1]
            for number in odd:
                url = store.urls([paths[number]])[0]
                raise ShardSizeError(size_problem(url, split_sizes[number], listed[number], where))
    else:
        split_sizes = []
        for path, want in zip(paths, listed):
            size = _size(store, path)
            if size != want and raises:
                raise ShardSizeError(size_problem(store.urls([path])[0], size, want, where))
            split_sizes.append(size)
    return np.array([MISSING if size is None else size for size in split_sizes], dtype=np.int64)


def _size(store: Store, rel: str) -> int | None:
    """The size of one shard (a request each where the protocol cannot list); None when missing."""
    try:
        return store.size(rel)
    except FileNotFoundError:
        return None


@dataclass
class OpenedDataset:
    """What a loader needs of a prepared dataset before it reads: the checked manifest, the shard
    sizes found, the damaged-shard policy, the storage counters and (remote) the node's range cache."""

    manifest: Manifest
    shard_sizes: Mapping[str, int | None]
    policy: ShardErrorPolicy
    stats: StorageStats
    cache: RangeCache | None


def open_dataset(
    store: Store,
    seq_length: int | None,
    handler: str | Handler,
    warn_strays: bool,
    cache_dir: str | None = None,
    cache_limit: int | None = None,
) -> OpenedDataset:
    """The dataset at `store`, checked (`read_checked_manifest`), with a policy and counters that live
    in shared memory of the context the loader workers start with, and a `RangeCache` in `cache_dir`
    for a remote dataset (a local one is read in place: a `cache_dir` for it warns)."""
    manifest, sizes, expected = _read_checked(store, seq_length, handler, warn_strays)
    # the planned reader checks each record against the index itself: no per-record checks here
    policy = ShardErrorPolicy(handler, expected, mp.get_context())
    stats = store.stats = StorageStats(mp.get_context())
    cache = None
    if store.remote and cache_dir is not None:
        cache = RangeCache(cache_dir, cache_limit, stats)
    elif cache_dir is not None:
        warnings.warn(f"cache_dir is for remote datasets; {store.root} is read in place", stacklevel=3)
    return OpenedDataset(manifest, sizes, policy, stats, cache)
