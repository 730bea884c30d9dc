"""The loaders of one split's `GenomicDataset`: passes planned before the workers start, batches in order.

`SplitLoaders` turns a dataset into the loaders a data module hands Lightning. A pass's plan is
fixed in the main process right before its workers start (`start_pass`: the epoch comes from the
Trainer, else from the passes counted), the workers build the dataset's batches
(`GenomicDataset.batch_stages`) and send them through shared memory (`load.transfer`), and the main
process puts them back in plan order (`reader.in_order`), counts them and makes tensors. A split in
``cache_in_memory`` is served by a `MemoryCachedLoader`.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import webdataset as wds

from bionemo_wds.lightning.loaders import make_loader
from bionemo_wds.lightning.memory_cache import MemoryCachedLoader
from bionemo_wds.load.batch.to_torch import keep_numpy, to_tensors
from bionemo_wds.load.dataset import GenomicDataset
from bionemo_wds.load.plan import RankPlan
from bionemo_wds.load.plan.progress import EpochState, TrainProgress
from bionemo_wds.load.reader import in_order
from bionemo_wds.load.splits import Split
from bionemo_wds.load.transfer import BatchTransfer
from bionemo_wds.storage.stats import StorageStats

log = logging.getLogger("bionemo_wds.lightning.datamodule")  # the data module's log, where users look for it

#: Batch messages each loader worker may have in flight; its transfer ring has 2 more slots.
PREFETCH = 2


class CurrentPlan:
    """The plan of the pass under way, as the loader's workers read it: set in the main process when
    a pass starts, before its workers start. A spawned worker gets it pickled and nothing else of
    the loaders (a bound method of theirs would take the data module, its trainer and Lightning's
    imports into every spawned worker)."""

    def __init__(self) -> None:
        self.plan: RankPlan | None = None

    def __call__(self) -> RankPlan:
        assert self.plan is not None, "a pass's plan is set when it starts"
        return self.plan


class SplitLoaders:
    """Loaders over one split's dataset.

    Args:
        dataset: the split's `GenomicDataset` (compact batches: ``model_inputs=False``).
        epoch: the split's `EpochState` (shared with the data module's `set_epoch`).
        trainer_epoch: the Trainer's current epoch, None without a Trainer (passes are then counted).
        progress: the training progress a checkpoint carries (train split only).
        state: (get, set) of the data module's checkpoint state (train split only: its loader is then
            what Lightning calls resumable).
        num_workers, pin_memory, transfer_bytes, transfer_timeout: see `GenomicWebDataModule`.
        cache_memory: keep the batches in memory after the first pass (``cache_in_memory``), in this
            kind of memory; None: read every pass.
        counting: whether the main process counts the training batches it yields (no Trainer consumes them).
    """

    def __init__(
        self,
        dataset: GenomicDataset,
        epoch: EpochState,
        trainer_epoch: Callable[[], int | None],
        progress: TrainProgress | None,
        state: tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]] | None,
        num_workers: int,
        pin_memory: bool,
        transfer_bytes: int,
        transfer_timeout: float,
        cache_memory: str | None,
        counting: Callable[[], bool],
    ):
        self.dataset, self.epoch, self.trainer_epoch = dataset, epoch, trainer_epoch
        self.progress, self.state, self.pin_memory, self.counting = progress, state, pin_memory, counting
        self.current = CurrentPlan()  # what the workers are given: the plan, nothing of the data module
        self.pass_start: dict[str, int] | None = None
        self.eval_start = 0  # a cached split's next pass starts here (batches before it are held)
        self.memory_cached: MemoryCachedLoader | None = None
        self.cache_memory = cache_memory
        self.transfer: BatchTransfer | None = None
        stages: list[Any] = dataset.batch_stages(self.current, epoch)
        self.loader_kwargs: dict[str, Any] = {"batch_size": None, "num_workers": num_workers, "collate_fn": keep_numpy}
        if num_workers:
            schema = dataset.schema
            per_message = max(1, transfer_bytes // max(1, schema.rows * schema.window))
            context = mp.get_context()
            self.transfer = BatchTransfer(
                num_workers, PREFETCH + 2, per_message * schema.shared_nbytes, context, transfer_timeout
            )
            stages.append(self.transfer.to_main(per_message))
            self.loader_kwargs.update(prefetch_factor=PREFETCH, multiprocessing_context=context)
        self.pipeline = wds.DataPipeline(*stages)

    @property
    def train(self) -> bool:
        return self.dataset.split is Split.train

    def start_pass(self) -> None:
        """Before a pass's workers start: its plan (from a restored position when there is one)."""
        epoch = self.epoch.epoch
        consumed = self.progress.start_pass(epoch) if self.progress is not None else []
        plan = self.dataset.plan(epoch, consumed)
        start, self.eval_start = self.eval_start, 0
        if start:  # the batches before it are held in memory (cache_in_memory)
            plan = RankPlan(plan.batches[start:], first_batch=start, total_batches=plan.total_batches)
        self.current.plan = plan
        world = self.dataset.world
        if self.train and plan.left_out and world.rank == 0:
            log.info(
                "epoch %d: %d train window(s) left out (fewer than one global batch of %d)",
                epoch,
                plan.left_out,
                self.dataset.micro_batch_size * world.size,
            )
        if self.transfer is not None:
            self.transfer.new_generation()
        self.pass_start = self.dataset.storage_stats

    @property
    def plan(self) -> RankPlan | None:
        """The plan of the pass under way; None before the first pass starts."""
        return self.current.plan

    def current_plan(self) -> RankPlan:
        """The plan of the pass under way (set by `start_pass`)."""
        return self.current()

    def count_yielded(self, src: Iterable[Any]) -> Iterator[Any]:
        """(main side) Training batches as they are yielded: each dataset's windows counted
        (`GenomicDataset.count_sources`), and the batch counted as consumed when no Trainer consumes it."""
        pass_epoch, plan_length = (lambda: self.epoch.epoch), (lambda: len(self.current_plan()))
        for batch in self.dataset.count_sources(src, pass_epoch, plan_length):
            if self.progress is not None and self.counting():
                self.progress.batches += 1
            yield batch

    def log_storage(self, src: Iterable[Any]) -> Iterator[Any]:
        """(main side) After a pass over a remote dataset, log what it fetched (`storage_stats`)."""
        yield from src
        if self.dataset.sources.remote and self.pass_start is not None:
            counts = StorageStats.since(self.dataset.storage_stats, self.pass_start)
            log.info("%s epoch %d: %s", self.dataset.split.name, self.epoch.epoch, StorageStats.describe(counts))

    def loader(self) -> Any:
        """A loader over the split's planned batches; its ``len()`` is the epoch's number of batches
        (Lightning's progress bars, ``estimated_stepping_batches``); the train loader's
        ``state_dict`` is the data module's. A cached split gets one `MemoryCachedLoader` for good."""
        if self.cache_memory is not None:
            if self.memory_cached is None:
                self.memory_cached = MemoryCachedLoader(
                    self.shard_loader, self.start_at, self.dataset.epoch_length(), self.cache_memory
                )
            return self.memory_cached
        return self.shard_loader()

    def start_at(self, batch: int) -> None:
        """Make the next pass start at `batch` (the batches before it are held in memory)."""
        self.eval_start = batch

    def shard_loader(self) -> wds.WebLoader:
        """A loader reading the split's planned batches from its shards."""
        prebatch = [
            *([self.transfer.from_workers()] if self.transfer is not None else []),
            in_order(lambda: self.current_plan().first_batch),
            *([self.count_yielded] if self.train else []),
            self.log_storage,
            to_tensors(pin_memory=self.pin_memory),
        ]
        trainer_epoch = self.trainer_epoch()
        epoch = self.epoch.next_epoch if trainer_epoch is None else trainer_epoch
        consumed = self.progress.restored_for(epoch) if self.progress is not None else None
        return make_loader(
            self.pipeline,
            self.loader_kwargs,
            prebatch,
            epoch=self.epoch,
            epoch_source=self.trainer_epoch,
            before_pass=self.start_pass,
            length=self.dataset.epoch_length(consumed),
            after_pass=self.progress.finish_pass if self.progress is not None else None,
            state=self.state,
        )
