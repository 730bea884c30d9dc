"""Which epoch a loader pass belongs to, set in the main process before its workers start.

`EpochState` is shared by a split's stages (shard order, shuffle, reverse complement); `EpochLoader`
sets it at the start of every pass, from the trainer's epoch when there is a trainer (Lightning's
extra ``iter()`` calls and resumed runs do not shift it), else by counting the passes that ran to
their end: a pass stopped early (``next(iter(loader))`` to peek at a batch, a ``break``) does not
count, so the next pass is the same epoch again, from its start. `set_epoch` moves on explicitly.

A loader given `state` (the training split's) is what Lightning calls resumable: it has
``state_dict``/``load_state_dict``, which are the data module's (the epoch and the batches consumed
in it), so Lightning saves them with its loop and does not warn that a mid-epoch resume is unreliable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import webdataset as wds
from torch.utils.data import DataLoader, IterableDataset

from bionemo_wds.load.plan.progress import EpochState


class EpochLoader(wds.WebLoader):
    """WebLoader whose every pass (``iter``) is one epoch: it sets the shared `EpochState` first.

    `before_pass` runs right before the pass's workers start (the batch transfer opens a new
    generation there).
    """

    def __init__(
        self,
        *args: Any,
        epoch_state: EpochState,
        epoch_source: Callable[[], int | None] | None = None,
        before_pass: Callable[[], None] | None = None,
        after_pass: Callable[[], None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.epoch_state = epoch_state
        self.epoch_source = epoch_source
        self.before_pass = before_pass
        self.after_pass = after_pass

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch_source() if self.epoch_source is not None else None
        epoch = self.epoch_state.next_epoch if epoch is None else epoch
        self.epoch_state.epoch = epoch
        self.epoch_state.next_epoch = epoch  # until the pass runs to its end (a peek does not count)
        return self.run_pass(epoch)

    def run_pass(self, epoch: int) -> Iterator[Any]:
        """One pass of `epoch`; a generator, so `before_pass` runs when iteration starts, right before
        the workers start. Only a pass that runs to its end moves the next pass on to the next epoch."""
        if self.before_pass is not None:
            self.before_pass()
        yield from super().__iter__()
        self.epoch_state.next_epoch = epoch + 1
        if self.after_pass is not None:
            self.after_pass()

    def iterator1(self) -> Iterator[Any]:
        """One pass through the pipeline (webdataset's ``DataPipeline.iterator1``), its source read
        in this process when the loader has no workers (`in_process`)."""
        loader = self.pipeline[0]
        source = in_process(loader) if in_process_ok(loader) else self.invoke(loader)
        for stage in self.pipeline[1:]:
            source = self.invoke(stage, source)
        return source


class ResumableLoader(EpochLoader):
    """An `EpochLoader` with a checkpoint state (Lightning's ``_Stateful`` protocol): `state` is
    (get, set), the data module's ``state_dict`` and the loader's way of restoring it."""

    def __init__(
        self, *args: Any, state: tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]], **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        """Where the epoch stands: the data module's checkpoint state."""
        return self.state[0]()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a checkpoint's state (the data module's)."""
        self.state[1](state_dict)


def in_process_ok(loader: Any) -> bool:
    """Whether `loader` is a DataLoader whose batches `in_process` can produce: no workers, no
    batching of its own (the dataset yields batches), no pinning, an iterable dataset."""
    return (
        isinstance(loader, DataLoader)
        and loader.num_workers == 0
        and loader.batch_size is None
        and not loader.pin_memory
        and isinstance(loader.dataset, IterableDataset)
    )


def in_process(loader: DataLoader) -> Iterator[Any]:
    """What iterating `loader` yields (`in_process_ok`): its collate function over its dataset.

    For such a loader that is all the DataLoader's single-process iterator does, besides a profiler
    range and a fetcher call per batch, which are left out (README, Benchmark: their cost)."""
    collate = loader.collate_fn
    for item in cast(Iterable[Any], loader.dataset):  # `in_process_ok`: an IterableDataset
        yield collate(item)
