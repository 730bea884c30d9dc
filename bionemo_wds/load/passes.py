"""The passes of a split: its plan set before the workers start, and the loader that runs it.

`PassLoaders` is the part of `GenomicWebDataModule` that turns a split's dataset into loaders:
a pass's plan is fixed in the main process right before its workers start (`start_pass`), the
workers' batches are put back in plan order and counted on the main side, and a split in
``cache_in_memory`` is served by a `MemoryCachedLoader`. It works on the data module's state (the
attributes declared below) and calls its `plan_for` and `epoch_length`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import webdataset as wds

from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.loaders import Split, make_loader
from bionemo_wds.load.memory_cache import MemoryCachedLoader
from bionemo_wds.load.model_inputs import to_tensors
from bionemo_wds.load.plan import Consumed, RankPlan
from bionemo_wds.load.planned import in_order
from bionemo_wds.load.resume import TrainProgress
from bionemo_wds.load.transfer import BatchTransfer
from bionemo_wds.load.world import World
from bionemo_wds.storage.stats import FIELDS as STORAGE_FIELDS
from bionemo_wds.storage.stats import StorageStats
from bionemo_wds.storage.store import Store

log = logging.getLogger("bionemo_wds.load.genomic")  # the data module's log, where users look for it


class PassLoaders:
    """Loaders over a data module's planned splits (mixed into `GenomicWebDataModule`)."""

    # the data module's state these methods work on
    world: World
    micro_batch_size: int
    store: Store
    stats: StorageStats | None
    pin_memory: bool
    epochs: dict[Split, EpochState]
    progress: TrainProgress
    plans: dict[Split, RankPlan]
    datasets: dict[Split, Any]
    transfers: dict[Split, BatchTransfer]
    loader_kwargs: dict[Split, dict[str, Any]]
    pass_start: dict[Split, dict[str, int]]
    cached_splits: set[Split]
    memory_cached: dict[Split, MemoryCachedLoader]
    eval_start: dict[Split, int]
    cache_memory: str
    mixture: Any
    trainer: Any
    plan_for: Callable[[Split, int, list[Consumed] | None], RankPlan]
    epoch_length: Callable[..., int]
    trainer_epoch: Callable[[], int | None]
    state_dict: Callable[[], dict[str, Any]]
    restore_from_loader: Callable[[dict[str, Any]], None]

    def start_pass(self, split: Split) -> None:
        """Before a pass's workers start: its plan (from a restored position when there is one)."""
        epoch = self.epochs[split].epoch
        consumed = self.progress.start_pass(epoch) if split is Split.train else None
        plan = self.plan_for(split, epoch, consumed)
        start = self.eval_start.pop(split, 0) if split is not Split.train else 0
        if start:  # the batches before it are held in memory (cache_in_memory)
            plan = RankPlan(plan.batches[start:], first_batch=start, total_batches=plan.total_batches)
        self.plans[split] = plan
        if split is Split.train and plan.left_out and self.world.rank == 0:
            log.info(
                "epoch %d: %d train window(s) left out (fewer than one global batch of %d)",
                epoch,
                plan.left_out,
                self.micro_batch_size * self.world.size,
            )
        transfer = self.transfers.get(split)
        if transfer is not None:
            transfer.new_generation()
        if self.stats is not None:
            self.pass_start[split] = self.stats.snapshot()

    def current_plan(self, split: Split) -> RankPlan:
        """The plan of the pass under way (set by `start_pass`)."""
        return self.plans[split]

    def count_yielded(self, src: Any) -> Any:
        """(main side) Counts training batches as the loader yields them when no Trainer consumes them."""
        for batch in src:
            if self.trainer is None:
                self.progress.batches += 1
            yield batch

    def count_sources(self, src: Iterable[Any]) -> Iterator[Any]:
        """(main side) A mixture's per-dataset counts of the training pass (`mixed.Mixture.count`)."""
        train = Split.train
        yield from self.mixture.count(src, lambda: self.epochs[train].epoch, lambda: len(self.plans[train]))

    def log_storage(self, split: Split, src: Iterable[Any]) -> Iterator[Any]:
        """(main side) After a pass over a remote dataset, log what it fetched (`storage_stats`)."""
        yield from src
        if self.store.remote and self.stats is not None and split in self.pass_start:
            counts = StorageStats.since(self.stats.snapshot(), self.pass_start[split])
            log.info("%s epoch %d: %s", split.name, self.epochs[split].epoch, StorageStats.describe(counts))

    @property
    def storage_stats(self) -> dict[str, int]:
        """What the storage layer did so far, over all loader workers: bytes fetched, requests,
        cache hits and misses, retries, shards skipped (all zero for a local dataset)."""
        if self.mixture is not None:
            return self.mixture.storage_stats()
        return self.stats.snapshot() if self.stats is not None else dict.fromkeys(STORAGE_FIELDS, 0)

    # -- loaders ----------------------------------------------------------------------------------

    def loader(self, split: Split) -> Any:
        """A loader over the split's planned batches. Its ``len()`` is the epoch's number of batches, so
        Lightning knows the epoch (progress bars, ``estimated_stepping_batches``, a float
        ``val_check_interval``); the train loader's ``state_dict`` is the data module's. A split in
        `cache_in_memory` gets one `MemoryCachedLoader` for good."""
        if split in self.cached_splits and split in self.datasets:
            if split not in self.memory_cached:
                read, start_at = partial(self.shard_loader, split), partial(self.eval_start.__setitem__, split)
                self.memory_cached[split] = MemoryCachedLoader(
                    read, start_at, self.epoch_length(split), self.cache_memory
                )
            return self.memory_cached[split]
        return self.shard_loader(split)

    def shard_loader(self, split: Split) -> wds.WebLoader:
        """A loader reading the split's planned batches from its shards."""
        if split not in self.datasets:
            raise ValueError(f"the {split.name} dataloader was asked for before setup() built the {split.name} dataset")
        transfer = self.transfers.get(split)
        first = partial(lambda s: self.plans[s].first_batch, split)
        prebatch = [
            *([transfer.from_workers()] if transfer else []),
            in_order(first),
            *([self.count_yielded] if split is Split.train else []),
            *([self.count_sources] if split is Split.train and self.mixture is not None else []),
            partial(self.log_storage, split),
            to_tensors(pin_memory=self.pin_memory),
        ]
        epoch = self.epochs[split].next_epoch if self.trainer_epoch() is None else self.trainer_epoch()
        restored = self.progress.restored
        consumed = restored[1] if split is Split.train and restored and restored[0] == epoch else None
        length = self.epoch_length(split, consumed)
        train = split is Split.train
        return make_loader(
            self.datasets[split],
            self.loader_kwargs[split],
            prebatch,
            epoch=self.epochs[split],
            epoch_source=self.trainer_epoch,
            before_pass=partial(self.start_pass, split),
            length=length,
            after_pass=self.progress.finish_pass if train else None,
            # the train loader carries the data module's checkpoint state: Lightning sees it resumable
            state=(self.state_dict, self.restore_from_loader) if train else None,
        )
