"""Refusing a `WebDataModule` loader with fewer shards than workers, when it is iterated.

webdataset hands each loader worker whole shards (``split_by_worker``), and a worker left without
one raises "No samples found in dataset; perhaps you have fewer shards than workers" inside the
worker, behind a worker traceback. A bacterial genome prepared with large shards has a single
shard per split, so ``num_workers=2`` hits this on the first try: `check_shards_for_workers`
says it in the main process when the loader is iterated (where bionemo-webdatamodule's own tests
expect the `ValueError`, with the words "have fewer shards than workers"), before any worker
starts, naming the split, its shard count and the workers, and what to change (fewer workers, or
more shards: for a dataset written by ``bionemo-wds prepare``, the ``--samples-per-shard`` value
that gives enough shards, worked out from its manifest).
"""

from __future__ import annotations

import math
from typing import Any

from bionemo_wds.errors import ManifestError, OptionError
from bionemo_wds.format import read_manifest
from bionemo_wds.storage.location import join


def needs_worker_shards(dataset_kwargs: dict[str, Any]) -> bool:
    """Does a WebDataset made with these arguments give every loader worker shards of its own?
    (Not when it resamples shards, splits them its own way, or was told an empty worker is fine.)"""
    if dataset_kwargs.get("resampled") or dataset_kwargs.get("mode") == "resampled":
        return False
    return "workersplitter" not in dataset_kwargs and dataset_kwargs.get("empty_check", True)


def samples_per_shard_for(n_samples: int, n_shards: int) -> int:
    """The largest ``--samples-per-shard`` that cuts `n_samples` windows into at least `n_shards`
    shards (prepare writes ``ceil(n / samples_per_shard)`` shards per split); 0 when there are fewer
    windows than shards."""
    if n_samples < n_shards:
        return 0
    if n_shards <= 1:
        return n_samples
    return math.ceil(n_samples / (n_shards - 1)) - 1


def prepared_remedy(directory: str, prefix: str, workers: dict[str, int]) -> str:
    """What to change in the ``bionemo-wds prepare`` run that wrote `directory` (a split directory
    beside the dataset's ``manifest.json``) so that every split named in `workers` has a shard for
    each of its loader workers (``--samples-per-shard`` applies to all splits); a general hint when
    it was not written by prepare."""
    root = directory.rstrip("/").rsplit("/", 1)[0] if "/" in directory.rstrip("/") else "."
    needed = max(workers.values())
    try:
        manifest = read_manifest(root)
        if manifest.params.prefix != prefix:
            raise ManifestError("the manifest is not about these shards")
        windows = {split: int(manifest.splits[split].n_samples) for split in workers if split in manifest.splits}
    except Exception:  # not a prepared dataset (or not readable): the general hint
        return f"or write the split in {needed} or more shards"
    if not windows:
        return f"or write the split in {needed} or more shards"
    fits = {split: samples_per_shard_for(n, workers[split]) for split, n in windows.items()}
    tightest = min(fits, key=lambda split: (fits[split], split))
    if fits[tightest] == 0:
        return f"as the {tightest} split has only {windows[tightest]} window(s), too few for {workers[tightest]} shards"
    return (
        f"or prepare the dataset again with --samples-per-shard {fits[tightest]} or fewer, so each split has a shard "
        f"per worker (the {tightest} split has {windows[tightest]} windows for num_workers={workers[tightest]})"
    )


def check_shards_for_workers(
    split: str, urls: list[str], directory: str, prefix: str, workers: int, remedy: str
) -> None:
    """A clear `ValueError` (an `OptionError`) when `split` has fewer shards (`urls`) than loader `workers`."""
    if workers <= len(urls):
        return
    raise OptionError(
        f"the {split} split has {len(urls)} shard(s) ({join(directory, f'{prefix}-*.tar')}) but num_workers={workers}, "
        f"so its loader workers would have fewer shards than workers: webdataset gives each worker whole shards, so a "
        f"worker would have none; use num_workers={len(urls)} or fewer, {remedy}"
    )
