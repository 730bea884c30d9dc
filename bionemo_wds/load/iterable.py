"""`GenomicIterableDataset`: prepared shards as a plain `torch.utils.data.IterableDataset`.

For teams without Lightning: the same epoch plan, batches and checkpoint state as
`GenomicWebDataModule` (it is built on one), usable with a bare ``DataLoader(ds, batch_size=None,
num_workers=N)``. Each pass deals the plan's batches to the loader's workers round-robin, batch b
to worker ``b % N``, which is the order a `DataLoader` takes them from its workers, so the batches
come out in plan order, identical for any number of workers.

A `DataLoader` never shows the dataset which batches its user took, so resuming needs the count:
``ds.state_dict(batches=n)`` after `n` batches of the epoch (without workers the dataset counts
them itself), ``ds.load_state_dict(state)`` before the next pass. Call ``ds.set_epoch(e)`` before
each epoch's pass, as with a `DistributedSampler`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset

from bionemo_wds.errors import OptionError
from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.genomic import GenomicWebDataModule
from bionemo_wds.load.loaders import Split, as_split
from bionemo_wds.load.model_inputs import tensors
from bionemo_wds.load.plan import Consumed, RankPlan
from bionemo_wds.load.resume import TrainProgress
from bionemo_wds.load.world import in_loader_worker

#: The Lightning stage that reads each split (the data module sets up splits by stage).
STAGE_OF = {Split.train: "fit", Split.val: "validate", Split.test: "test"}


class GenomicIterableDataset(IterableDataset):
    """Batches of one split of a prepared dataset, for a plain `DataLoader` (``batch_size=None``).

    Args:
        root: dataset root (local directory or URL), as `GenomicWebDataModule`'s ``shards`` (None with
            ``datasets=`` or ``blend=``: the mixed train split of several datasets).
        split: "train", "val" or "test" (or a `Split`).
        micro_batch_size: windows per batch (on each data-parallel rank).
        model_inputs: yield ``tokens``/``labels``/``loss_mask``/``position_ids`` (default); False
            yields the compact uint8 batches (8x smaller across the worker boundary), which
            `model_inputs` expands in the main process.
        **options: any other `GenomicWebDataModule` argument (seed, rc_prob, control_tags,
            fold_case, soft_mask_weight, tag_dropout, shuffle_buffer, epoch, dp_rank/dp_size,
            storage_options, cache_dir, handler, ...). The data-parallel rank and size default to
            torch.distributed's.
    """

    def __init__(
        self,
        root: str | None = None,
        split: str | Split = "train",
        micro_batch_size: int = 8,
        model_inputs: bool = True,
        **options: Any,
    ):
        super().__init__()
        self.split = as_split(split)
        self.module = GenomicWebDataModule(None if root is None else str(root), micro_batch_size, **options)
        self.module.setup(STAGE_OF[self.split])
        assert self.module.manifest is not None
        if self.split not in self.module.records:
            where = root if root is not None else "a blend"
            raise OptionError(f"{where} has no {self.split.name} split here (a blend's val and test are per dataset)")
        self.emit_model_inputs = model_inputs
        self.epoch = 0
        self.restored: tuple[int, list[Consumed]] | None = None  # (epoch, segments) from a checkpoint
        self.counted = 0  # batches of the current pass this process yielded (no loader workers)

    # -- the plan -----------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next pass (seeds its order, reverse complement and tag dropout)."""
        if epoch < 0:
            raise OptionError(f"epoch must be non-negative, got {epoch}")
        self.epoch = epoch

    def consumed(self) -> list[Consumed]:
        """Batches of this epoch consumed before a restore (none without one)."""
        if self.restored is not None and self.restored[0] == self.epoch:
            return self.restored[1]
        return []

    def plan(self) -> RankPlan:
        """This rank's batches of the current epoch, from the restored position."""
        return self.module.plan_for(self.split, self.epoch, self.consumed())

    def __len__(self) -> int:
        """Batches of the pass (after a restore: the rest of the epoch)."""
        return len(self.plan())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        module, plan = self.module, self.plan()
        # unit=1: batch b to worker b % workers, the order a DataLoader takes them in
        batches, build = module.batch_stages(self.split, lambda: plan, EpochState(self.epoch), unit=1)
        counting = not in_loader_worker()
        self.counted = 0
        for batch in build(iter(batches)):
            del batch["index"], batch["filler"]
            out = tensors(batch)
            if self.emit_model_inputs:
                out = module.model_inputs(out)
            if counting:
                self.counted += 1
            yield out

    def model_inputs(self, compact: dict[str, Any]) -> dict[str, Any]:
        """Compact batch -> model inputs (for ``model_inputs=False``)."""
        return self.module.model_inputs(compact)

    # -- checkpoints ----------------------------------------------------------------------------------

    def state_dict(self, batches: int | None = None) -> dict[str, Any]:
        """The data module's checkpoint state after `batches` batches of this epoch's pass (default:
        the batches this process yielded, right without loader workers). Loads into either."""
        module = self.module
        before = self.consumed()
        progress = TrainProgress()
        progress.epoch, progress.before = self.epoch, before
        progress.batches = sum(seg.batches for seg in before) + (self.counted if batches is None else batches)
        total = module.epoch_length(self.split, before)
        return progress.state(module.seed, module.world.size, module.micro_batch_size, total)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint state (this dataset's or a `GenomicWebDataModule`'s): the next
        pass is its epoch, from the batch after the last one consumed."""
        self.module.load_state_dict(state)
        self.restored = self.module.progress.restored
        self.epoch = int(state.get("epoch", 0))
